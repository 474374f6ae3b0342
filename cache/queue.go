package cache

// entry is the Buffer's memory of one record it holds or has reserved.
type entry struct {
	start uint64 // log position where the record, or the padding before it, begins
	pos   uint64 // log position of the record
	end   uint64 // log position just past the record
	done  bool   // the record and its padding are persisted
}

// entryQueue is a growable ring of entries, oldest first. It grows by doubling
// and never shrinks, so a Buffer in steady state does not allocate.
type entryQueue struct {
	ring  []entry // len is zero or a power of two
	first int     // index in ring of the oldest entry
	count int
}

func (q *entryQueue) len() int { return q.count }

// at returns the i-th oldest entry; i must be in [0, len()).
func (q *entryQueue) at(i int) *entry {
	if i < 0 || i >= q.count {
		panic("cache: entry index out of range")
	}
	return &q.ring[(q.first+i)&(len(q.ring)-1)]
}

func (q *entryQueue) push(e entry) {
	if q.count == len(q.ring) {
		q.grow()
	}
	q.ring[(q.first+q.count)&(len(q.ring)-1)] = e
	q.count++
}

// dropFront removes the n oldest entries.
func (q *entryQueue) dropFront(n int) {
	if n < 0 || n > q.count {
		panic("cache: dropFront out of range")
	}
	q.first = (q.first + n) & max(len(q.ring)-1, 0)
	q.count -= n
}

// keepFront removes all but the n oldest entries.
func (q *entryQueue) keepFront(n int) {
	if n < 0 || n > q.count {
		panic("cache: keepFront out of range")
	}
	q.count = n
}

func (q *entryQueue) grow() {
	ring := make([]entry, max(2*len(q.ring), 256))
	for i := range q.count {
		ring[i] = *q.at(i)
	}
	q.ring, q.first = ring, 0
}
