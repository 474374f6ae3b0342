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
// Invariant: a pending write is newer than every trim range that covers it
// (inserting a range deletes the older writes it covers; inserting a write
// checks the ranges).
type overlay struct {
	mu struct {
		sync.RWMutex
		refs  map[uint64]pendingRef
		trims []trimRange
	}
	size   atomic.Int64  // len(refs) + len(trims): 0 lets reads skip the lock
	lmap   *lbaMap       // the volume's map, to tell fresh writes
	writes *atomic.Int64 // the store's count of pending block writes
	fresh  *atomic.Int64 // the store's count of fresh pending block writes
}

func newOverlay(lmap *lbaMap, writes, fresh *atomic.Int64) *overlay {
	o := &overlay{lmap: lmap, writes: writes, fresh: fresh}
	o.mu.refs = make(map[uint64]pendingRef)
	return o
}

// count adds d to the counters for ref, a pending write or not.
func (o *overlay) count(ref pendingRef, d int64) {
	if ref.index == zeroIndex {
		return
	}
	o.writes.Add(d)
	if ref.fresh {
		o.fresh.Add(d)
	}
}

// coveredLocked reports whether a trim range newer than seq covers lba.
func (o *overlay) coveredLocked(lba uint64, seq cache.Seq) bool {
	for _, t := range o.mu.trims {
		if t.seq > seq && lba >= t.lba && lba-t.lba < t.count {
			return true
		}
	}
	return false
}

// setLocked records ref for lba unless a newer version is pending.
func (o *overlay) setLocked(lba uint64, ref pendingRef) {
	old, ok := o.mu.refs[lba]
	if ok && old.seq > ref.seq {
		return
	}
	if o.coveredLocked(lba, ref.seq) {
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
	o.mu.refs[lba] = ref
}

// addWrite records a write record of n blocks at lba.
func (o *overlay) addWrite(seq cache.Seq, lba uint64, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range n {
		o.setLocked(lba+uint64(i), pendingRef{seq: seq, index: uint32(i)})
	}
	o.size.Store(int64(len(o.mu.refs) + len(o.mu.trims)))
}

// addTrim records an unmap record of n blocks at lba.
func (o *overlay) addTrim(seq cache.Seq, lba, n uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n <= smallTrim {
		for i := range n {
			o.setLocked(lba+i, pendingRef{seq: seq, index: zeroIndex})
		}
	} else {
		o.mu.trims = append(o.mu.trims, trimRange{seq: seq, lba: lba, count: n})
		o.dropCoveredLocked(seq, lba, n)
	}
	o.size.Store(int64(len(o.mu.refs) + len(o.mu.trims)))
}

// dropCoveredLocked deletes pending versions older than seq in the range.
func (o *overlay) dropCoveredLocked(seq cache.Seq, lba, n uint64) {
	drop := func(l uint64, ref pendingRef) {
		if ref.seq < seq {
			o.count(ref, -1)
			delete(o.mu.refs, l)
		}
	}
	if uint64(len(o.mu.refs)) < n {
		for l, ref := range o.mu.refs {
			if l >= lba && l-lba < n {
				drop(l, ref)
			}
		}
		return
	}
	for l := lba; l < lba+n; l++ {
		if ref, ok := o.mu.refs[l]; ok {
			drop(l, ref)
		}
	}
}

// lookup returns the pending version of lba: ok false if there is none (read
// the map); otherwise ref, whose index is zeroIndex for a trimmed block.
func (o *overlay) lookup(lba uint64) (pendingRef, bool) {
	if o.size.Load() == 0 {
		return pendingRef{}, false
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	if ref, ok := o.mu.refs[lba]; ok {
		return ref, true
	}
	for _, t := range o.mu.trims {
		if lba >= t.lba && lba-t.lba < t.count {
			return pendingRef{seq: t.seq, index: zeroIndex}, true
		}
	}
	return pendingRef{}, false
}

// current reports whether block index of write record seq is still the
// newest version of lba.
func (o *overlay) current(lba uint64, seq cache.Seq, index int) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	ref, ok := o.mu.refs[lba]
	return ok && ref.seq == seq && ref.index == uint32(index)
}

// destagedAll forgets, under one lock, the versions that a run of summary
// entries of this volume (made by records seqs) put in the map.
func (o *overlay) destagedAll(entries []summaryEntry, seqs []cache.Seq) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, e := range entries {
		if e.kind != kindUnmap {
			o.forgetLocked(e.lba, seqs[i])
			continue
		}
		n := uint64(e.sum)
		o.mu.trims = slices.DeleteFunc(o.mu.trims, func(t trimRange) bool { return t.seq == seqs[i] })
		if n <= uint64(len(o.mu.refs)) || n <= smallTrim {
			for l := e.lba; l < e.lba+n; l++ {
				o.forgetLocked(l, seqs[i])
			}
			continue
		}
		for l, ref := range o.mu.refs {
			if ref.seq == seqs[i] && l >= e.lba && l-e.lba < n {
				o.forgetLocked(l, seqs[i])
			}
		}
	}
	o.size.Store(int64(len(o.mu.refs) + len(o.mu.trims)))
}

func (o *overlay) forgetLocked(lba uint64, seq cache.Seq) {
	if ref, ok := o.mu.refs[lba]; ok && ref.seq == seq {
		o.count(ref, -1)
		delete(o.mu.refs, lba)
	}
}

// clear drops everything (the volume was deleted).
func (o *overlay) clear() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ref := range o.mu.refs {
		o.count(ref, -1)
	}
	clear(o.mu.refs)
	o.mu.trims = nil
	o.size.Store(0)
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
