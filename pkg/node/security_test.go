package node

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"basalt/pkg/identity"
	"basalt/pkg/pki"
)

// writeSecurity gives dir the material of node id of cluster c, under a CA
// of its own.
func writeSecurity(t *testing.T, dir string, c identity.ClusterUUID, id uint64) {
	t.Helper()
	ca, err := pki.NewCA(c.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.InitNode(dir, ca, pki.Identity{Cluster: c.String(), Node: id}, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
}

// TestNodeRefusesWithoutItsTLSMaterial: a cluster node whose security
// directory is empty, holds another cluster's certificate or another
// node's, refuses to start, saying what is wrong and how to make it right;
// with [security] insecure it starts without.
func TestNodeRefusesWithoutItsTLSMaterial(t *testing.T) {
	dir := t.TempDir()
	cfg := oneNodeConfig(t, dir, false)
	sec := cfg.Security.Dir
	if sec != filepath.Join(dir, "security") {
		t.Fatalf("security dir %s", sec)
	}
	refuse := func(want ...string) {
		t.Helper()
		n, err := Start(cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			n.Close()
			t.Fatal("started")
		}
		if !errors.Is(err, ErrNoSecurity) {
			t.Fatalf("refusal %v, want ErrNoSecurity", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q lacks %q", err, w)
			}
		}
	}
	if err := os.RemoveAll(sec); err != nil {
		t.Fatal(err)
	}
	refuse(filepath.Join(sec, "ca.crt"), filepath.Join(sec, "node.crt"), filepath.Join(sec, "node.key"), "basaltd pki init")
	other := identity.NewClusterUUID()
	writeSecurity(t, sec, other, 1)
	refuse("of cluster "+other.String(), "this node is of cluster "+testClusterID.String())
	writeSecurity(t, sec, testClusterID, 2)
	refuse("names node 2, this node is node 1")
	if err := os.Chmod(filepath.Join(sec, "node.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	refuse("lets others read the key")

	if err := os.RemoveAll(sec); err != nil {
		t.Fatal(err)
	}
	cfg.Security.Insecure = true // the case under test: insecure starts without material
	n, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
}
