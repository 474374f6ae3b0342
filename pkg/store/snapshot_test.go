package store

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"basalt/pkg/backend"
)

// TestSnapshotCloneRollback walks the life of a snapshot: it freezes the
// volume, refuses writes, pins only what the volume overwrote, survives a
// restart; a clone reads it and takes its own writes; the snapshot cannot go
// while the clone exists, nor the volume while the snapshot does; rollback
// brings the volume back; deleting returns the space.
func TestSnapshotCloneRollback(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	v, err := r.s.CreateVolume("db", 32*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	writeTags(t, v, 0, 1, 2, 3, 4, 5, 6, 7, 8)
	if _, err := r.s.CreateSnapshot(ctx, "db", "s1"); err != nil {
		t.Fatal(err)
	}
	writeTags(t, v, 0, 11, 12)
	snap := mustVolume(r.s, "db@s1")
	if got := readTags(t, snap, 0, 8); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("snapshot reads %v", got)
	}
	if err := snap.WriteAt(ctx, make([]byte, BlockSize), 0, 0); !errors.Is(err, backend.ErrReadOnly) {
		t.Fatalf("write to a snapshot: %v, want ErrReadOnly", err)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	snaps, err := r.s.Snapshots("db")
	if err != nil || len(snaps) != 1 || snaps[0].Name != "s1" || snaps[0].PinnedBytes != 2*BlockSize {
		t.Fatalf("Snapshots = %+v, %v; want s1 pinning the 2 overwritten blocks", snaps, err)
	}
	c, err := r.s.CloneVolume(ctx, "db", "s1", "db2")
	if err != nil {
		t.Fatal(err)
	}
	writeTags(t, c, 7, 27)
	if got := readTags(t, c, 0, 8); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7, 27}) {
		t.Fatalf("clone reads %v", got)
	}
	if err := r.s.DeleteSnapshot("db", "s1"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "db2") {
		t.Fatalf("deleting a snapshot with a clone: %v, want ErrInUse naming db2", err)
	}
	if err := r.s.DeleteVolume("db"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "db@s1") {
		t.Fatalf("deleting a volume with a snapshot: %v, want ErrInUse naming db@s1", err)
	}
	r.reopen()
	if err := checkFamilyCounts(r.s); err != nil {
		t.Fatal(err)
	}
	if err := r.s.RollbackVolume(ctx, "db", "s1"); err != nil {
		t.Fatal(err)
	}
	if got := readTags(t, mustVolume(r.s, "db"), 0, 8); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("rolled-back volume reads %v", got)
	}
	if got := readTags(t, mustVolume(r.s, "db2"), 0, 8); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7, 27}) {
		t.Fatalf("clone after restart reads %v", got)
	}
	if err := checkFamilyCounts(r.s); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"db2", "db@s1", "db"} {
		if err := r.s.DeleteVolume(name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	if err := checkFamilyCounts(r.s); err != nil {
		t.Fatal(err)
	}
	if used := r.s.counters.mappedBlocks.Load(); used != 0 {
		t.Fatalf("%d blocks still counted after every member is deleted", used)
	}
}
