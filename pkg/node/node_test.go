package node

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"basalt/pkg/config"
	"basalt/pkg/nvme/host"
)

// TestSingleNodeServesItsSubsystems: without [cluster] a node serves the
// [[subsystem]]s of its file, as before clusters existed.
func TestSingleNodeServesItsSubsystems(t *testing.T) {
	addr := freeAddr(t)
	cfg := &config.Config{
		NVMe: config.NVMe{Listen: addr},
		Subsystems: []config.Subsystem{{NQN: "nqn.2026-11.io.basalt:single", AllowAnyHost: true,
			Namespaces: []config.Namespace{{NSID: 1, Backend: "memory", Size: 4 << 20}}}},
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Cluster() != nil || n.APIAddr() != nil {
		t.Error("a single node has cluster parts")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := host.Dial(ctx, addr, host.Options{SubNQN: "nqn.2026-11.io.basalt:single"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := bytes.Repeat([]byte{7}, 4096)
	got := make([]byte, 4096)
	if err := c.Write(ctx, 1, 3, data, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Read(ctx, 1, 3, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
