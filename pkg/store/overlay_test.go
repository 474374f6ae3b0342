package store

import (
	"math/rand/v2"
	"sync"
	"testing"

	"basalt/cache"
)

// overlayOp is a write or trim entered into an overlay.
type overlayOp struct {
	seq      cache.Seq
	lba, n   uint64
	trim     bool
	blockIdx uint32
}

// TestOverlayConcurrentEntriesKeepTheNewest enters writes and long and
// short trims from many goroutines in an order unrelated to their
// sequence, across shard boundaries, and checks that every block shows its
// newest version (what a replay in sequence order gives), whichever order
// the shards saw them in; then that destaging everything empties it.
func TestOverlayConcurrentEntriesKeepTheNewest(t *testing.T) {
	const blocks = 4 * overlayShards * overlayRun
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 9))
		var writes, fresh atomicCounter
		o := newOverlay(newLBAMap(blocks), &writes.Int64, &fresh.Int64)
		ops := make([]overlayOp, 400)
		for i := range ops {
			op := overlayOp{seq: cache.Seq(i + 1), lba: rng.Uint64N(blocks)}
			switch rng.IntN(10) {
			case 0:
				op.trim, op.n = true, smallTrim+1+rng.Uint64N(3*overlayRun) // a range
			case 1:
				op.trim, op.n = true, 1+rng.Uint64N(smallTrim) // per-block markers
			default:
				op.n = 1 + rng.Uint64N(2*overlayRun)
			}
			op.n = min(op.n, blocks-op.lba)
			ops[i] = op
		}
		order := rng.Perm(len(ops))
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for k := g; k < len(order); k += 8 {
					op := ops[order[k]]
					if op.trim {
						o.addTrim(op.seq, op.lba, op.n)
					} else {
						o.addWrite(op.seq, op.lba, int(op.n))
					}
				}
			})
		}
		wg.Wait()
		want := make([]pendingRef, blocks) // the newest op per block, replayed in order
		has := make([]bool, blocks)
		for _, op := range ops {
			for i := range op.n {
				ref := pendingRef{seq: op.seq, index: uint32(i)}
				if op.trim {
					ref.index = zeroIndex
				}
				want[op.lba+i], has[op.lba+i] = ref, true
			}
		}
		for lba := range uint64(blocks) {
			ref, ok := o.lookup(lba)
			if ok != has[lba] || ok && (ref.seq != want[lba].seq || ref.index != want[lba].index) {
				t.Fatalf("seed %d: lookup(%d) = %+v %v, want %+v %v", seed, lba, ref, ok, want[lba], has[lba])
			}
			if ok && ref.index != zeroIndex && !o.current(lba, ref.seq, int(ref.index), ref.seq) {
				t.Fatalf("seed %d: current(%d) is false for the newest write", seed, lba)
			}
		}
		for _, op := range ops {
			if op.trim {
				o.destagedAll([]summaryEntry{{kind: kindUnmap, lba: op.lba, sum: uint32(op.n)}}, []cache.Seq{op.seq})
				continue
			}
			for i := range op.n {
				o.destagedAll([]summaryEntry{{kind: kindWrite, lba: op.lba + i}}, []cache.Seq{op.seq})
			}
		}
		if o.size.Load() != 0 || o.ranges.Load() != 0 || writes.Load() != 0 || fresh.Load() != 0 {
			t.Fatalf("seed %d: after destaging all: size %d, ranges %d, writes %d, fresh %d", seed,
				o.size.Load(), o.ranges.Load(), writes.Load(), fresh.Load())
		}
	}
}
