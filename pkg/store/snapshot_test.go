package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	if _, err := r.s.CreateSnapshot(ctx, "db", "s1"); !errors.Is(err, ErrVolumeExists) {
		t.Fatalf("a second snapshot s1: %v, want ErrVolumeExists", err)
	}
	writeTags(t, v, 0, 11, 12) // the refusal left the store working
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

// TestSnapshotOrderedWithWrites: with the writer goroutine running and
// writers overwriting their blocks without pause, each snapshot holds, for
// every block, a write no older than the last one acknowledged before
// CreateSnapshot was called and none started after it returned; after a
// restart the snapshots read the same.
func TestSnapshotOrderedWithWrites(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	const writers = 4
	v, err := r.s.CreateVolume("db", 16*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	var acked, started [writers]atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, BlockSize)
			for n := uint64(1); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				makeBlock(buf, uint64(g)<<32|n)
				started[g].Store(n)
				if err := v.WriteAt(ctx, buf, int64(g)*BlockSize, 0); err != nil {
					t.Error(err)
					return
				}
				acked[g].Store(n)
			}
		}()
	}
	type bound struct{ lo, hi [writers]uint64 }
	var bounds []bound
	for i := range 5 {
		var b bound
		for g := range writers {
			b.lo[g] = acked[g].Load()
		}
		if _, err := r.s.CreateSnapshot(ctx, "db", fmt.Sprintf("s%d", i)); err != nil {
			t.Fatal(err)
		}
		for g := range writers {
			b.hi[g] = started[g].Load()
		}
		bounds = append(bounds, b)
	}
	close(stop)
	wg.Wait()
	check := func(when string) {
		for i, b := range bounds {
			got := readTags(t, mustVolume(r.s, fmt.Sprintf("db@s%d", i)), 0, writers)
			for g, tag := range got {
				n := tag & (1<<32 - 1)
				if tag>>32 != uint64(g) && tag != 0 || n < b.lo[g] || n > b.hi[g] {
					t.Fatalf("%s: snapshot %d block %d holds write %d, want one in [%d, %d]", when, i, g, n,
						b.lo[g], b.hi[g])
				}
			}
		}
	}
	check("before the restart")
	r.reopen()
	check("after the restart")
	if err := checkFamilyCounts(r.s); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotChunksSharedAfterRestart: a restart loads every map from the
// checkpoint as its own copy; recovery shares again the chunks a snapshot
// holds alike with its volume, and a write to the volume afterwards still
// leaves the snapshot as it was.
func TestSnapshotChunksSharedAfterRestart(t *testing.T) {
	r := newRig(t, defaultRigConfig())
	v, err := r.s.CreateVolume("db", 2*mapChunkEntries*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	writeTags(t, v, 0, 1)
	writeTags(t, v, mapChunkEntries, 2)
	if _, err := r.s.CreateSnapshot(ctx, "db", "s1"); err != nil {
		t.Fatal(err)
	}
	writeTags(t, v, mapChunkEntries, 3)
	r.reopen()
	vol, snap := r.s.volumeByID(mustVolume(r.s, "db").ID()), r.s.volumeByID(mustVolume(r.s, "db@s1").ID())
	vd, sd := vol.lmap.dir.Load(), snap.lmap.dir.Load()
	if vd.chunks[0].Load() != sd.chunks[0].Load() || vd.chunks[1].Load() == sd.chunks[1].Load() {
		t.Fatal("after the restart the unchanged chunk is not shared, or the changed one is")
	}
	writeTags(t, mustVolume(r.s, "db"), 0, 4)
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readTags(t, mustVolume(r.s, "db@s1"), 0, 1); got[0] != 1 {
		t.Fatalf("the snapshot reads %d after the volume's write to a re-shared chunk, want 1", got[0])
	}
	if err := checkFamilyCounts(r.s); err != nil {
		t.Fatal(err)
	}
}
