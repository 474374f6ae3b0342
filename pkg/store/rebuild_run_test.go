package store

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
)

// waitRebuilt waits (in real time) until the background rebuild has
// nothing left to do, and returns its last status.
func waitRebuilt(t *testing.T, s *Store) RebuildStatus {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := s.RebuildStatus()
		if !st.Running && st.Passes > 0 && !s.rebuildNeeded() {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rebuild does not finish: %+v, drives %+v", st, s.Drives())
		}
		time.Sleep(time.Millisecond)
	}
}

// checkFullProtection requires every segment holding live blocks to have
// all its columns on healthy drives.
func checkFullProtection(t *testing.T, s *Store) {
	t.Helper()
	for _, g := range s.segs {
		geom := g.geom.Load()
		if geom == nil || g.live.Load() == 0 {
			continue
		}
		if geom.shape.parity != s.node.Parity {
			t.Fatalf("%v: parity %d, want %d", g.id, geom.shape.parity, s.node.Parity)
		}
		for _, c := range geom.columns {
			if !s.drives[c].healthy() {
				t.Fatalf("%v holds %d live blocks with a column on drive %d, which is %v", g.id, g.live.Load(), c,
					s.drives[c].getState())
			}
		}
	}
}

// A store whose drive file was deleted (the path now opens a blank file)
// starts degraded and reads every block, verified, from parity.
func TestStoreStartsDegradedWithADriveFileDeleted(t *testing.T) {
	dir := t.TempDir()
	paths := make([]string, 4)
	for i := range paths {
		paths[i] = filepath.Join(dir, "d"+strconv.Itoa(i))
	}
	open := func() (*Store, error) {
		t.Helper()
		var drives []disk.Drive
		for _, p := range paths {
			d, err := disk.OpenFile(p, 8<<20)
			if err != nil {
				t.Fatal(err)
			}
			drives = append(drives, d)
		}
		region, err := pmem.OpenFile(filepath.Join(dir, "wbuf"), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return Open(Options{Drives: drives, Buffer: region, MetaDir: filepath.Join(dir, "meta"),
			ChunkSize: 16 << 10, SegmentStripes: 4, BatchStripes: 4})
	}
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.CreateVolume("a", 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	tags := make([]uint64, 400)
	for i := range tags {
		tags[i] = uint64(i + 1)
	}
	for i := 0; i < len(tags); i += 16 {
		writeTags(t, v, uint64(i), tags[i:min(i+16, len(tags))]...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(paths[2]); err != nil {
		t.Fatal(err)
	}
	if s, err = open(); err != nil {
		t.Fatalf("Open with drive 2 deleted: %v", err)
	}
	defer s.Close()
	if d := s.Drives()[2]; d.State != "failed" {
		t.Fatalf("drive 2 is %s", d.State)
	}
	if v, err = s.Volume("a"); err != nil {
		t.Fatal(err)
	}
	checkAll(t, v, tags)
	if st := s.Stats(); st.DegradedReads == 0 {
		t.Fatalf("no degraded reads with drive 2 gone: %+v", st)
	}
}

// More drives lost than parity: Open refuses, says which, and records
// nothing, so the store opens whole once the drives are back.
func TestOpenRefusesMoreLostDrivesThanParity(t *testing.T) {
	r, _, tags := faultRig(t, 100)
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
	r.s, r.fault = nil, nil
	saved := append([]*plainDrive(nil), r.plain...)
	for i := range r.plain {
		r.plain[i] = saved[i].reopen()
	}
	r.plain[1], r.plain[3] = newPlainDrive(4<<20), newPlainDrive(4<<20)
	r.region = pmem.NewFakeImage(r.region.Persisted(), 2)
	image := r.region.Persisted()
	err := r.tryOpen()
	if !errors.Is(err, ErrTooManyLost) {
		t.Fatalf("Open with 2 blank drives and 1 parity: %v", err)
	}
	t.Logf("refused: %v", err)
	for i := range r.plain {
		r.plain[i] = saved[i].reopen()
	}
	r.region = pmem.NewFakeImage(image, 3)
	r.open()
	for _, d := range r.s.Drives() {
		if d.State != "healthy" {
			t.Fatalf("drive %d is %s after the refused open", d.Index, d.State)
		}
	}
	v, err := r.s.Volume("a")
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, v, tags)
}

// A drive lost under load (I/O errors): the background rebuild re-stripes
// every segment onto the survivors while the writes go on; afterwards every
// segment with data has all its columns on healthy drives, and another
// drive may go.
func TestDriveFailedUnderLoadIsRebuiltToFullProtection(t *testing.T) {
	seed := rand.Uint64()
	if v, err := strconv.ParseUint(os.Getenv("BASALT_REBUILD_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (BASALT_REBUILD_SEED replays it)", seed)
	r, v, tags := faultRig(t, 400)
	if err := r.s.StartRebuilder(RebuildOptions{BytesPerSecond: -1}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	stop := make(chan struct{})
	loadDone := make(chan error, 1)
	writes := 0
	go func() { // the load: overwrites at random, recording each write's tag
		rng := rand.New(rand.NewPCG(seed, 1))
		buf := make([]byte, BlockSize)
		for i := uint64(1); ; i++ {
			select {
			case <-stop:
				loadDone <- nil
				return
			default:
			}
			lba := rng.IntN(len(tags))
			tag := 10_000 + i
			makeBlock(buf, tag)
			if err := v.WriteAt(ctx, buf, int64(lba)*BlockSize, 0); err != nil {
				loadDone <- err
				return
			}
			mu.Lock()
			tags[lba], writes = tag, writes+1
			mu.Unlock()
		}
	}()
	time.Sleep(20 * time.Millisecond)
	r.fault[1].Fail() // the store notices at its next I/O to it
	st := waitRebuilt(t, r.s)
	time.Sleep(20 * time.Millisecond) // more writes after the rebuild
	close(stop)
	if err := <-loadDone; err != nil {
		t.Fatalf("a write during the rebuild failed: %v", err)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuild: %+v; %d writes meanwhile", st, writes)
	if d := r.s.Drives()[1]; d.State != "evacuated" {
		t.Fatalf("drive 1 is %s", d.State)
	}
	if st.SegmentsDone == 0 || st.SegmentsDone != st.SegmentsTotal || st.LastError != "" {
		t.Fatalf("rebuild status %+v", st)
	}
	checkFullProtection(t, r.s)
	checkAll(t, v, tags)
	r.fault[3].Fail() // full protection: one more drive may go
	checkAll(t, v, tags)
}

// rebuildRig is a store with volume "a" over several segments, its drive 2
// failed and replaced (r.plain[2] is the replacement), no rebuild run.
func rebuildRig(t *testing.T, blocks int) (*rig, []uint64) {
	t.Helper()
	r := newRig(t, defaultRigConfig())
	v, err := r.s.CreateVolume("a", 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	tags := make([]uint64, blocks)
	for i := range tags {
		tags[i] = uint64(i + 1)
	}
	for i := 0; i < len(tags); i += 16 {
		writeTags(t, v, uint64(i), tags[i:min(i+16, len(tags))]...)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.s.FailDrive(2); err != nil {
		t.Fatal(err)
	}
	repl := newPlainDrive(4 << 20)
	if err := r.s.ReplaceDrive(2, repl); err != nil {
		t.Fatal(err)
	}
	r.plain[2] = repl // what the next open finds in slot 2
	return r, tags
}

// runPaced advances the manual clock in steps, checking after each that the
// rebuild stayed within rate (bytes per second) plus one charge, until until
// reports true.
func runPaced(t *testing.T, r *rig, rate, charge int64, until func(RebuildStatus) bool) RebuildStatus {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := r.s.RebuildStatus()
		if !st.Started.IsZero() {
			elapsed := r.clock.Now().Sub(st.Started).Seconds()
			if limit := float64(rate)*elapsed + float64(charge); float64(st.BytesDone) > limit {
				t.Fatalf("%d bytes rebuilt in %.3fs at %d bytes/s: more than %.0f", st.BytesDone, elapsed, rate, limit)
			}
		}
		if until(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rebuild does not get there: %+v", st)
		}
		r.clock.Advance(10 * time.Millisecond)
		time.Sleep(200 * time.Microsecond)
	}
}

// The background rebuild stays within its rate on the store's clock, and
// takes as long as the rate says.
func TestRebuildRespectsItsRateOnAManualClock(t *testing.T) {
	r, tags := rebuildRig(t, 300)
	const rate = 1 << 20
	charge := int64(4+1) * 16 << 10 // a stripe's reads plus the chunk written
	if err := r.s.StartRebuilder(RebuildOptions{BytesPerSecond: rate}); err != nil {
		t.Fatal(err)
	}
	st := runPaced(t, r, rate, charge, func(st RebuildStatus) bool { return st.Passes > 0 && !st.Running })
	took := st.Finished.Sub(st.Started).Seconds()
	t.Logf("%d bytes in %.2fs of the manual clock (%.0f bytes/s, limit %d): %+v", st.BytesDone, took,
		float64(st.BytesDone)/took, rate, st)
	if st.BytesDone < 10*charge || took < float64(st.BytesDone-charge)/rate {
		t.Fatalf("%d bytes rebuilt in %.3fs: faster than %d bytes/s", st.BytesDone, took, rate)
	}
	if st.RateLimit != rate || r.s.Drives()[2].State != "healthy" {
		t.Fatalf("status %+v, drives %+v", st, r.s.Drives())
	}
	v, err := r.s.Volume("a")
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, v, tags)
}

// A rebuild onto a replacement stopped by Close resumes at the next open
// and does not redo the segments it had finished.
func TestRebuildResumesAfterReopenWithoutRedoingSegments(t *testing.T) {
	r, tags := rebuildRig(t, 600)
	const rate = 1 << 20
	if err := r.s.StartRebuilder(RebuildOptions{BytesPerSecond: rate}); err != nil {
		t.Fatal(err)
	}
	runPaced(t, r, rate, 5*16<<10, func(st RebuildStatus) bool {
		return st.SegmentsTotal > 0 && st.SegmentsDone >= st.SegmentsTotal/2
	})
	old := r.s
	r.reopen() // Close stops the rebuild mid-pass
	first := old.RebuildStatus()
	if first.Running || first.SegmentsDone == 0 || first.SegmentsDone == first.SegmentsTotal {
		t.Fatalf("the first pass, stopped by Close: %+v", first)
	}
	d := r.s.Drives()[2]
	if d.State != "rebuilding" || d.RebuiltSegments == 0 {
		t.Fatalf("after reopen, drive 2: %+v", d)
	}
	if err := r.s.StartRebuilder(RebuildOptions{BytesPerSecond: -1}); err != nil {
		t.Fatal(err)
	}
	second := waitRebuilt(t, r.s)
	t.Logf("first pass (stopped): %d of %d segments; second: %d done, %d skipped (rebuilt below segment %d)",
		first.SegmentsDone, first.SegmentsTotal, second.SegmentsDone, second.SegmentsSkipped, d.RebuiltSegments)
	if second.SegmentsSkipped != first.SegmentsDone || second.SegmentsTotal+second.SegmentsSkipped != first.SegmentsTotal ||
		second.SegmentsDone != second.SegmentsTotal {
		t.Fatalf("the second pass redid segments (or missed some): first %+v, second %+v", first, second)
	}
	if d := r.s.Drives()[2]; d.State != "healthy" || d.RebuiltSegments != 0 {
		t.Fatalf("drive 2 after the rebuild: %+v", d)
	}
	drives, _ := r.db.Drives()
	if drives[2].State != meta.DriveHealthy {
		t.Fatalf("drive 2 recorded as %v", drives[2].State)
	}
	checkFullProtection(t, r.s)
	v, err := r.s.Volume("a")
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, v, tags)
	if err := r.s.FailDrive(0); err != nil { // full protection: another may go
		t.Fatal(err)
	}
	checkAll(t, v, tags)
}
