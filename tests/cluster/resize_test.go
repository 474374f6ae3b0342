package cluster_test

import (
	"context"
	"testing"
	"time"

	"basalt/pkg/nvme/host"
)

// TestResizeVolume grows a volume while a host is connected, with file
// replicas and with the log-structured store: every replica grows first,
// then the namespace; the host writes and reads the new end. With the
// store, every node is then killed -9 and restarted, and the size and both
// ends read back (the growth is durable in each store's metadata).
func TestResizeVolume(t *testing.T) {
	for _, store := range []bool{false, true} {
		name := map[bool]string{false: "files", true: "store"}[store]
		t.Run(name, func(t *testing.T) { testResizeVolume(t, store) })
	}
}

func testResizeVolume(t *testing.T, store bool) {
	tc := startCluster(t, opts{nodes: 3, store: store})
	v := tc.createVolume("grow", 16<<20, 3)
	mp, closePaths := tc.connect(v.NQN)
	defer func() { closePaths() }()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := mp.Write(ctx, 1, 0, block(0, 1), false); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.client(tc.up()).ResizeVolume(ctx, "grow", 32<<20); err != nil {
		t.Fatal(err)
	}
	tc.eventually(30*time.Second, "the resize completes", func() bool {
		v, err := tc.volume("grow")
		return err == nil && v.Size == 32<<20
	})
	// The metadata's size is final before every node serves it: like a
	// real host, write the new end once the namespace change has reached
	// every path.
	tc.eventually(30*time.Second, "every path shows the new size", func() bool {
		for _, p := range mp.Paths(1) {
			if ns, ok := p.Controller.Namespace(1); !ok || ns.Size() != 32<<20 {
				return false
			}
		}
		return true
	})
	last := uint64(32<<20/4096 - 1)
	if err := mp.Write(ctx, 1, last, block(last, 2), false); err != nil {
		t.Fatalf("writing the new last block: %v", err)
	}
	readEnds(ctx, t, mp, last)
	if !store {
		return
	}
	closePaths()
	if v := tc.crashAll("grow"); v.Size != 32<<20 || v.PendingSize != 0 {
		t.Fatalf("after the restart: size %d, pending %d", v.Size, v.PendingSize)
	}
	mp, closePaths = tc.connect(v.NQN)
	readEnds(ctx, t, mp, last)
}

// readEnds reads block 0 (version 1) and the last block (version 2).
func readEnds(ctx context.Context, t *testing.T, mp *host.MultiPath, last uint64) {
	t.Helper()
	buf := make([]byte, 4096)
	for lba, want := range map[uint64]uint64{0: 1, last: 2} {
		if err := mp.Read(ctx, 1, lba, buf); err != nil {
			t.Fatalf("lba %d: %v", lba, err)
		}
		if got, err := versionOf(buf, lba); err != nil || got != want {
			t.Errorf("lba %d: version %d (%v), want %d", lba, got, err, want)
		}
	}
}
