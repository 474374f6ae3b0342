package node

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A cluster node whose drive file was deleted while it was down starts
// degraded: the slot is failed, the log names the drive and why.
func TestNodeStartsDegradedWithADriveFileMissing(t *testing.T) {
	dir := t.TempDir()
	cfg := oneNodeConfig(t, dir, true) // 3 drives: 2+1
	n, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "d1")
	if err := os.Remove(missing); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	n, err = Start(cfg, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatalf("start with %s missing: %v", missing, err)
	}
	defer n.Close()
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("the node created %s", missing)
	}
	drives := n.cl.store.Drives()
	if drives[1].State == "healthy" {
		t.Fatalf("drive 1 is %s", drives[1].State)
	}
	if !strings.Contains(logged.String(), missing) {
		t.Errorf("the log does not name %s:\n%s", missing, logged.String())
	}
}
