package store

import (
	"basalt/pkg/disk"
)

// gcReadBytes bounds the cleaner's read-ahead: the bytes of one victim
// segment it reads from each drive in one I/O.
const gcReadBytes = 2 << 20

// readAhead is the cleaner's copy of a run of consecutive stripes of the
// segment it is cleaning, read whole: one I/O per column, every column at
// once. Reading chunk by chunk, each read waiting for the one before, made
// the drives' latency, not their bandwidth, the bound on cleaning.
type readAhead struct {
	seg      *segment
	gen      uint32
	first, n int      // stripes [first, first+n) are loaded
	cols     [][]byte // per segment column: the run's chunks; nil if the read failed
	bufs     [][]byte
	failed   []bool
}

// stripesPerRead is how many stripes one read-ahead holds.
func (w *writer) stripesPerRead() int { return max(1, gcReadBytes/w.s.lay.chunkSize) }

// loaded reports whether stripe j of g (this life of it) is in the read-ahead.
func (ra *readAhead) loaded(g *segment, geom *segGeom, j int) bool {
	return ra.seg == g && ra.gen == geom.gen && j >= ra.first && j < ra.first+ra.n
}

// readStripes loads stripes from first of g, up to written, into the
// read-ahead. A column whose read fails is left out; its chunks are then
// read, or reconstructed, one by one as before.
func (w *writer) readStripes(g *segment, geom *segGeom, first, written int) {
	ra := &w.gcRead
	size := w.s.lay.chunkSize
	n := min(written-first, w.stripesPerRead())
	width := geom.shape.width()
	for len(ra.bufs) < width {
		ra.bufs = append(ra.bufs, disk.AlignedBuffer(w.stripesPerRead()*size))
	}
	ra.cols, ra.failed = ra.cols[:0], ra.failed[:0]
	for range width {
		ra.cols, ra.failed = append(ra.cols, nil), append(ra.failed, false)
	}
	off := w.s.lay.chunkOffset(g.id, first)
	w.s.parallel(width, func(c int) {
		ra.failed[c] = w.s.readDrive(geom.columns[c], ra.bufs[c][:n*size], off) != nil
	})
	for c := range width {
		if !ra.failed[c] {
			ra.cols[c] = ra.bufs[c][:n*size]
		}
	}
	ra.seg, ra.gen, ra.first, ra.n = g, geom.gen, first, n
}

// chunk returns the loaded copy of segment column c's chunk of stripe j,
// or nil.
func (ra *readAhead) chunk(c, j, size int) []byte {
	if j < ra.first || j >= ra.first+ra.n || c >= len(ra.cols) || ra.cols[c] == nil {
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
