package volume

import (
	"slices"
	"sync"
)

// defaultChangeLimit is how many change records a Volume keeps by default:
// 24 bytes each, so at most 1.5 MiB per volume. Writes that continue the
// previous one share its record, so a sequential stream takes one.
const defaultChangeLimit = 1 << 16

// changeLog records which byte ranges of the volume the entries applied
// here wrote, trimmed or zeroed, by index, so that a delta snapshot
// (delta.go) can stream only what changed after the index a receiver
// holds. It lives in memory: it starts with the first entry the Volume
// applies (or the index it restores), and it forgets its oldest records
// past its limit, raising its floor. A base below the floor, or any base
// before the first entry, cannot be answered precisely; then the coarse
// half, gens (generations.go), answers by extent for any base since the log
// started, and only a base before that (or another replica's) gets a whole
// snapshot.
//
// Records are in index order; a record that a later write extended
// (coalesces: a write that continues it, or covers it) carries the later
// index, so that everything after floor is covered by the records whose
// index is above it, and a query may return a little more than changed
// (at most the sequential run a record grew by), never less.
type changeLog struct {
	mu    sync.Mutex
	limit int  // records kept at most; 0: not tracking
	known bool // floor is meaningful: the log started
	floor uint64
	recs  []change // recs[head:] are live, ascending index
	head  int
	last  uint64      // the highest index recorded
	gens  generations // per extent, the highest index that changed it
}

// change is one record: entries up to index wrote [off, end).
type change struct {
	index    uint64
	off, end int64
}

// extent is a byte range of the volume.
type extent struct{ off, end int64 }

func newChangeLog() *changeLog { return &changeLog{limit: defaultChangeLimit} }

// setLimit sets how many records the log keeps; 0 stops tracking (every
// snapshot is then whole) and forgets what it held, extents included.
func (l *changeLog) setLimit(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limit = max(n, 0)
	if l.limit == 0 {
		l.known, l.recs, l.head = false, nil, 0
		l.gens.forget()
	}
	l.trimLocked()
}

// record notes that the entry at index changed [off, off+n).
func (l *changeLog) record(index uint64, off, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limit == 0 {
		return
	}
	if !l.known {
		l.known, l.floor = true, index-1
		l.gens.reset(index - 1)
	}
	end := off + n
	l.last = max(l.last, index)
	l.gens.record(index, off, end)
	if last := len(l.recs) - 1; last >= l.head {
		r := &l.recs[last]
		if index > r.index && coalesces(*r, off, end) {
			r.off, r.end, r.index = min(r.off, off), max(r.end, end), index
			return
		}
	}
	l.recs = append(l.recs, change{index: index, off: off, end: end})
	l.trimLocked()
}

// maxCoalesced bounds the range a record grows to by sequential writes.
const maxCoalesced = 4 << 20

// coalesces reports whether a change of [off, end) may extend record r:
// it covers r, or it continues r sequentially up to maxCoalesced. A change
// inside a larger record must not merge with it: the record's whole range
// would then count as changed at the later index.
func coalesces(r change, off, end int64) bool {
	return off <= r.off && end >= r.end || off == r.end && end-r.off <= maxCoalesced
}

// trimLocked drops the oldest quarter of the records when there are more
// than the limit, raising the floor to the newest index dropped.
func (l *changeLog) trimLocked() {
	live := len(l.recs) - l.head
	if l.limit == 0 || live <= l.limit {
		return
	}
	drop := max(live-l.limit, l.limit/4)
	l.floor = l.recs[l.head+drop-1].index
	l.head += drop
	if l.head > len(l.recs)/2 {
		l.recs = append(l.recs[:0], l.recs[l.head:]...)
		l.head = 0
	}
}

// reset restarts the log at index: the state was replaced (a snapshot
// restored) as of it.
func (l *changeLog) reset(index uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs, l.head = l.recs[:0], 0
	l.known, l.floor, l.last = l.limit > 0, index, index
	l.gens.reset(index)
}

// setCoarse turns the extent generations on or off; off, a base older than
// the precise records gets a whole snapshot, and the array is dropped.
func (l *changeLog) setCoarse(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !on:
		l.gens.forget()
	case l.gens.disabled:
		l.gens.reset(max(l.last, l.floor)) // it missed what came before
	}
	l.gens.disabled = !on
}

// extentsSince returns, ascending and merged, the extents that entries
// after index changed, whole: a superset of since's ranges, for any index
// since the log started; ok false when not tracking, not started, or index
// is before the start.
func (l *changeLog) extentsSince(index uint64) (ranges []extent, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limit == 0 || !l.known || l.gens.disabled || index < l.gens.start {
		return nil, false
	}
	return l.gens.since(index), true
}

// extentBytes is the memory the extent generations hold.
func (l *changeLog) extentBytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gens.bytes()
}

// since returns, sorted and merged, the ranges that entries after index
// changed; ok false when the log cannot tell (not tracking, not started,
// or index below its floor).
func (l *changeLog) since(index uint64) (ranges []extent, ok bool) {
	l.mu.Lock()
	live := l.recs[l.head:]
	if l.limit == 0 || !l.known || index < l.floor {
		l.mu.Unlock()
		return nil, false
	}
	first, _ := slices.BinarySearchFunc(live, index+1, func(c change, i uint64) int {
		switch {
		case c.index < i:
			return -1
		case c.index > i:
			return 1
		}
		return 0
	})
	for _, c := range live[first:] {
		ranges = append(ranges, extent{off: c.off, end: c.end})
	}
	l.mu.Unlock()
	return mergeExtents(ranges), true
}

// mergeExtents sorts ranges and merges those that overlap or touch.
func mergeExtents(ranges []extent) []extent {
	slices.SortFunc(ranges, func(a, b extent) int {
		switch {
		case a.off < b.off:
			return -1
		case a.off > b.off:
			return 1
		}
		return 0
	})
	out := ranges[:0]
	for _, r := range ranges {
		if n := len(out); n > 0 && r.off <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, r.end)
			continue
		}
		out = append(out, r)
	}
	return out
}
