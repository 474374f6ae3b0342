package store

import (
	"errors"
	"math/rand/v2"
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// faultRig returns a rig on fault-injecting drives with volume "a" holding
// blocks tags 1..n at LBAs 0..n-1, destaged.
func faultRig(t *testing.T, n int) (*rig, *Volume, []uint64) {
	t.Helper()
	cfg := defaultRigConfig()
	cfg.faults = true
	r := newRig(t, cfg)
	v, err := r.s.CreateVolume("a", 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	tags := make([]uint64, n)
	for i := range tags {
		tags[i] = uint64(i + 1)
	}
	for i := 0; i < n; i += 16 {
		writeTags(t, v, uint64(i), tags[i:min(i+16, n)]...)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return r, v, tags
}

// checkAll reads every block and requires the expected tags.
func checkAll(t *testing.T, v *Volume, want []uint64) {
	t.Helper()
	got := readTags(t, v, 0, len(want))
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("block %d reads tag %d, want %d", i, got[i], want[i])
		}
	}
}

// blockLocation returns the drive and offset holding lba of v.
func blockLocation(t *testing.T, r *rig, v *Volume, lba uint64) blockAt {
	t.Helper()
	e := v.v.lmap.get(lba)
	at, ok := r.s.locate(e)
	if !ok {
		t.Fatalf("block %d is not mapped", lba)
	}
	return at
}

// corrupt overwrites one block on a drive behind the store's back.
func corrupt(t *testing.T, r *rig, drive int, off int64) {
	t.Helper()
	junk := disk.AlignedBuffer(BlockSize)
	for i := range junk {
		junk[i] = byte(i*7 + drive)
	}
	if _, err := r.inner(drive).WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

func TestDegradedReadsAndNarrowStripesAfterDriveLoss(t *testing.T) {
	r, v, tags := faultRig(t, 200)
	r.fault[1].Fail()
	checkAll(t, v, tags)
	st := r.s.Stats()
	if st.Drives[1].State != "failed" || st.DegradedReads == 0 {
		t.Fatalf("after reading with drive 1 lost: drive %s, %d degraded reads", st.Drives[1].State, st.DegradedReads)
	}
	if st.Geometry.Data != 2 || st.Geometry.Parity != 1 {
		t.Fatalf("new stripes %v, want 2+1 on the survivors", st.Geometry)
	}
	for i := range 100 { // new writes go to narrower stripes
		tags[i] = uint64(1000 + i)
	}
	writeTags(t, v, 0, tags[:100]...)
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkAll(t, v, tags)
	r.reopen() // the failure is remembered
	v, _ = r.s.Volume("a")
	if r.s.Stats().Drives[1].State != "failed" {
		t.Fatal("drive 1 healthy again after reopen")
	}
	checkAll(t, v, tags)
}

func TestDriveFailureDuringWrites(t *testing.T) {
	r, v, tags := faultRig(t, 64)
	r.fault[2].AddRule(disk.Rule{Op: disk.OpWrite, Fault: disk.FaultError, Skip: 1})
	for round := range 5 {
		for i := range 64 {
			tags[i] = uint64(100*(round+1) + i)
		}
		writeTags(t, v, 0, tags...)
		if err := r.s.Flush(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if st := r.s.Stats(); st.Drives[2].State != "failed" || st.Failed != "" {
		t.Fatalf("drive 2 %s, store failure %q", st.Drives[2].State, st.Failed)
	}
	checkAll(t, v, tags)
}

func TestCorruptBlocksAreRepairedFromParity(t *testing.T) {
	r, v, tags := faultRig(t, 100)
	at := blockLocation(t, r, v, 42)
	corrupt(t, r, at.drive, at.offset)
	checkAll(t, v, tags)
	if st := r.s.Stats(); st.Repairs != 1 || st.DegradedReads != 1 {
		t.Fatalf("repairs %d, degraded reads %d; want 1 and 1", st.Repairs, st.DegradedReads)
	}
	// The block on the drive is the right one again.
	got := disk.AlignedBuffer(BlockSize)
	if _, err := r.inner(at.drive).ReadAt(got, at.offset); err != nil {
		t.Fatal(err)
	}
	if tag, ok := blockTag(got); !ok || tag != 43 {
		t.Fatalf("block on the drive after repair: tag %d, intact %v", tag, ok)
	}
	// A bit flip on the way from the drive is caught too.
	at = blockLocation(t, r, v, 7)
	r.fault[at.drive].AddRule(disk.Rule{Op: disk.OpRead, Fault: disk.FaultBitFlip, Offset: at.offset,
		Length: BlockSize, Count: 1})
	checkAll(t, v, tags)
	if n := r.fault[at.drive].Injected(disk.FaultBitFlip); n != 1 {
		t.Fatalf("%d bit flips injected", n)
	}
}

func TestMisdirectedWriteIsDetected(t *testing.T) {
	r, v, tags := faultRig(t, 100)
	r.fault[0].AddRule(disk.Rule{Op: disk.OpWrite, Fault: disk.FaultMisdirect, Count: 1})
	for i := range 50 {
		tags[i] = uint64(500 + i)
	}
	writeTags(t, v, 0, tags[:50]...)
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if r.fault[0].Injected(disk.FaultMisdirect) != 1 {
		t.Fatal("no misdirected write")
	}
	checkAll(t, v, tags) // stale blocks where the write should have gone fail their checksums
	res, err := r.s.Scrub(ctx, nil)
	if err != nil {
		t.Fatalf("Scrub: %v (%+v)", err, res)
	}
	if res.Bad == 0 || res.Repaired != res.Bad {
		t.Fatalf("scrub after a misdirected write: %+v", res)
	}
	if res, _ := r.s.Scrub(ctx, nil); res.Bad != 0 {
		t.Fatalf("second scrub still finds %d bad blocks", res.Bad)
	}
	checkAll(t, v, tags)
}

func TestScrubRepairsDataParityAndSummaries(t *testing.T) {
	r, v, tags := faultRig(t, 200)
	rng := rand.New(rand.NewPCG(1, 2))
	// Corrupt one block in each of a few stripes: data, parity or summary.
	damaged := 0
	for _, g := range r.s.segs {
		geom := g.geom.Load()
		if geom == nil || g.written.Load() == 0 {
			continue
		}
		j := rng.IntN(int(g.written.Load()))
		c := rng.IntN(geom.shape.width())
		block := rng.IntN(geom.shape.chunkBlocks)
		off := r.s.lay.chunkOffset(g.id, j) + int64(block)*BlockSize
		corrupt(t, r, geom.columns[geom.shape.column(j, c)], off)
		damaged++
	}
	res, err := r.s.Scrub(ctx, func(done, total int) {
		if done > total {
			t.Errorf("progress %d/%d", done, total)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bad < damaged || res.Repaired != res.Bad || res.Unrecoverable != 0 {
		t.Fatalf("scrub of %d damaged stripes: %+v", damaged, res)
	}
	if res2, _ := r.s.Scrub(ctx, nil); res2.Bad != 0 {
		t.Fatalf("second scrub: %+v", res2)
	}
	checkAll(t, v, tags)
}

func TestLossBeyondParityIsAnErrorNotWrongData(t *testing.T) {
	r, v, tags := faultRig(t, 200)
	r.fault[0].Fail()
	r.fault[3].Fail()
	lost := 0
	for lba := range tags {
		got, err := tryReadTags(v, uint64(lba), 1)
		switch {
		case errors.Is(err, backend.ErrMedia):
			lost++
		case err != nil:
			t.Fatalf("block %d: %v", lba, err)
		case got[0] != tags[lba]:
			t.Fatalf("block %d reads tag %d, want %d: wrong data", lba, got[0], tags[lba])
		}
	}
	if lost == 0 || lost == len(tags) {
		t.Fatalf("%d of %d blocks unreadable with two drives lost and one parity", lost, len(tags))
	}
	if err := r.s.Rebuild(ctx, nil); !errors.Is(err, backend.ErrMedia) && !errors.Is(err, ErrFailed) {
		t.Fatalf("Rebuild beyond parity: %v", err)
	}
}

func TestRebuildOntoReplacementRestoresProtection(t *testing.T) {
	r, v, tags := faultRig(t, 200)
	r.fault[2].Fail()
	for i := range 60 { // written narrow while the drive is out
		tags[i] = uint64(700 + i)
	}
	writeTags(t, v, 0, tags[:60]...)
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.s.ReplaceDrive(0, disk.NewMem(4<<20)); !errors.Is(err, ErrDriveState) {
		t.Fatalf("replacing a healthy drive: %v", err)
	}
	replacement := disk.NewMem(4 << 20)
	if err := r.s.ReplaceDrive(2, replacement); err != nil {
		t.Fatal(err)
	}
	calls, last := 0, 0
	err := r.s.Rebuild(ctx, func(done, total int) { calls, last = calls+1, total-done })
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 || last != 0 {
		t.Fatalf("progress: %d calls, %d left at the end", calls, last)
	}
	st := r.s.Stats()
	if st.Drives[2].State != "healthy" || st.Geometry.Data != 3 {
		t.Fatalf("after rebuild: drive 2 %s, geometry %v", st.Drives[2].State, st.Geometry)
	}
	// Full protection: any other drive may now go.
	r.fault[0].Fail()
	checkAll(t, v, tags)
	if res, err := r.s.Scrub(ctx, nil); err != nil || res.Bad != 0 {
		t.Fatalf("scrub after rebuild and a second loss: %+v, %v", res, err)
	}
}

func TestRebuildByRestripingOntoSurvivors(t *testing.T) {
	r, v, tags := faultRig(t, 200)
	r.fault[3].Fail()
	checkAll(t, v, tags)
	if err := r.s.Rebuild(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, g := range r.s.segs {
		if geom := g.geom.Load(); geom != nil && geom.hasDrive(3) && g.live.Load() > 0 {
			t.Fatalf("%v still holds %d live blocks on the lost drive", g.id, g.live.Load())
		}
	}
	drives, _ := r.db.Drives()
	if !drives[3].Evacuated {
		t.Fatal("drive 3 not marked evacuated")
	}
	r.fault[0].Fail() // the re-striped data has its own parity
	checkAll(t, v, tags)
}

func TestSecondFailureDuringRebuild(t *testing.T) {
	r, v, tags := faultRig(t, 200)
	r.fault[1].Fail()
	if err := r.s.FailDrive(1); err != nil { // the store has not noticed yet
		t.Fatal(err)
	}
	if err := r.s.ReplaceDrive(1, disk.NewMem(4<<20)); err != nil {
		t.Fatal(err)
	}
	err := r.s.Rebuild(ctx, func(done, total int) {
		if done == total/2 {
			r.fault[0].Fail()
		}
	})
	if !errors.Is(err, backend.ErrMedia) {
		t.Fatalf("Rebuild with a second loss: %v", err)
	}
	if st := r.s.Stats(); st.Drives[1].State != meta.DriveRebuilding.String() {
		t.Fatalf("drive 1 is %s after a failed rebuild", st.Drives[1].State)
	}
	for lba := range tags {
		got, err := tryReadTags(v, uint64(lba), 1)
		if err == nil && got[0] != tags[lba] {
			t.Fatalf("block %d reads tag %d, want %d", lba, got[0], tags[lba])
		}
		if err != nil && !errors.Is(err, backend.ErrMedia) {
			t.Fatalf("block %d: %v", lba, err)
		}
	}
}
