package node

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"basalt/pkg/config"
	"basalt/pkg/identity"
	"basalt/pkg/store"
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
	var logged lockedBuffer // the rebuilder logs from its own goroutine
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

// A drive whose directory is gone (it cannot be opened) also starts the
// node degraded; two drives lost of three with one parity are refused,
// naming them; one drive of another node is still refused as foreign.
func TestNodeDriveLossesItStartsWithAndThoseItRefuses(t *testing.T) {
	dir := t.TempDir()
	cfg := oneNodeConfig(t, dir, true)
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.Store.Drives[2] = filepath.Join(sub, "d2")
	runOnce(t, cfg)
	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	n, err := Start(cfg, quiet)
	if err != nil {
		t.Fatalf("start with %s's directory gone: %v", cfg.Store.Drives[2], err)
	}
	if d := n.cl.store.Drives()[2]; d.State == "healthy" {
		t.Fatalf("drive 2 is %s", d.State)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// (drive 2 is evacuated by now: it holds nothing any more.)
	two := oneNodeConfig(t, t.TempDir(), true)
	runOnce(t, two)
	for _, i := range []int{0, 2} {
		if err := os.Remove(two.Store.Drives[i]); err != nil {
			t.Fatal(err)
		}
	}
	err = refused(t, two, store.ErrTooManyLost)
	mustContain(t, err, "drive 0", two.Store.Drives[0], "drive 2", two.Store.Drives[2])

	other := oneNodeConfigOf(t, t.TempDir(), true, identity.NewClusterUUID())
	runOnce(t, other)
	mine := oneNodeConfig(t, t.TempDir(), true)
	runOnce(t, mine)
	copyFile(t, other.Store.Drives[1], mine.Store.Drives[1])
	refused(t, mine, ErrForeignState)
}

// The drive routes of a cluster node, on its real store: fail a drive,
// see it evacuated by the background rebuild, replace it with a new file
// and see it rebuilt.
func TestNodeDriveRoutes(t *testing.T) {
	dir := t.TempDir()
	cfg := oneNodeConfig(t, dir, true)
	n, err := Start(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := adminClient(t, cfg, n.APIAddr().String())
	v, err := cl.Drives(ctx)
	if err != nil || len(v.Drives) != 3 || v.Drives[1].Path != cfg.Store.Drives[1] || v.Drives[1].State != "healthy" ||
		v.Drives[1].Size != 64<<20 || v.Drives[1].UUID == "" || v.Rebuild.RateLimit != config.DefaultRebuildRate {
		t.Fatalf("drives: %v %+v", err, v)
	}
	if _, err := cl.ReplaceDrive(ctx, 1, filepath.Join(dir, "new")); err == nil {
		t.Fatal("replaced a healthy drive")
	}
	if _, err := cl.FailDrive(ctx, 1); err != nil {
		t.Fatal(err)
	}
	state := func(want string) {
		t.Helper()
		for {
			v, err = cl.Drives(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v.Drives[1].State == want && !v.Rebuild.Running {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("drive 1 never %s: %+v", want, v)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	state("evacuated")
	if _, err := cl.ReplaceDrive(ctx, 1, cfg.Store.Drives[0]); err == nil {
		t.Fatal("replaced drive 1 with drive 0's file")
	}
	repl := filepath.Join(dir, "new")
	if v, err = cl.ReplaceDrive(ctx, 1, repl); err != nil || v.Drives[1].Path != repl || !strings.Contains(v.Note, "[store] drives") {
		t.Fatalf("replace: %v %+v", err, v)
	}
	state("healthy")
	if v.Rebuild.Passes < 2 || v.Rebuild.LastError != "" {
		t.Fatalf("rebuild %+v", v.Rebuild)
	}
}

// lockedBuffer is a log sink safe for the node's goroutines and the test's.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
