package volume

import "math"

// maxGenerations bounds a volume's generation array: 4 bytes each, so at
// most 2 MiB per volume, and 4 KiB extents for volumes up to 2 GiB.
const maxGenerations = 1 << 19

// genSaturated is a generation too far past start to hold: it counts as
// newer than any base (a delta then sends the extent, never misses it).
const genSaturated = math.MaxUint32

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
// extents merges into one carrying the higher generation. A generation is
// kept as its distance from start in 4 bytes (saturating at genSaturated,
// which counts as newer than any base). So it costs 4 bytes per 4 KiB
// written-up-to for volumes to 2 GiB, and 2 MiB beyond, with extents of
// volume size / 524,288 rounded up to a power of two.
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
	gen      []uint32 // gen[i]: extent [i<<shift, (i+1)<<shift), as its index less start
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
	rel := uint32(genSaturated)
	switch {
	case index <= g.start:
		return // before what the array covers: no base it answers needs it
	case index-g.start < genSaturated:
		rel = uint32(index - g.start)
	}
	for i := off >> g.shift; i <= (end-1)>>g.shift; i++ {
		g.gen[i] = max(g.gen[i], rel)
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
	gen := make([]uint32, n)
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
// above index, which is at least start.
func (g *generations) since(index uint64) []extent {
	var out []extent
	size := int64(1) << g.shift
	base := uint32(genSaturated)
	if index-g.start < genSaturated {
		base = uint32(index - g.start)
	}
	for i, gen := range g.gen {
		if gen <= base && gen != genSaturated {
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
func (g *generations) bytes() int { return 4 * cap(g.gen) }
