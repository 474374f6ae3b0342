package volume

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// TestCutOffFollowerPastTheChangeLogGetsChangedExtents: with the change
// log kept to 64 records, a follower cut off while 512 random 4 KiB blocks
// (and some trims) are written has a base older than every record, and
// still catches up by a delta, of the extents changed since: the bytes
// sent stay within 1.5 times the bytes written and far below the volume's
// size, and its replica equals the leader's. With the extents off the same
// run streams the whole volume.
func TestCutOffFollowerPastTheChangeLogGetsChangedExtents(t *testing.T) {
	const w = 512 // 2 MiB of the 16 MiB volume, 8 times the records kept
	seed := deltaSeed(t)
	for _, coarse := range []bool{true, false} {
		t.Run(map[bool]string{true: "extents", false: "extents off"}[coarse], func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 2))
			c := newDeltaCluster(t, seed)
			for _, v := range c.vols {
				v.SetChangeLimit(64)
				v.changes.setCoarse(coarse)
			}
			leader := c.leader()
			fill := make([]byte, 1<<20)
			for off := int64(0); off < deltaVolumeSize; off += int64(len(fill)) {
				for i := range fill {
					fill[i] = byte(rng.Uint32())
				}
				c.write(leader, fill, off)
			}
			follower := members[int(leader)%3]
			c.runUntil(5*time.Second, "the follower applies the fill", func() bool {
				return c.vols[follower].Group().Status().Applied >= c.vols[leader].Group().Status().Commit
			})
			var others []nodeID
			for _, id := range members {
				if id != follower {
					others = append(others, id)
				}
			}
			c.net.Isolate(follower, others...)
			written := int64(0)
			block := make([]byte, 4096)
			for i := range w {
				for j := range block {
					block[j] = byte(rng.Uint32())
				}
				c.write(leader, block, rng.Int64N(deltaVolumeSize/4096)*4096)
				written += int64(len(block))
				if i%64 == 63 {
					c.trim(leader, rng.Int64N(deltaVolumeSize/4096-4)*4096, 4*4096)
				}
			}
			c.runUntil(5*time.Second, "the leader compacts past the follower", func() bool {
				return c.vols[leader].Group().Status().FirstIndex > c.vols[follower].Group().Status().Applied+1
			})
			if _, ok := c.vols[leader].changes.since(c.vols[follower].Group().Status().Applied); ok {
				t.Fatal("the change log's records still reach the follower's base: the test does not tell")
			}
			before := c.sent[follower].total()
			c.net.Heal()
			c.runUntil(20*time.Second, "the follower catches up", func() bool {
				return c.vols[follower].Group().Status().SnapshotsReceived > 0 &&
					c.vols[follower].Group().Status().Applied >= c.vols[leader].Group().Status().Commit
			})
			sent := c.sent[follower].total() - before
			t.Logf("written %d bytes while cut off; sent to the follower %d: %.3fx the written, %.3fx the volume; "+
				"the leader's extent generations hold %d bytes", written, sent, float64(sent)/float64(written),
				float64(sent)/deltaVolumeSize, c.vols[leader].changes.extentBytes())
			if coarse && (float64(sent) > 1.5*float64(written) || sent > deltaVolumeSize/4) {
				t.Errorf("sent %d bytes for %d written, want at most 1.5x and far below the volume's %d", sent, written, deltaVolumeSize)
			}
			if !coarse && sent < deltaVolumeSize*9/10 {
				t.Errorf("with the extents off, sent only %d bytes of a %d-byte volume: the test does not tell", sent, deltaVolumeSize)
			}
			want, got := c.replica(leader), c.replica(follower)
			for off := 0; off < len(want); off += 4096 {
				if !bytes.Equal(want[off:off+4096], got[off:off+4096]) {
					t.Fatalf("block %d differs between the leader and the follower", off/4096)
				}
			}
		})
	}
}

// TestExtentGenerationsCoverEveryChange records random writes into a log
// of 16 records and 64 extents at most (so the extents coarsen, from 4 KiB
// to 256 KiB over a 16 MiB range), and checks that for every base since
// the start, extentsSince covers every byte an entry after the base
// changed, that the array stays within its limit, and that a base before
// the start, or after a reset before it, is refused.
func TestExtentGenerationsCoverEveryChange(t *testing.T) {
	seed := deltaSeed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	l := newChangeLog()
	l.setLimit(16)
	l.gens.limit = 64
	type rec struct {
		index    uint64
		off, end int64
	}
	var all []rec
	const start = 100             // the first index applied
	for i := range uint64(2000) { // reaching further as they go: they coarsen all along
		off := rng.Int64N(1+int64(i)*4096/2000) * 4096
		n := (1 + rng.Int64N(min(16, 4096-off/4096))) * 4096
		l.record(start+i, off, n)
		all = append(all, rec{start + i, off, off + n})
	}
	if got := l.extentBytes(); got > 64*4 {
		t.Errorf("extent generations hold %d bytes, limit %d", got, 64*4)
	}
	if l.gens.shift != 18 {
		t.Errorf("extents of 1<<%d bytes for 16 MiB in 64 extents, want 1<<18", l.gens.shift)
	}
	for range 200 {
		base := start - 1 + rng.Uint64N(uint64(len(all)))
		ranges, ok := l.extentsSince(base)
		if !ok {
			t.Fatalf("base %d since the start %d refused", base, start-1)
		}
		for _, r := range all {
			if r.index > base && !covered(ranges, r.off, r.end) {
				t.Fatalf("base %d: [%d, %d) written at %d is not in %v", base, r.off, r.end, r.index, ranges)
			}
		}
	}
	// Two neighbours, the newer first, merged by a write far beyond: the
	// merged extent carries the newer.
	i := start + uint64(len(all))
	l.record(i+1, 0, 1<<18)
	l.record(i, 1<<18, 1<<18) // an older index than the neighbour's, as a test can
	l.record(i+2, 64<<18, 4096)
	if r, _ := l.extentsSince(i); !covered(r, 0, 1<<18) {
		t.Errorf("after a merge, the extent written at %d is not in %v since %d", i+1, r, i)
	}
	if _, ok := l.extentsSince(start - 2); ok {
		t.Error("a base before the first entry was answered")
	}
	l.reset(5000)
	if _, ok := l.extentsSince(4999); ok {
		t.Error("a base before the restore was answered")
	}
	if r, ok := l.extentsSince(5000); !ok || len(r) != 0 {
		t.Errorf("the restored index: %v, %v; want nothing changed", r, ok)
	}
}

// covered reports whether sorted ranges cover [off, end).
func covered(ranges []extent, off, end int64) bool {
	for _, r := range ranges {
		if r.off <= off && off < r.end {
			off = r.end
		}
		if off >= end {
			return true
		}
	}
	return off >= end
}

// TestChangeRecordAllocatesNothing: once the change log's records and
// extent generations have grown over the volume, recording an applied
// entry (Apply's hot path) allocates nothing.
func TestChangeRecordAllocatesNothing(t *testing.T) {
	l := newChangeLog()
	l.setLimit(64)
	const size = 256 << 20
	index := uint64(1)
	for off := int64(0); off < size; off += 1 << 20 {
		l.record(index, off, 1<<20)
		index++
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 { // the records' array reaches its steady size
		l.record(index, rng.Int64N(size/4096)*4096, 4096)
		index++
	}
	if n := testing.AllocsPerRun(1000, func() {
		l.record(index, rng.Int64N(size/4096)*4096, 4096)
		index++
	}); n != 0 {
		t.Errorf("recording a change allocates %v times", n)
	}
	if got, want := l.extentBytes(), size/4096*4; got != want {
		t.Errorf("extent generations of a 256 MiB volume hold %d bytes, want %d", got, want)
	}
}

// TestExtentGenerationSaturates: a generation too far past start to hold in
// 4 bytes counts as newer than any base, so a delta sends the extent rather
// than missing it; one at or before start is not needed by any base.
func TestExtentGenerationSaturates(t *testing.T) {
	g := generations{limit: 64}
	g.reset(100)
	g.record(100, 0, 4096)           // at start: before what any base asks
	g.record(100+1<<33, 8192, 12288) // far past start
	g.record(150, 16384, 20480)      // an ordinary one
	got := g.since(100 + 1<<34)
	if len(got) != 1 || got[0] != (extent{off: 8192, end: 12288}) {
		t.Errorf("since a base past every index: %v, want the saturated extent [8192, 12288) alone", got)
	}
	if got := g.since(100); len(got) != 2 || got[0].off != 8192 || got[1].off != 16384 {
		t.Errorf("since start: %v, want the extents at 8192 and 16384", got)
	}
}
