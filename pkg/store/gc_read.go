package store

import (
	"sync"

	"basalt/pkg/disk"
)

// gcReadBytes bounds the cleaner's read-ahead: the bytes of one victim
// segment it reads from each drive in one pass.
const gcReadBytes = 2 << 20

// readAhead is the cleaner's copy of the data chunks of a run of
// consecutive stripes of the segment it is cleaning: every data chunk of
// the run, one I/O per run of consecutive data chunks in a column, all at
// once. Parity chunks are not read: the cleaner moves data, and parity is
// needed only for a chunk that cannot be read, which is then reconstructed
// block by block. Reading chunk by chunk, each read waiting for the one
// before, made the drives' latency, not their bandwidth, the bound on
// cleaning; reading parity too made the drives move a third more bytes
// (2+1) than the cleaner uses.
type readAhead struct {
	seg      *segment
	gen      uint32
	first, n int      // stripes [first, first+n) are loaded
	cols     [][]byte // per segment column: room for the run's chunks
	have     [][]bool // per segment column, per stripe of the run: chunk read
	bufs     [][]byte
	runs     []chunkRun
}

// chunkRun is one read of the read-ahead: stripes [first, first+n) of
// segment column col, all data chunks there.
type chunkRun struct {
	col, first, n int
	ok            bool
}

// stripesPerRead is how many stripes one read-ahead holds.
func (w *writer) stripesPerRead() int { return max(1, gcReadBytes/w.s.lay.chunkSize) }

// loaded reports whether stripe j of g (this life of it) is in the read-ahead.
func (ra *readAhead) loaded(g *segment, geom *segGeom, j int) bool {
	return ra.seg == g && ra.gen == geom.gen && j >= ra.first && j < ra.first+ra.n
}

// readStripes loads the data chunks of stripes from first of g, up to
// written, into the read-ahead. A chunk whose read fails is left out; it is
// then read, or reconstructed, one by one as before.
func (w *writer) readStripes(g *segment, geom *segGeom, first, written int) {
	ra := &w.gcRead
	size := w.s.lay.chunkSize
	n := min(written-first, w.stripesPerRead())
	sh := geom.shape
	width := sh.width()
	for len(ra.bufs) < width {
		ra.bufs = append(ra.bufs, disk.AlignedBuffer(w.stripesPerRead()*size))
	}
	for len(ra.have) < width {
		ra.have = append(ra.have, make([]bool, w.stripesPerRead()))
	}
	ra.cols = ra.cols[:0]
	for c := range width {
		ra.cols = append(ra.cols, ra.bufs[c][:n*size])
		clear(ra.have[c])
	}
	ra.runs = dataRuns(ra.runs[:0], sh, first, n)
	base := w.s.lay.chunkOffset(g.id, first)
	w.readRuns(geom, base, ra.runs, func(r chunkRun) []byte {
		rel := r.first - first
		return ra.cols[r.col][rel*size : (rel+r.n)*size]
	})
	for _, r := range ra.runs {
		for j := r.first; r.ok && j < r.first+r.n; j++ {
			ra.have[r.col][j-first] = true
		}
	}
	ra.seg, ra.gen, ra.first, ra.n = g, geom.gen, first, n
}

// readRuns reads every run at once into the buffer buf gives it, from the
// stripe at base onwards, and records which reads succeeded.
func (w *writer) readRuns(geom *segGeom, base int64, runs []chunkRun, buf func(chunkRun) []byte) {
	size := int64(w.s.lay.chunkSize)
	first := runs[0].first
	read := func(i int) {
		r := &runs[i]
		off := base + int64(r.first-first)*size
		r.ok = w.s.readDrive(geom.columns[r.col], buf(*r), off) == nil
	}
	if w.s.opts.synchronous {
		for i := range runs {
			read(i)
		}
		return
	}
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { read(i) })
	}
	wg.Wait()
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

// chunk returns the loaded copy of segment column c's chunk of stripe j,
// or nil.
func (ra *readAhead) chunk(c, j, size int) []byte {
	if j < ra.first || j >= ra.first+ra.n || c >= len(ra.cols) || !ra.have[c][j-ra.first] {
		return nil
	}
	rel := j - ra.first
	return ra.cols[c][rel*size : (rel+1)*size]
}

// forget drops the read-ahead, whose segment is being freed or reused.
func (ra *readAhead) forget() { ra.seg = nil }

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
