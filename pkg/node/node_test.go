package node

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"basalt/pkg/config"
	"basalt/pkg/nvme/host"
	"basalt/target"
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

// TestStaticSubsystemGetsHostSecrets: a [[subsystem]]'s host_secret
// entries reach the target, files read; a missing file stops the start.
func TestStaticSubsystemGetsHostSecrets(t *testing.T) {
	const dhchap = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	const psk = "NVMeTLSkey-1:01:LFKHx3GLh/WxQ3Qix/hiXhgJO/Ixkvwbye6I1Ys3uH5JBiAx:"
	file := filepath.Join(t.TempDir(), "h1.key")
	if err := os.WriteFile(file, []byte(dhchap+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const nqn = "nqn.2026-11.io.basalt:auth"
	cfg := &config.Config{
		NVMe: config.NVMe{Listen: freeAddr(t)},
		Subsystems: []config.Subsystem{{NQN: nqn, Hosts: []string{"nqn.h1"},
			HostSecrets: []config.HostSecret{{Host: "nqn.h1", DHCHAPSecretFile: file, TLSPSK: psk}},
			Namespaces:  []config.Namespace{{NSID: 1, Backend: "memory", Size: 4 << 20}}}},
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := n.target.Subsystem(nqn).HostSecrets("nqn.h1")
	n.Close()
	if got != (target.HostSecrets{DHCHAPKey: dhchap, TLSPSK: psk}) {
		t.Fatal("the subsystem does not hold the configured secrets")
	}
	cfg.Subsystems[0].HostSecrets[0].DHCHAPSecretFile = file + ".missing"
	cfg.NVMe.Listen = freeAddr(t)
	if n, err := Start(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "dhchap_secret_file") {
		n.Close()
		t.Fatalf("a missing secret file: %v", err)
	}
}
