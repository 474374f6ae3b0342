package store

import (
	"basalt/pkg/disk"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestGCUnderChurn overwrites a volume at about 70% of the store's capacity
// many times over, with some trims, and checks every block, before and
// after a restart, for each cleaning policy.
func TestGCUnderChurn(t *testing.T) {
	for _, policy := range []GCPolicy{GCGreedy, GCCostBenefit} {
		t.Run(policy.String(), func(t *testing.T) {
			cfg := defaultRigConfig()
			cfg.opts.GCPolicy = policy
			cfg.opts.synchronous = true
			r := newRig(t, cfg)
			capacity := int(r.s.Stats().CapacityBytes / BlockSize)
			n := capacity * 7 / 10
			v, err := r.s.CreateVolume("a", int64(n)*BlockSize)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]uint64, n)
			rng := rand.New(rand.NewPCG(3, uint64(policy)))
			tag := uint64(0)
			for i := range 5 * n {
				lba := i % n
				if i >= n {
					lba = rng.IntN(n)
				}
				tag++
				if rng.IntN(50) == 0 {
					if err := v.Trim(ctx, int64(lba)*BlockSize, BlockSize); err != nil {
						t.Fatal(err)
					}
					want[lba] = 0
				} else {
					writeTags(t, v, uint64(lba), tag)
					want[lba] = tag
				}
				if i%8 == 0 {
					r.s.w.work()
				}
			}
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			checkAll(t, v, want)
			st := r.s.Stats()
			if st.GCRuns == 0 || st.WriteAmplification <= 1 || st.FreeSegments < r.s.opts.GCReserveSegments {
				t.Fatalf("after churn: %d GC runs, WA %.2f, %d free segments", st.GCRuns, st.WriteAmplification,
					st.FreeSegments)
			}
			t.Logf("%v at 70%% fill: %d GC runs, %d relocated, write amplification %.2f", policy, st.GCRuns,
				st.RelocatedBlocks, st.WriteAmplification)
			r.reopen()
			v, _ = r.s.Volume("a")
			checkAll(t, v, want)
			checkLiveCounts(t, r.s)
		})
	}
}

// TestConcurrentWritersReadersAndCleaner runs writers and readers on
// disjoint ranges against the real writer goroutine while the cleaner
// works, each reader checking its own range (for the race detector and for
// reads racing destage, cleaning and segment reuse).
func TestConcurrentWritersReadersAndCleaner(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.opts.GCPolicy = GCGreedy
	cfg.driveSize = 2 << 20 // 16 segments, 288 blocks of capacity: the cleaner runs early
	r := newRig(t, cfg)
	const workers, span = 4, 60
	v, err := r.s.CreateVolume("a", workers*span*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	rounds := 600
	if testing.Short() || raceEnabled {
		rounds = 250
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- churn(v, w, span, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := r.s.Stats(); st.GCRuns == 0 {
		t.Fatalf("the cleaner never ran: %+v", st)
	}
}

// churn writes, trims and reads back blocks of [w*span, (w+1)*span).
func churn(v *Volume, w, span, rounds int) error {
	rng := rand.New(rand.NewPCG(uint64(w), 9))
	base := uint64(w * span)
	want := make([]uint64, span)
	for i := range rounds {
		lba := rng.IntN(span - 4)
		tags := make([]uint64, 1+rng.IntN(4))
		buf := make([]byte, len(tags)*BlockSize)
		for k := range tags {
			tags[k] = uint64(w)<<32 | uint64(i*8+k+1)
			makeBlock(buf[k*BlockSize:], tags[k])
		}
		if rng.IntN(20) == 0 {
			if err := v.Trim(ctx, int64(base+uint64(lba))*BlockSize, int64(len(tags))*BlockSize); err != nil {
				return err
			}
			clear(tags)
		} else if err := v.WriteAt(ctx, buf, int64(base+uint64(lba))*BlockSize, 0); err != nil {
			return err
		}
		copy(want[lba:], tags)
		at := rng.IntN(span - 8)
		got, err := tryReadTags(v, base+uint64(at), 8)
		if err != nil {
			return fmt.Errorf("worker %d: %w", w, err)
		}
		for k, tag := range got {
			if tag != want[at+k] {
				return fmt.Errorf("worker %d round %d: block %d reads tag %x, want %x", w, i, at+k, tag, want[at+k])
			}
		}
	}
	return nil
}

// TestCleanerReadsAroundFaults: the cleaner reads a victim's stripes whole
// (readAhead); a block that comes back corrupt, or a drive whose reads of
// the segment fail, is reconstructed from parity, and every block reads
// back intact from its new place.
func TestCleanerReadsAroundFaults(t *testing.T) {
	for _, fault := range []string{"corrupt-block", "read-errors"} {
		t.Run(fault, func(t *testing.T) {
			r, v, tags := faultRig(t, 200)
			at := blockLocation(t, r, v, 42)
			switch fault {
			case "corrupt-block":
				corrupt(t, r, at.drive, at.offset)
			case "read-errors":
				start := r.s.lay.chunkOffset(at.seg, 0)
				r.fault[at.drive].AddRule(disk.Rule{Op: disk.OpRead, Fault: disk.FaultError, Offset: start,
					Length: r.s.lay.columnBytes})
			}
			if err := r.s.call(ctx, command{kind: cmdEvacuate, seg: at.seg}); err != nil {
				t.Fatalf("evacuating %v: %v", at.seg, err)
			}
			if moved := blockLocation(t, r, v, 42); moved.seg == at.seg {
				t.Fatalf("block 42 still in %v after its evacuation", at.seg)
			}
			checkAll(t, v, tags)
			if st := r.s.Stats(); st.RelocatedBlocks == 0 {
				t.Fatal("nothing relocated")
			}
		})
	}
}
