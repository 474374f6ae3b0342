package store

import (
	"context"
	"testing"
	"time"
)

// firstDestage writes one block at a time to a fresh synchronous rig whose
// destager holds full stripes until it has flush of them, running the
// writer after each write, and returns how many blocks were written when
// the first ones reached the drives (0 if none did within max blocks).
func firstDestage(t *testing.T, flush, max int) (*rig, *Volume, int) {
	t.Helper()
	cfg := defaultRigConfig()
	cfg.opts.synchronous = true
	// Segments and batches long enough that neither ends a batch early.
	cfg.opts.SegmentStripes, cfg.opts.BatchStripes = 16, 8
	cfg.opts.FlushStripes = flush
	cfg.opts.PartialStripeDelay = time.Hour // no partial stripe goes out
	r := newRig(t, cfg)
	v, err := r.s.CreateVolume("v", 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= max; n++ {
		writeTags(t, v, uint64(n-1), uint64(n))
		r.s.w.work()
		if r.s.Stats().DestagedBlocks > 0 {
			return r, v, n
		}
	}
	return r, v, 0
}

// TestDestageWaitsForFlushStripes: with FlushStripes 1 the first full
// stripe is written at once; with 3, nothing is written until three are
// full, and then all three at once. A full stripe short of FlushStripes
// goes out at the next tick; the partial stripe stays.
func TestDestageWaitsForFlushStripes(t *testing.T) {
	_, _, one := firstDestage(t, 1, 200)
	if one == 0 {
		t.Fatal("FlushStripes 1: nothing destaged after 200 blocks")
	}
	r, v, three := firstDestage(t, 3, 5*one)
	if three < 3*(one-1) {
		t.Fatalf("FlushStripes 3: first destage after %d blocks, a stripe holds about %d", three, one)
	}
	if got := r.s.Stats().DestagedBlocks; got < uint64(2*one) {
		t.Fatalf("FlushStripes 3: %d blocks destaged at once, want the three stripes' (a stripe: about %d)", got, one)
	}
	// One more full stripe, and a few blocks of the next: held until the tick.
	before := r.s.Stats().DestagedBlocks
	for n := three + 1; n <= three+one+2; n++ {
		writeTags(t, v, uint64(n-1), uint64(n))
		r.s.w.work()
	}
	if got := r.s.Stats().DestagedBlocks; got != before {
		t.Fatalf("one full stripe short of FlushStripes: %d more blocks destaged before the tick", got-before)
	}
	r.clock.Advance(r.s.opts.TickInterval)
	r.s.w.tick()
	r.s.w.work() // completes the batch the tick wrote
	after := r.s.Stats().DestagedBlocks
	if after-before < uint64(one-1) || after-before > uint64(one+1) {
		t.Fatalf("the tick destaged %d blocks, want the full stripe's (about %d)", after-before, one)
	}
	if err := r.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readTags(t, v, 0, three+one+2); got[0] != 1 || got[len(got)-1] != uint64(three+one+2) {
		t.Fatalf("read back %v", got)
	}
}
