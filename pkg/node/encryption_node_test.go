package node

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/config"
	"basalt/pkg/crypt"
	"basalt/pkg/nvme/host"
)

func writeKeyring(t *testing.T, path string, ids ...string) {
	t.Helper()
	text, err := crypt.NewKeyringText(ids...)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// hostIO writes data at lba of the volume with NQN nqn over NVMe/TCP (FUA),
// or reads it there and checks it is data.
func hostIO(t *testing.T, ctx context.Context, cfg *config.Config, nqn string, lba uint64, data []byte, write bool) {
	t.Helper()
	var c *host.Controller
	for c == nil {
		var err error
		c, err = host.Dial(ctx, cfg.NVMe.Advertise, host.Options{SubNQN: nqn, HostNQN: testHostNQN})
		if err != nil && ctx.Err() != nil {
			t.Fatal(err)
		}
		if err != nil {
			time.Sleep(50 * time.Millisecond) // until the volume is exported and leads
		}
	}
	defer c.Close()
	mp := host.NewMultiPath(c)
	if write {
		if err := mp.Write(ctx, 1, lba, data, true); err != nil {
			t.Fatal(err)
		}
		return
	}
	got := make([]byte, len(data))
	if err := mp.Read(ctx, 1, lba, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %s: %v, equal %v", nqn, err, bytes.Equal(got, data))
	}
}

// TestEncryptedVolumeEndToEnd: a one-node cluster with a store and a
// keyring. A volume created with encryption aes-xts-256 shows it (and its
// KEK's ID, no key); what a host writes to it over NVMe/TCP is not on the
// drive files in clear after a shutdown, while a volume in clear beside it
// is; it reads back after a restart; and with a keyring that lacks its
// KEK the node does not serve it and says why (the path's error names the KEK).
func TestEncryptedVolumeEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := oneNodeConfig(t, dir, true)
	cfg.Security.KEKFile = filepath.Join(dir, "kek")
	writeKeyring(t, cfg.Security.KEKFile, "k1")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := Start(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { n.Close() }()
	client := adminClient(t, cfg, n.APIAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	create := func(name, encryption string) api.VolumeView {
		for {
			v, err := client.CreateVolume(ctx, api.CreateVolumeRequest{Name: name, Size: 8 << 20,
				Hosts: []string{testHostNQN}, Encryption: encryption})
			if err == nil {
				return v
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // until the node registered itself
		}
	}
	sec, plain := create("sec", cluster.EncryptionAESXTS256), create("plain", "none")
	if sec.Encryption != cluster.EncryptionAESXTS256 || sec.KEK != "k1" || sec.WrappedKey != nil || plain.Encryption != "" {
		t.Fatalf("views: sec %q under %q (wrapped key shown: %v), plain %q", sec.Encryption, sec.KEK,
			sec.WrappedKey != nil, plain.Encryption)
	}
	secData := bytes.Repeat([]byte("END-TO-END-SECRET-"), 16*4096/18+1)[:16*4096]
	plainData := bytes.Repeat([]byte("END-TO-END-CLEAR--"), 16*4096/18+1)[:16*4096]
	hostIO(t, ctx, cfg, sec.NQN, 0, secData, true)
	hostIO(t, ctx, cfg, plain.NQN, 0, plainData, true)
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	onDrives := func(marker []byte) bool {
		for _, d := range cfg.Store.Drives {
			b, err := os.ReadFile(d)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, marker) {
				return true
			}
		}
		return false
	}
	if !onDrives(plainData[:72]) {
		t.Fatal("the volume in clear is not on the drives after the shutdown: the scan proves nothing")
	}
	if onDrives(secData[:72]) {
		t.Fatal("the encrypted volume's plaintext is on the drives")
	}

	if n, err = Start(cfg, log); err != nil {
		t.Fatal(err)
	}
	hostIO(t, ctx, cfg, sec.NQN, 0, secData, false)
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	writeKeyring(t, cfg.Security.KEKFile, "k2") // k1 lost
	if n, err = Start(cfg, log); err != nil {
		t.Fatal(err)
	}
	for {
		v, err := client.Volume(ctx, "sec")
		if err == nil && len(v.Paths) == 1 && strings.Contains(v.Paths[0].Error, `"k1"`) {
			t.Logf("not served, as it should not be: %s", v.Paths[0].Error)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the volume under a KEK the keyring lacks: %v %+v", err, v.Paths)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
