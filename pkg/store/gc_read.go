package store

import (
	"sync"

	"basalt/pkg/disk"
)

// gcReadBytes bounds the cleaner's read-ahead: the bytes of one victim
// segment it reads from each drive in one pass.
const gcReadBytes = 2 << 20

// readAhead is the cleaner's copy of the data chunks of runs of
// consecutive stripes of the segments it cleans, in two slots: the run the
// cleaner relocates from, and the next one (the rest of the victim, or the
// start of the next victim), read in the background meanwhile.
//
// A slot is filled with every data chunk of its run at once, one I/O per
// run of consecutive data chunks in a column. Parity chunks are not read:
// the cleaner moves data, and parity is needed only for a chunk that cannot
// be read, which is then reconstructed block by block. Reading chunk by
// chunk, each read waiting for the one before, made the drives' latency the
// bound on cleaning; reading parity too made the drives move a third more
// bytes (3+1) than the cleaner uses; and reading while the writer waited
// left the writer idle for a quarter of a random-write run.
//
// A slot names the segment life (gen) it was read from; the writer
// goroutine, which alone frees and reopens segments, uses a slot only while
// that life lasts, so a read that raced with a reuse is never used.
type readAhead struct {
	slots [2]raSlot
	cur   int // the slot relocate reads from
	ahead int // loads served by a slot read ahead (for tests)
}

// raSlot is one run of stripes of one segment.
type raSlot struct {
	seg      *segment
	gen      uint32
	first, n int      // stripes [first, first+n)
	cols     [][]byte // per segment column: room for the run's chunks
	have     [][]bool // per segment column, per stripe of the run: chunk read
	bufs     [][]byte
	runs     []chunkRun
	reading  sync.WaitGroup // the slot's reads in flight
}

// chunkRun is one read of a slot: stripes [first, first+n) of segment
// column col, all data chunks there.
type chunkRun struct{ col, first, n int }

// stripesPerRead is how many stripes one slot holds.
func (w *writer) stripesPerRead() int { return max(1, gcReadBytes/w.s.lay.chunkSize) }

// holds reports whether the slot holds stripe j of g in this life.
func (sl *raSlot) holds(g *segment, geom *segGeom, j int) bool {
	return sl.seg == g && sl.gen == geom.gen && j >= sl.first && j < sl.first+sl.n
}

// load makes the current slot hold stripe j of g (written stripes in all):
// from the slot read ahead if it holds it, else by reading now. Then it
// starts reading what the cleaner needs next in the other slot: the rest of
// g, or else the first stripes of the victim after g.
func (w *writer) load(g *segment, geom *segGeom, j, written int) {
	ra := &w.gcRead
	if ra.slots[ra.cur].holds(g, geom, j) {
		return
	}
	ra.cur = 1 - ra.cur
	sl := &ra.slots[ra.cur]
	sl.reading.Wait()
	if sl.holds(g, geom, j) {
		ra.ahead++
	} else {
		w.fill(sl, g, geom, j, written)
		sl.reading.Wait()
	}
	w.readNext(g, geom, sl.first+sl.n, written)
}

// readNext starts reading, into the slot not in use, stripes from next of
// g, or when g has no more the start of the victim the cleaner will take
// after g (writer.gcNext).
func (w *writer) readNext(g *segment, geom *segGeom, next, written int) {
	ra := &w.gcRead
	sl := &ra.slots[1-ra.cur]
	sl.reading.Wait()
	if next < written {
		w.fill(sl, g, geom, next, written)
		return
	}
	w.gcNext = w.pickVictim(g)
	if v := w.gcNext; v != nil {
		w.fill(sl, v, v.geom.Load(), 0, int(v.written.Load()))
	}
}

// fill starts reading the data chunks of stripes from first of g, up to
// written, into sl; sl.reading is done when they are in. A chunk whose read
// fails is left out: it is then read, or reconstructed, one by one.
func (w *writer) fill(sl *raSlot, g *segment, geom *segGeom, first, written int) {
	size := w.s.lay.chunkSize
	n := min(written-first, w.stripesPerRead())
	sh := geom.shape
	width := sh.width()
	for len(sl.bufs) < width {
		sl.bufs = append(sl.bufs, disk.AlignedBuffer(w.stripesPerRead()*size))
		sl.have = append(sl.have, make([]bool, w.stripesPerRead()))
	}
	sl.cols = sl.cols[:0]
	for c := range width {
		sl.cols = append(sl.cols, sl.bufs[c][:n*size])
		clear(sl.have[c])
	}
	sl.seg, sl.gen, sl.first, sl.n = g, geom.gen, first, n
	sl.runs = dataRuns(sl.runs[:0], sh, first, n)
	base := w.s.lay.chunkOffset(g.id, first)
	for i := range sl.runs {
		if w.s.opts.synchronous {
			w.readRun(sl, geom, base, i)
			continue
		}
		sl.reading.Go(func() { w.readRun(sl, geom, base, i) })
	}
}

// readRun reads run i of sl (the slot's stripes start at base).
func (w *writer) readRun(sl *raSlot, geom *segGeom, base int64, i int) {
	size := w.s.lay.chunkSize
	r := &sl.runs[i]
	rel := r.first - sl.first
	err := w.s.readDrive(geom.columns[r.col], sl.cols[r.col][rel*size:(rel+r.n)*size], base+int64(rel*size))
	for j := rel; err == nil && j < rel+r.n; j++ {
		sl.have[r.col][j] = true
	}
}

// dataRuns appends to runs, for each segment column, the runs of
// consecutive stripes in [first, first+n) where that column holds a data
// chunk (parity rotates across the columns, stripe by stripe).
func dataRuns(runs []chunkRun, sh *shape, first, n int) []chunkRun {
	width := sh.width()
	for c := range width {
		start := -1
		for j := first; j <= first+n; j++ {
			data := j < first+n && (c-j%width+width)%width < sh.data
			switch {
			case data && start < 0:
				start = j
			case !data && start >= 0:
				runs = append(runs, chunkRun{col: c, first: start, n: j - start})
				start = -1
			}
		}
	}
	return runs
}

// chunk returns the current slot's copy of segment column c's chunk of
// stripe j, or nil.
func (ra *readAhead) chunk(c, j, size int) []byte {
	sl := &ra.slots[ra.cur]
	if j < sl.first || j >= sl.first+sl.n || c >= len(sl.cols) || !sl.have[c][j-sl.first] {
		return nil
	}
	rel := j - sl.first
	return sl.cols[c][rel*size : (rel+1)*size]
}

// wait waits for the reads in flight (the writer is stopping).
func (ra *readAhead) wait() {
	for i := range ra.slots {
		ra.slots[i].reading.Wait()
	}
}

// summaryOf decodes stripe j's summary from a loaded copy, trying each
// column's; it falls back to reading it from the drives.
func (w *writer) summaryOf(g *segment, geom *segGeom, j int, dst *summary) error {
	sh := geom.shape
	for i := range sh.width() {
		c := (j + i) % sh.width()
		if b := w.gcRead.chunk(c, j, w.s.lay.chunkSize); b != nil &&
			w.s.checkSummary(b[:sh.summaryBlocks*BlockSize], g.id, geom, j, dst) == nil {
			return nil
		}
	}
	return w.s.readSummary(g.id, geom, j, dst)
}
