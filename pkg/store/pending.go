package store

import (
	"slices"
	"sync"
	"sync/atomic"

	"basalt/cache"
)

// zeroIndex in a pendingRef marks an unmapped block (a trim) rather than a
// block of a write record.
const zeroIndex = ^uint32(0)

// smallTrim: trims of at most this many blocks are kept as one pending
// marker per block; longer ones as a range.
const smallTrim = 64

// pendingRef locates the newest version of a block that is in the write
// buffer and not yet reflected in the map.
type pendingRef struct {
	seq   cache.Seq
	index uint32 // block within the write record, or zeroIndex
	// fresh marks a write to a block the map did not hold when the first
	// pending write of it came: destaging it takes new space.
	fresh bool
}

// trimRange is a long trim still in the write buffer.
type trimRange struct {
	seq        cache.Seq
	lba, count uint64
}

// overlay is a volume's view of the write buffer: for each block written or
// trimmed since its last destage, the newest version. Reads consult it
// before the map; the destager consults it to skip versions already
// overwritten.
//
// Blocks are spread over overlayShards shards of overlayRun consecutive
// LBAs each, every shard with its own lock and map, so that host writes to
// different places do not queue on one lock. Long trims are ranges under
// their own lock. A multi-block write is entered shard by shard: a reader
// may see part of a write that has not returned yet, as the NVMe host may
// (the atomic write unit is one block).
//
// Invariant: a pending write is newer than every trim range that covers it
// (inserting a range publishes it, then deletes the older writes it covers
// shard by shard; inserting a write checks the ranges under its shard's
// lock, so whichever comes second sees the other).
type overlay struct {
	shards [overlayShards]overlayShard
	trims  struct {
		sync.RWMutex
		list []trimRange
	}
	ranges atomic.Int64  // len(trims.list), readable without its lock
	size   atomic.Int64  // pending blocks + ranges: 0 lets reads skip the locks
	lmap   *lbaMap       // the volume's map, to tell fresh writes
	writes *atomic.Int64 // the store's count of pending block writes
	fresh  *atomic.Int64 // the store's count of fresh pending block writes
}

const (
	overlayShards = 64
	overlayRun    = 64 // consecutive LBAs per shard run
)

// overlayShard holds the pending versions of its LBAs.
type overlayShard struct {
	sync.RWMutex
	refs map[uint64]pendingRef
	_    [40]byte // keep neighbouring shards' locks off one cache line
}

func newOverlay(lmap *lbaMap, writes, fresh *atomic.Int64) *overlay {
	o := &overlay{lmap: lmap, writes: writes, fresh: fresh}
	for i := range o.shards {
		o.shards[i].refs = make(map[uint64]pendingRef)
	}
	return o
}

func (o *overlay) shard(lba uint64) *overlayShard {
	return &o.shards[(lba/overlayRun)%overlayShards]
}

// runEnd returns the end of the shard run holding lba, capped at end.
func runEnd(lba, end uint64) uint64 { return min(end, (lba/overlayRun+1)*overlayRun) }

// count adds d to the counters for ref, a pending write or not.
func (o *overlay) count(ref pendingRef, d int64) {
	o.size.Add(d)
	if ref.index == zeroIndex {
		return
	}
	o.writes.Add(d)
	if ref.fresh {
		o.fresh.Add(d)
	}
}

// covered reports whether a trim range newer than seq covers lba.
func (o *overlay) covered(lba uint64, seq cache.Seq) bool {
	o.trims.RLock()
	defer o.trims.RUnlock()
	return coveredBy(o.trims.list, lba, seq)
}

func coveredBy(list []trimRange, lba uint64, seq cache.Seq) bool {
	for _, t := range list {
		if t.seq > seq && lba >= t.lba && lba-t.lba < t.count {
			return true
		}
	}
	return false
}

// setLocked records ref for lba, in sh, unless a newer version is pending.
func (o *overlay) setLocked(sh *overlayShard, lba uint64, ref pendingRef) {
	old, ok := sh.refs[lba]
	if ok && old.seq > ref.seq {
		return
	}
	// Under the shard lock: a range published before this load is checked;
	// one published after it drops this version itself (addTrim).
	if o.ranges.Load() > 0 && o.covered(lba, ref.seq) {
		return
	}
	if ref.index != zeroIndex {
		if ok && old.index != zeroIndex {
			ref.fresh = old.fresh
		} else {
			ref.fresh = !o.lmap.get(lba).mapped()
		}
	}
	if ok {
		o.count(old, -1)
	}
	o.count(ref, 1)
	sh.refs[lba] = ref
}

// addWrite records a write record of n blocks at lba.
func (o *overlay) addWrite(seq cache.Seq, lba uint64, n int) {
	o.addBlocks(seq, lba, uint64(n), 0)
}

// addBlocks enters pending versions of n blocks from lba, one shard run
// at a time: block i gets index first+i (zeroIndex: a trimmed block).
func (o *overlay) addBlocks(seq cache.Seq, lba, n uint64, first uint32) {
	for l, end := lba, lba+n; l < end; {
		stop := runEnd(l, end)
		sh := o.shard(l)
		sh.Lock()
		for ; l < stop; l++ {
			index := first
			if first != zeroIndex {
				index += uint32(l - lba)
			}
			o.setLocked(sh, l, pendingRef{seq: seq, index: index})
		}
		sh.Unlock()
	}
}

// addTrim records an unmap record of n blocks at lba.
func (o *overlay) addTrim(seq cache.Seq, lba, n uint64) {
	if n <= smallTrim {
		o.addBlocks(seq, lba, n, zeroIndex)
		return
	}
	o.trims.Lock()
	o.trims.list = append(o.trims.list, trimRange{seq: seq, lba: lba, count: n})
	o.ranges.Add(1)
	o.size.Add(1)
	o.trims.Unlock()
	o.dropCovered(seq, lba, n)
}

// dropCovered deletes pending versions older than seq in the range.
func (o *overlay) dropCovered(seq cache.Seq, lba, n uint64) {
	o.forEachInRange(lba, n, func(sh *overlayShard, l uint64, ref pendingRef) {
		if ref.seq < seq {
			o.count(ref, -1)
			delete(sh.refs, l)
		}
	})
}

// forEachInRange calls fn, under the shard's lock, for every pending block
// in [lba, lba+n): walking each shard's map when it holds fewer entries
// than the range has blocks, else the range's LBAs in that shard.
func (o *overlay) forEachInRange(lba, n uint64, fn func(sh *overlayShard, l uint64, ref pendingRef)) {
	end := lba + n
	for i := range o.shards {
		sh := &o.shards[i]
		sh.Lock()
		if uint64(len(sh.refs)) < n/overlayShards+1 {
			for l, ref := range sh.refs {
				if l >= lba && l < end {
					fn(sh, l, ref)
				}
			}
		} else {
			run := lba / overlayRun
			run += (uint64(i) + overlayShards - run%overlayShards) % overlayShards // first run of shard i
			for ; run*overlayRun < end; run += overlayShards {
				for l := max(lba, run*overlayRun); l < runEnd(run*overlayRun, end); l++ {
					if ref, ok := sh.refs[l]; ok {
						fn(sh, l, ref)
					}
				}
			}
		}
		sh.Unlock()
	}
}

// lookup returns the pending version of lba: ok false if there is none (read
// the map); otherwise ref, whose index is zeroIndex for a trimmed block.
func (o *overlay) lookup(lba uint64) (pendingRef, bool) {
	if o.size.Load() == 0 {
		return pendingRef{}, false
	}
	sh := o.shard(lba)
	sh.RLock()
	ref, ok := sh.refs[lba]
	sh.RUnlock()
	if ok {
		return ref, true
	}
	o.trims.RLock()
	defer o.trims.RUnlock()
	newest := pendingRef{index: zeroIndex}
	for _, t := range o.trims.list {
		if lba >= t.lba && lba-t.lba < t.count && t.seq > newest.seq {
			newest.seq = t.seq
		}
	}
	return newest, newest.seq != 0
}

// current reports whether block index of write record seq is to be
// destaged: it is still the newest version of lba, or every newer one is
// in a record above published, not yet published, which the destager does
// not take for an overwrite yet. So what the destager has applied when it
// has packed every published record is exactly those records' effect,
// whatever writes are in flight: the cut a snapshot takes (snapshot.go).
func (o *overlay) current(lba uint64, seq cache.Seq, index int, published cache.Seq) bool {
	ref, ok := o.lookup(lba)
	switch {
	case !ok:
		return false
	case ref.seq == seq:
		return ref.index == uint32(index)
	}
	return ref.seq > published
}

// destagedAll forgets the versions that a run of summary entries of this
// volume (made by records seqs) put in the map.
func (o *overlay) destagedAll(entries []summaryEntry, seqs []cache.Seq) {
	for i, e := range entries {
		if e.kind != kindUnmap {
			sh := o.shard(e.lba)
			sh.Lock()
			o.forgetLocked(sh, e.lba, seqs[i])
			sh.Unlock()
			continue
		}
		o.destagedTrim(e.lba, uint64(e.sum), seqs[i])
	}
}

// destagedTrim forgets an unmap record's range and blocks.
func (o *overlay) destagedTrim(lba, n uint64, seq cache.Seq) {
	o.trims.Lock()
	before := len(o.trims.list)
	o.trims.list = slices.DeleteFunc(o.trims.list, func(t trimRange) bool { return t.seq == seq })
	o.ranges.Add(int64(len(o.trims.list) - before))
	o.size.Add(int64(len(o.trims.list) - before))
	o.trims.Unlock()
	o.forEachInRange(lba, n, func(sh *overlayShard, l uint64, _ pendingRef) { o.forgetLocked(sh, l, seq) })
}

func (o *overlay) forgetLocked(sh *overlayShard, lba uint64, seq cache.Seq) {
	if ref, ok := sh.refs[lba]; ok && ref.seq == seq {
		o.count(ref, -1)
		delete(sh.refs, lba)
	}
}

// clear drops everything (the volume was deleted).
func (o *overlay) clear() {
	for i := range o.shards {
		sh := &o.shards[i]
		sh.Lock()
		for _, ref := range sh.refs {
			o.count(ref, -1)
		}
		clear(sh.refs)
		sh.Unlock()
	}
	o.trims.Lock()
	o.size.Add(-int64(len(o.trims.list)))
	o.ranges.Store(0)
	o.trims.list = nil
	o.trims.Unlock()
}

// publisher tracks which acknowledged write-buffer records have been
// entered into their volume's overlay: the destager must not look at a
// record before, or it would take it for overwritten. Appends finish out of
// order, so it keeps the set of published records above the watermark.
type publisher struct {
	mu struct {
		sync.Mutex
		next  cache.Seq // lowest record not yet published
		ahead map[cache.Seq]struct{}
	}
	upTo atomic.Uint64 // next-1: every record <= upTo is published
}

func (p *publisher) reset(next cache.Seq) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.next = next
	p.mu.ahead = make(map[cache.Seq]struct{})
	p.upTo.Store(uint64(next - 1))
}

// publish marks seq published.
func (p *publisher) publish(seq cache.Seq) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq != p.mu.next {
		p.mu.ahead[seq] = struct{}{}
		return
	}
	p.mu.next++
	for {
		if _, ok := p.mu.ahead[p.mu.next]; !ok {
			break
		}
		delete(p.mu.ahead, p.mu.next)
		p.mu.next++
	}
	p.upTo.Store(uint64(p.mu.next - 1))
}

func (p *publisher) published() cache.Seq { return cache.Seq(p.upTo.Load()) }
