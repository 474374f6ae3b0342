package volume

// maxGenerations bounds a volume's generation array: 8 bytes each, so at
// most 1 MiB per volume.
const maxGenerations = 1 << 17

// minExtentShift is the finest extent the generation array tracks: 4 KiB.
const minExtentShift = 12

// generations is the coarse half of the change log: per extent of the
// volume (1<<shift bytes, from 4 KiB up), the highest index of an entry
// that wrote, trimmed or zeroed any byte of it, or 0. It answers a delta
// for a base older than the precise records reach (changeLog.extentsSince),
// at the price of sending every changed extent whole.
//
// Bounded and lazy: the array covers only the volume up to the highest
// extent written yet (nothing for a volume that applied nothing), grows by
// doubling, and never holds more than limit entries: when the volume
// reaches past limit extents, the extent size doubles and each pair of
// extents merges into one carrying the higher generation. So it costs 8
// bytes per 4 KiB written-up-to for volumes to 512 MiB, and 1 MiB beyond,
// with extents of volume size / 131,072 rounded up to a power of two.
//
// Soundness: an extent's generation is never below the index of any entry
// recorded since start that changed it (record raises it, a merge keeps the
// higher one, reset clears it only together with raising start to the
// restored index). Hence, for a base at or above start, every byte an
// entry after the base changed lies in an extent whose generation exceeds
// the base.
type generations struct {
	disabled bool     // not tracking (setCoarse(false))
	limit    int      // entries at most: maxGenerations unless a test lowers it
	shift    uint     // extents are 1<<shift bytes
	start    uint64   // every entry after start is recorded (when changeLog.known)
	gen      []uint64 // gen[i]: extent [i<<shift, (i+1)<<shift)
}

// record notes that the entry at index changed [off, end). It allocates
// only when the range reaches past the extents covered so far.
func (g *generations) record(index uint64, off, end int64) {
	if g.disabled || end <= off || off < 0 {
		return
	}
	if g.shift == 0 {
		g.shift = minExtentShift
	}
	if last := (end - 1) >> g.shift; last >= int64(len(g.gen)) {
		g.grow(last)
	}
	for i := off >> g.shift; i <= (end-1)>>g.shift; i++ {
		g.gen[i] = max(g.gen[i], index)
	}
}

// grow makes the array cover extent last (at the current shift),
// coarsening first while last is beyond the limit.
func (g *generations) grow(last int64) {
	limit := int64(g.limit)
	if limit <= 0 {
		limit = maxGenerations
	}
	for last >= limit {
		g.coarsen()
		last >>= 1
	}
	if last < int64(len(g.gen)) {
		return
	}
	n := min(max(last+1, 2*int64(len(g.gen))), limit)
	if n <= int64(cap(g.gen)) {
		old := len(g.gen)
		g.gen = g.gen[:n]
		clear(g.gen[old:])
		return
	}
	gen := make([]uint64, n)
	copy(gen, g.gen)
	g.gen = gen
}

// coarsen doubles the extent size, merging each pair of extents into one
// with the higher generation.
func (g *generations) coarsen() {
	n := (len(g.gen) + 1) / 2
	for i := range n {
		m := g.gen[2*i]
		if 2*i+1 < len(g.gen) {
			m = max(m, g.gen[2*i+1])
		}
		g.gen[i] = m
	}
	clear(g.gen[n:])
	g.gen = g.gen[:n]
	g.shift++
}

// since returns, ascending and merged, the extents whose generation is
// above index.
func (g *generations) since(index uint64) []extent {
	var out []extent
	size := int64(1) << g.shift
	for i, gen := range g.gen {
		if gen <= index {
			continue
		}
		off := int64(i) << g.shift
		if n := len(out); n > 0 && out[n-1].end == off {
			out[n-1].end = off + size
			continue
		}
		out = append(out, extent{off: off, end: off + size})
	}
	return out
}

// reset forgets every generation: the log starts again at start.
func (g *generations) reset(start uint64) {
	clear(g.gen)
	g.start = start
}

// forget drops the array.
func (g *generations) forget() { g.gen, g.shift = nil, 0 }

// bytes is the memory the array holds.
func (g *generations) bytes() int { return 8 * cap(g.gen) }
