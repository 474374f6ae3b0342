package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/nvme/host"
)

// TestCompressionEndToEnd: a volume created through the API with zstd
// compression has its replica's store volume compress: a host writes
// generated text over NVMe/TCP, reads it back, and the volume's path
// reports a compression ratio above 2 from this node's store.
func TestCompressionEndToEnd(t *testing.T) {
	cfg := oneNodeConfig(t, t.TempDir(), true /* with a store */)
	n, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	client := adminClient(t, cfg, n.APIAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var v api.VolumeView
	for {
		v, err = client.CreateVolume(ctx, api.CreateVolumeRequest{Name: "z", Size: 16 << 20, Compression: "zstd",
			Hosts: []string{testHostNQN}})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // until the node registered itself
	}
	var c *host.Controller
	for {
		if v, err = client.Volume(ctx, "z"); err == nil && v.Health == "healthy" {
			if c, err = host.Dial(ctx, cfg.NVMe.Advertise, host.Options{SubNQN: v.NQN, HostNQN: testHostNQN}); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("volume not served: %v %+v", err, v)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer c.Close()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var text bytes.Buffer
	for text.Len() < 1<<20 {
		fmt.Fprintf(&text, "block %d of the volume holds words like stripe and segment ", rng.IntN(1000))
	}
	data := text.Bytes()[:1<<20]
	for off := 0; off < len(data); off += 64 << 10 {
		if err := c.Write(ctx, 1, uint64(off/4096), data[off:off+64<<10], false); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	for off := 0; off < len(data); off += 64 << 10 {
		if err := c.Read(ctx, 1, uint64(off/4096), got[off:off+64<<10]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs from what was written")
	}
	for {
		v, err = client.Volume(ctx, "z")
		if err == nil && v.Compression == "zstd" && len(v.Paths) == 1 && v.Paths[0].Compression != nil &&
			v.Paths[0].Compression.LogicalBytes >= int64(len(data)) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no compression reported: %v %+v", err, v.Paths)
		}
		time.Sleep(50 * time.Millisecond) // until the store has destaged it
	}
	cs := v.Paths[0].Compression
	t.Logf("zstd on generated text: %d bytes stored in %d, ratio %.2f", cs.LogicalBytes, cs.StoredBytes, cs.Ratio)
	if cs.Ratio < 2 {
		t.Fatalf("ratio %.2f on text, want at least 2", cs.Ratio)
	}
}
