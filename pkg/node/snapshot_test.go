package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/config"
	"basalt/pkg/nvme/host"
)

// TestSnapshotEndToEnd: a one-node cluster with a store, over HTTPS with
// tokens. A host writes a pattern; a snapshot taken through the API lists
// (the reader token may list, not take one); the host overwrites it, and
// the snapshot then pins the overwritten blocks; a rollback is refused
// while the host is connected and done when forced, after which the host
// reads the original pattern; the snapshot deletes. Refusals: a taken
// name (409), an unknown volume (404), a bad name (400), an unknown
// snapshot (404).
func TestSnapshotEndToEnd(t *testing.T) {
	cfg := oneNodeConfig(t, t.TempDir(), true)
	n, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	addr := n.APIAddr().String()
	client := adminClient(t, cfg, addr)
	_, readerToken := testTokens(t)
	reader := api.NewTLSClient(addr, testClientTLS(t, cfg), readerToken)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var v api.VolumeView
	for {
		if v, err = client.CreateVolume(ctx, api.CreateVolumeRequest{Name: "db", Size: 8 << 20, Hosts: []string{testHostNQN}}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // until the node registered itself
	}
	orig := bytes.Repeat([]byte("ORIGINAL"), 16*4096/8)
	hostIO(t, ctx, cfg, v.NQN, 0, orig, true)

	sv, err := client.CreateSnapshot(ctx, "db", "s1")
	if err != nil || sv.Name != "s1" || sv.Volume != "db" || sv.Order != 1 {
		t.Fatalf("create snapshot: %+v %v", sv, err)
	}
	apiRefused(t, "a taken name", http.StatusConflict, cluster.ErrExists, func() error {
		_, err := client.CreateSnapshot(ctx, "db", "s1")
		return err
	})
	apiRefused(t, "an unknown volume", http.StatusNotFound, cluster.ErrNotFound, func() error {
		_, err := client.CreateSnapshot(ctx, "nope", "s1")
		return err
	})
	apiRefused(t, "a bad name", http.StatusBadRequest, cluster.ErrInvalid, func() error {
		_, err := client.CreateSnapshot(ctx, "db", "a@b")
		return err
	})
	apiRefused(t, "the reader token", http.StatusForbidden, api.ErrForbidden, func() error {
		_, err := reader.CreateSnapshot(ctx, "db", "s2")
		return err
	})
	if l, err := reader.Snapshots(ctx, "db"); err != nil || len(l.Snapshots) != 1 || l.Snapshots[0].Name != "s1" {
		t.Fatalf("reader's list: %+v %v", l, err)
	}

	c := dialVolume(t, ctx, cfg, v.NQN)
	defer c.Close()
	mp := host.NewMultiPath(c)
	if err := mp.Write(ctx, 1, 0, bytes.Repeat([]byte("OVERWRIT"), 16*4096/8), true); err != nil {
		t.Fatal(err)
	}
	waitPinned(t, ctx, client, 16*4096)
	apiRefused(t, "a rollback with a host connected", http.StatusConflict, cluster.ErrRefused, func() error {
		_, err := client.Rollback(ctx, "db", "s1", false)
		return err
	})
	if _, err := client.Rollback(ctx, "db", "s1", true); err != nil {
		t.Fatalf("forced rollback: %v", err)
	}
	got := make([]byte, len(orig))
	if err := mp.Read(ctx, 1, 0, got); err != nil || !bytes.Equal(got, orig) {
		t.Fatalf("after the rollback the host reads the original: %v, equal %v", err, bytes.Equal(got, orig))
	}
	apiRefused(t, "an unknown snapshot", http.StatusNotFound, cluster.ErrNotFound, func() error {
		_, err := client.DeleteSnapshot(ctx, "db", "s9")
		return err
	})
	if l, err := client.DeleteSnapshot(ctx, "db", "s1"); err != nil || len(l.Snapshots) != 0 {
		t.Fatalf("delete: %+v %v", l, err)
	}
}

// apiRefused asserts that op fails with status and class want.
func apiRefused(t *testing.T, what string, status int, want error, op func() error) {
	t.Helper()
	err := op()
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != status || !errors.Is(err, want) || ae.Message == "" {
		t.Fatalf("%s: %v (%+v), want HTTP %d wrapping %v", what, err, ae, status, want)
	}
}

// dialVolume connects a host controller to the volume, retrying until it
// is exported and leads.
func dialVolume(t *testing.T, ctx context.Context, cfg *config.Config, nqn string) *host.Controller {
	t.Helper()
	for {
		c, err := host.Dial(ctx, cfg.NVMe.Advertise, host.Options{SubNQN: nqn, HostNQN: testHostNQN})
		if err == nil {
			return c
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPinned waits until s1 pins at least want bytes (the overwrite
// reaches the store's map when the write buffer destages).
func waitPinned(t *testing.T, ctx context.Context, client *api.Client, want int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := client.Snapshots(ctx, "db")
		if err == nil && len(l.Snapshots) == 1 && l.Snapshots[0].PinnedBytes >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("s1 never pinned %d bytes: %+v %v", want, l, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
