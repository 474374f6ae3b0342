package store

import (
	"fmt"

	"basalt/cache"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// stripeBuild is a stripe being filled in a batch.
type stripeBuild struct {
	entries   []summaryEntry
	seqs      []cache.Seq // host stream: the record of each entry
	slots     int         // data slots used
	pack      packBuild   // the packed slot being filled, if any
	bufferSeq uint64
	closed    bool
}

func (sb *stripeBuild) reset() {
	sb.entries, sb.seqs, sb.slots, sb.bufferSeq, sb.closed = sb.entries[:0], sb.seqs[:0], 0, 0, false
	sb.pack.reset()
}

// batch is a run of consecutive stripes of one segment, laid out column by
// column as they will be written: stripe rel of the batch occupies
// cols[c][rel*chunkSize : (rel+1)*chunkSize] for column c.
type batch struct {
	cols    [][]byte
	stripes []*stripeBuild
	spare   []*stripeBuild
	seg     *segment // nil until the batch gets its first stripe
	geom    *segGeom
	first   int // stripe index of stripes[0] in seg
	limit   int // stripes the batch may hold (to the segment's end)
	room    int // stripes its buffers hold
}

func newBatch(s *Store, stripes int) *batch {
	b := &batch{room: stripes}
	size := stripes * s.lay.chunkSize
	for range s.lay.drives {
		b.cols = append(b.cols, disk.AlignedBuffer(size))
	}
	return b
}

func (b *batch) current() *stripeBuild {
	if n := len(b.stripes); n > 0 && !b.stripes[n-1].closed {
		return b.stripes[n-1]
	}
	return nil
}

func (b *batch) empty() bool {
	return len(b.stripes) == 0 || (len(b.stripes) == 1 && len(b.stripes[0].entries) == 0)
}

func (b *batch) closedStripes() int {
	n := len(b.stripes)
	if b.current() != nil {
		n--
	}
	return n
}

func (b *batch) full() bool { return b.seg != nil && len(b.stripes) == b.limit && b.current() == nil }

// chunk returns the buffer of chunk c of stripe rel.
func (b *batch) chunk(rel, c, chunkSize int) []byte {
	col := b.geom.shape.column(b.first+rel, c)
	return b.cols[col][rel*chunkSize : (rel+1)*chunkSize]
}

// slot returns the buffer of data slot q of stripe rel.
func (b *batch) slot(rel, q, chunkSize int) []byte {
	chunk, block := b.geom.shape.locate(q)
	off := block * BlockSize
	return b.chunk(rel, chunk, chunkSize)[off : off+BlockSize]
}

// stream is an append point: the segment new stripes go to, the batch
// being filled, and the batches being written (host stream only: the
// writer fills the next batch while the drives write earlier ones).
type stream struct {
	s    *Store
	kind uint8
	seg  *segment // segment new stripes are taken from; nil: open one
	geom *segGeom
	next int // next stripe of seg not yet given to a batch

	fill       *batch
	spare      []*batch // buffer sets neither filling nor in flight
	inflight   int      // batches being written (writer.flights holds them)
	maxFlights int
}

// gcBatchStripes bounds the cleaner's batches, gcBatchFlights how many are
// written at once: the cleaner relocates from the next victim meanwhile.
const (
	gcBatchStripes = 4
	gcBatchFlights = 2
)

func newStream(s *Store, kind uint8) *stream {
	stripes, flights := s.opts.BatchStripes, s.opts.BatchFlights
	if kind == streamGC {
		stripes, flights = min(stripes, gcBatchStripes), gcBatchFlights
	}
	stripes = min(stripes, s.lay.segStripes)
	st := &stream{s: s, kind: kind, fill: newBatch(s, stripes), maxFlights: flights}
	for range flights {
		st.spare = append(st.spare, newBatch(s, stripes))
	}
	return st
}

func (st *stream) batchFull() bool    { return st.fill.full() }
func (st *stream) closedStripes() int { return st.fill.closedStripes() }
func (st *stream) empty() bool        { return st.fill.empty() }

// settled reports whether nothing is buffered or in flight.
func (st *stream) settled() bool { return st.fill.empty() && st.inflight == 0 }

// room makes sure the batch's current stripe can take an entry (with a
// data slot if data), opening a segment or a new stripe as needed. It
// returns errNoSegment when the stream needs a segment and none is free.
func (w *writer) room(st *stream, data bool) error {
	b := st.fill
	if sb := b.current(); sb != nil {
		sh := b.geom.shape
		if len(sb.entries) < sh.entryCap && (!data || sb.slots < sh.slots) {
			return nil
		}
		w.closeStripe(st, sb)
		if len(b.stripes) == b.limit {
			return errBatchFull // a packed slot kept the stripe open (compress.go)
		}
	}
	if b.seg == nil {
		if st.seg == nil {
			if err := w.open(st); err != nil {
				return err
			}
		}
		b.seg, b.geom, b.first = st.seg, st.geom, st.next
		b.limit = min(b.room, w.s.lay.segStripes-st.next)
	}
	if len(b.stripes) == b.limit {
		return fmt.Errorf("store: internal error: %v stream batch is full", st.kind)
	}
	var next *stripeBuild
	if n := len(b.spare); n > 0 {
		next, b.spare = b.spare[n-1], b.spare[:n-1]
	} else {
		next = &stripeBuild{}
	}
	b.stripes = append(b.stripes, next)
	if st.next++; st.next == w.s.lay.segStripes {
		st.seg, st.geom = nil, nil // full: sealed once its last batch is written
	}
	return nil
}

// closeStripe ends sb: it records which buffer records it completes.
func (w *writer) closeStripe(st *stream, sb *stripeBuild) {
	if b := st.fill; len(b.stripes) > 0 && b.stripes[len(b.stripes)-1] == sb {
		w.closePacked(b, len(b.stripes)-1)
	}
	sb.closed = true
	if st.kind == streamHost {
		sb.bufferSeq = uint64(w.lastComplete)
	}
}

// addData puts one block into the current stripe; room must have been
// called.
func (w *writer) addData(st *stream, e summaryEntry, seq cache.Seq, data []byte) {
	b := st.fill
	sb := b.current()
	copy(b.slot(len(b.stripes)-1, sb.slots, w.s.lay.chunkSize), data)
	sb.slots++
	sb.entries = append(sb.entries, e)
	sb.seqs = append(sb.seqs, seq)
	sh := b.geom.shape
	if sb.slots == sh.slots || len(sb.entries) == sh.entryCap {
		w.closeStripe(st, sb)
	}
}

// addUnmap puts an unmap entry into the current stripe; room must have been
// called.
func (w *writer) addUnmap(st *stream, e summaryEntry, seq cache.Seq) {
	sb := st.fill.current()
	sb.entries = append(sb.entries, e)
	sb.seqs = append(sb.seqs, seq)
	if len(sb.entries) == st.fill.geom.shape.entryCap {
		w.closeStripe(st, sb)
	}
}

// open opens a segment for the stream. The host stream leaves the last
// GCReserveSegments free segments to the cleaner.
func (w *writer) open(st *stream) error {
	reserve := 0
	if st.kind == streamHost {
		reserve = w.s.opts.GCReserveSegments
	}
	if len(w.free) <= reserve && st.kind == streamGC {
		// The cleaner has nowhere else to go: wait for the segments
		// being freed (freeing.go).
		if _, err := w.awaitFreeing(); err != nil {
			return err
		}
	}
	if len(w.free) <= reserve {
		return errNoSegment
	}
	id := w.free[0]
	sh, columns, err := w.s.newGeometry(id)
	if err != nil {
		return err
	}
	g := w.s.segs[id]
	g.gen++
	g.allocSeq, g.sealSeq, g.lastSeq, g.stream, g.broken, g.cleaning = w.nextSeq, 0, 0, st.kind, false, false
	geom := &segGeom{gen: g.gen, shape: sh, columns: columns}
	g.geom.Store(geom)
	g.written.Store(0)
	g.fragments.Store(0)
	g.state.Store(uint32(meta.SegmentOpen))
	ticket, err := w.rows.add(g.info())
	if err != nil {
		return fmt.Errorf("store: while opening %v: %w", id, err)
	}
	g.openTicket = ticket
	w.free = w.free[1:]
	w.s.counters.freeSegments.Store(int64(len(w.free)))
	st.seg, st.geom, st.next = g, geom, 0
	return nil
}

// seal closes segment g: no more stripes go to it. Every stripe given to a
// batch must have been written. Its row is not waited for (segRows).
func (w *writer) seal(g *segment) error {
	g.sealSeq = g.lastSeq
	if g.lastSeq == 0 {
		g.sealSeq = g.allocSeq - 1
	}
	g.state.Store(uint32(meta.SegmentSealed))
	if _, err := w.rows.add(g.info()); err != nil {
		return fmt.Errorf("store: while sealing %v: %w", g.id, err)
	}
	return nil
}

// closeOut writes out everything the stream holds and seals its segment
// early, so that no more stripes go to it.
func (w *writer) closeOut(st *stream) error {
	if err := w.flushStream(st, true /* pad */); err != nil {
		return err
	}
	if err := w.completeAll(); err != nil {
		return err
	}
	if g := st.seg; g != nil {
		st.seg, st.geom = nil, nil
		return w.seal(g)
	}
	return nil
}

// retireDegraded writes out and seals the open segments that use a drive
// that is no longer healthy, so new stripes go to narrower segments on the
// survivors.
func (w *writer) retireDegraded() error {
	for _, st := range []*stream{w.host, w.gc} {
		if st.seg == nil {
			continue
		}
		degraded := false
		for _, d := range st.geom.columns {
			degraded = degraded || !w.s.drives[d].healthy()
		}
		if degraded {
			if err := w.closeOut(st); err != nil {
				return err
			}
		}
	}
	return nil
}
