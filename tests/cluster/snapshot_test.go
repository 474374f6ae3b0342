package cluster_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/nvme/host"
)

// TestSnapshotRollback: three nodes with the store, over HTTPS with
// tokens. A host writes 16 blocks; a snapshot is taken through a node that
// does not lead the volume (it forwards to the leader); the host
// overwrites them, and the snapshot then pins them; the rollback is
// refused while the host is connected, done with force, and the host then
// reads the original blocks, as it does after every node is killed -9 and
// restarted, with the snapshot still listed; it deletes. Refusals: a taken
// name (409), an unknown volume (404), the reader token (403).
func TestSnapshotRollback(t *testing.T) {
	tc := startCluster(t, opts{nodes: 3, store: true})
	v := tc.createVolume("snap", 16<<20, 3)
	mp, closePaths := tc.connect(v.NQN)
	defer func() { closePaths() }()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	writeVersion(ctx, t, mp, 1)
	leader := tc.leaderOf("snap")
	via := tc.nodes[leader.id%3] // another node
	admin := tc.client(via)
	start := time.Now()
	if sv, err := admin.CreateSnapshot(ctx, "snap", "before"); err != nil || sv.Name != "before" || sv.Order != 1 {
		t.Fatalf("snapshot through node%d (leader node%d): %+v %v", via.id, leader.id, sv, err)
	}
	t.Logf("FIGURE snapshot create through a follower's API, idle 16 MiB volume: %v", time.Since(start).Round(time.Microsecond))
	wantAPIError(t, "a taken name", http.StatusConflict, cluster.ErrExists, func() error {
		_, err := admin.CreateSnapshot(ctx, "snap", "before")
		return err
	})
	wantAPIError(t, "an unknown volume", http.StatusNotFound, cluster.ErrNotFound, func() error {
		_, err := admin.Snapshots(ctx, "ghost")
		return err
	})
	reader := tc.sec.client(via.api, tc.sec.reader)
	wantAPIError(t, "the reader token", http.StatusForbidden, api.ErrForbidden, func() error {
		_, err := reader.CreateSnapshot(ctx, "snap", "r")
		return err
	})
	writeVersion(ctx, t, mp, 2)
	tc.eventually(30*time.Second, "the snapshot pins the 16 overwritten blocks", func() bool {
		l, err := reader.Snapshots(ctx, "snap")
		return err == nil && len(l.Snapshots) == 1 && l.Snapshots[0].PinnedBytes >= 16*4096
	})
	wantAPIError(t, "a rollback with a host connected", http.StatusConflict, cluster.ErrRefused, func() error {
		_, err := admin.Rollback(ctx, "snap", "before", false)
		return err
	})
	if _, err := admin.Rollback(ctx, "snap", "before", true); err != nil {
		t.Fatalf("forced rollback: %v", err)
	}
	readVersion(ctx, t, mp, 1)

	closePaths()
	tc.crashAll("snap")
	mp, closePaths = tc.connect(v.NQN)
	readVersion(ctx, t, mp, 1)
	admin = tc.client(tc.up())
	tc.eventually(30*time.Second, "the snapshot is listed after the restart", func() bool {
		l, err := admin.Snapshots(ctx, "snap")
		return err == nil && len(l.Snapshots) == 1 && l.Snapshots[0].Name == "before"
	})
	if l, err := admin.DeleteSnapshot(ctx, "snap", "before"); err != nil || len(l.Snapshots) != 0 {
		t.Fatalf("delete: %+v %v", l, err)
	}
}

// writeVersion writes blocks 0 to 15 at version ver.
func writeVersion(ctx context.Context, t *testing.T, mp *host.MultiPath, ver uint64) {
	t.Helper()
	for lba := uint64(0); lba < 16; lba++ {
		if err := mp.Write(ctx, 1, lba, block(lba, ver), false); err != nil {
			t.Fatalf("write lba %d version %d: %v", lba, ver, err)
		}
	}
}

// readVersion wants blocks 0 to 15 at version ver.
func readVersion(ctx context.Context, t *testing.T, mp *host.MultiPath, ver uint64) {
	t.Helper()
	buf := make([]byte, 4096)
	for lba := uint64(0); lba < 16; lba++ {
		if err := mp.Read(ctx, 1, lba, buf); err != nil {
			t.Fatalf("read lba %d: %v", lba, err)
		}
		if got, err := versionOf(buf, lba); err != nil || got != ver {
			t.Fatalf("lba %d: version %d (%v), want %d", lba, got, err, ver)
		}
	}
}

// wantAPIError wants op to fail with status and class want.
func wantAPIError(t *testing.T, what string, status int, want error, op func() error) {
	t.Helper()
	err := op()
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != status || !errors.Is(err, want) {
		t.Fatalf("%s: %v, want HTTP %d wrapping %v", what, err, status, want)
	}
}
