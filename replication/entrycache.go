package replication

import "go.etcd.io/raft/v3/raftpb"

// entryCache keeps the most recently appended entries of one group, up to a
// byte limit, so that the leader replicates and applies them, and a follower
// applies them, without reading them back from the write buffer. Entries are
// evicted oldest first.
//
// Invariant: ents[i] has index first+i, and bytes is the sum of their data
// lengths.
type entryCache struct {
	limit int
	first uint64
	ents  []raftpb.Entry
	bytes int
}

func (c *entryCache) get(i uint64) (raftpb.Entry, bool) {
	if i < c.first || i >= c.first+uint64(len(c.ents)) {
		return raftpb.Entry{}, false
	}
	return c.ents[i-c.first], true
}

// put records ents, which start at index first, replacing any cached entry at
// or after first (a log overwrite). A gap before first empties the cache.
func (c *entryCache) put(first uint64, ents []raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	end := c.first + uint64(len(c.ents))
	switch {
	case len(c.ents) == 0 || first < c.first || first > end:
		c.reset()
		c.first = first
	case first < end:
		for _, e := range c.ents[first-c.first:] {
			c.bytes -= len(e.Data)
		}
		clear(c.ents[first-c.first:])
		c.ents = c.ents[:first-c.first]
	}
	for _, e := range ents {
		c.bytes += len(e.Data)
	}
	c.ents = append(c.ents, ents...)
	c.evict()
}

// dropThrough forgets the entries up to index.
func (c *entryCache) dropThrough(index uint64) {
	n := 0
	for n < len(c.ents) && c.first+uint64(n) <= index {
		c.bytes -= len(c.ents[n].Data)
		n++
	}
	c.dropFront(n)
}

func (c *entryCache) evict() {
	n := 0
	for n < len(c.ents)-1 && c.bytes > c.limit {
		c.bytes -= len(c.ents[n].Data)
		n++
	}
	c.dropFront(n)
}

// dropFront removes the first n entries, copying the rest to a fresh array
// when most of the old one would be wasted.
func (c *entryCache) dropFront(n int) {
	if n == 0 {
		return
	}
	clear(c.ents[:n])
	c.ents = c.ents[n:]
	c.first += uint64(n)
	if cap(c.ents) > 64 && cap(c.ents) > 4*len(c.ents) {
		c.ents = append([]raftpb.Entry(nil), c.ents...)
	}
}

func (c *entryCache) reset() {
	c.ents, c.bytes = nil, 0
}
