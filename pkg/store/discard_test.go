package store

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// churnRig is a synchronous rig whose volume "a" fills 70% of the store.
func churnRig(t *testing.T, cfg rigConfig) (*rig, *Volume, []uint64) {
	t.Helper()
	cfg.opts.synchronous = true
	r := newRig(t, cfg)
	n := int(r.s.Stats().CapacityBytes/BlockSize) * 7 / 10
	v, err := r.s.CreateVolume("a", int64(n)*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	return r, v, make([]uint64, n)
}

// churnStep overwrites one random block (the first pass writes them in
// order) and every 8 steps runs the writer.
func churnStep(t *testing.T, r *rig, v *Volume, want []uint64, rng *rand.Rand, i int) {
	t.Helper()
	lba := i % len(want)
	if i >= len(want) {
		lba = rng.IntN(len(want))
	}
	tag := uint64(i + 1)
	writeTags(t, v, uint64(lba), tag)
	want[lba] = tag
	if i%8 == 0 {
		r.s.w.work()
	}
}

// segLives returns each segment's state and generation.
func segLives(s *Store) (states []meta.SegmentState, gens []uint32) {
	for _, g := range s.segs {
		states, gens = append(states, g.getState()), append(gens, g.gen)
	}
	return states, gens
}

func TestFreedSegmentIsDiscardedOnEveryDrive(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.faults = true
	r, v, want := churnRig(t, cfg)
	rng := rand.New(rand.NewPCG(5, 6))
	freed := 0
	for i := range 4 * len(want) {
		states, gens := segLives(r.s)
		before := make([]int, len(r.fault))
		for d, f := range r.fault {
			before[d] = len(f.Discards())
		}
		churnStep(t, r, v, want, rng, i)
		// The segments freed in this step: sealed before, free (or
		// reopened: a new life) now.
		var expect []disk.Extent
		for id, g := range r.s.segs {
			if states[id] == meta.SegmentSealed && (g.getState() == meta.SegmentFree || g.gen != gens[id]) {
				expect = append(expect, disk.Extent{Off: r.s.lay.chunkOffset(meta.SegmentID(id), 0),
					Len: r.s.lay.columnBytes})
			}
		}
		freed += len(expect)
		for d, f := range r.fault {
			got := f.Discards()[before[d]:]
			slices.SortFunc(got, func(a, b disk.Extent) int { return cmp.Compare(a.Off, b.Off) })
			if fmt.Sprint(got) != fmt.Sprint(expect) {
				t.Fatalf("step %d: drive %d saw discards %v; the segments freed cover %v", i, d, got, expect)
			}
		}
	}
	if freed == 0 {
		t.Fatal("the churn freed no segment")
	}
	st := r.s.Stats()
	if wantBytes := uint64(freed) * uint64(len(r.fault)) * uint64(r.s.lay.columnBytes); st.DiscardedBytes != wantBytes ||
		st.DiscardErrors != 0 {
		t.Fatalf("stats: %d bytes discarded, %d errors; want %d and 0", st.DiscardedBytes, st.DiscardErrors, wantBytes)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkAll(t, v, want)
	r.reopen()
	v, _ = r.s.Volume("a")
	checkAll(t, v, want)
}

// TestDiscardIsBestEffort: drives that fail every discard, or that keep
// the old bytes of a discarded range, change nothing the store serves.
func TestDiscardIsBestEffort(t *testing.T) {
	for _, mode := range []string{"errors", "old bytes"} {
		t.Run(mode, func(t *testing.T) {
			cfg := defaultRigConfig()
			cfg.faults = true
			if mode == "errors" {
				cfg.faultOpts.Rules = []disk.Rule{{Op: disk.OpDiscard, Fault: disk.FaultError}}
			} else {
				cfg.faultOpts.DiscardKeepsData = true
			}
			r, v, want := churnRig(t, cfg)
			rng := rand.New(rand.NewPCG(7, 8))
			for i := range 4 * len(want) {
				churnStep(t, r, v, want, rng, i)
			}
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			st := r.s.Stats()
			if st.GCRuns == 0 || (mode == "errors" && (st.DiscardErrors == 0 || st.DiscardedBytes != 0)) {
				t.Fatalf("%d GC runs, %d discard errors, %d bytes discarded", st.GCRuns, st.DiscardErrors,
					st.DiscardedBytes)
			}
			if err := r.s.Err(); err != nil {
				t.Fatalf("store failed: %v", err)
			}
			for _, d := range st.Drives {
				if d.State != meta.DriveHealthy.String() {
					t.Fatalf("drive %d is %s after discard errors", d.Index, d.State)
				}
			}
			checkAll(t, v, want)
			r.reopen()
			v, _ = r.s.Volume("a")
			checkAll(t, v, want)
		})
	}
}

// TestCrashAfterDiscardRecoversEveryAcknowledgedWrite churns on drives
// that model power loss until freed segments have been discarded, goes on
// a little (reopening and writing the discarded segments), crashes with
// some, none or all of the unsynced writes and discards kept, and requires
// every acknowledged write back, twice: after the crash and after more
// churn and a clean reopen.
func TestCrashAfterDiscardRecoversEveryAcknowledgedWrite(t *testing.T) {
	for _, seed := range testSeeds(t, 3) {
		for _, keep := range []int{0, 30, 100} {
			t.Run(fmt.Sprintf("seed=%d/keep=%d", seed, keep), func(t *testing.T) {
				cfg := defaultRigConfig()
				cfg.crashable, cfg.driveSize = true, 2<<20
				r, v, want := churnRig(t, cfg)
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(keep)))
				i, extra := 0, -1
				for ; extra != 0; i++ {
					churnStep(t, r, v, want, rng, i)
					if extra < 0 && r.s.Stats().DiscardedBytes > 0 {
						extra = 1 + rng.IntN(40)
					}
					if extra > 0 {
						extra--
					}
					if i > 50*len(want) {
						t.Fatal("no segment was discarded")
					}
				}
				r.crash(seed, keep)
				if err := r.tryOpen(); err != nil {
					t.Fatalf("reopening after the crash: %v", err)
				}
				v, _ = r.s.Volume("a")
				checkAll(t, v, want)
				for j := range len(want) {
					churnStep(t, r, v, want, rng, i+j)
				}
				r.reopen()
				v, err := r.s.Volume("a")
				if err != nil {
					t.Fatal(err)
				}
				checkAll(t, v, want)
			})
		}
	}
}

func TestZeroSummaryReadsAsNoSummary(t *testing.T) {
	var s summary
	err := decodeSummary(make([]byte, BlockSize), 4, &s)
	if !errors.Is(err, errNoSummary) || !errors.Is(err, ErrBadSummary) {
		t.Fatalf("zeros: %v, want errNoSummary (wrapped in ErrBadSummary)", err)
	}
	b := make([]byte, BlockSize)
	b[100] = 1
	if err := decodeSummary(b, 4, &s); errors.Is(err, errNoSummary) || !errors.Is(err, ErrBadSummary) {
		t.Fatalf("junk: %v, want ErrBadSummary but not errNoSummary", err)
	}
}
