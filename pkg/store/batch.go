package store

import (
	"errors"
	"fmt"
	"sync"

	"basalt/cache"
	"basalt/pkg/meta"
)

// flight is a batch whose stripes are being written.
type flight struct {
	st   *stream
	b    *batch
	n    int       // stripes written
	sums []summary // their summaries
	done chan struct{}
	lost int // columns whose write or sync failed; valid after done
}

// flushStream encodes the closed stripes of the stream's batch (and with pad
// its partial one too) and writes them in the background, while the writer
// fills the next batch. A partial stripe left behind moves to the next
// batch. Stripes are applied in sequence order: sequences are assigned
// here, and batches of both streams complete in the order they were
// flushed (writer.flights); a stream with its limit of batches in flight
// first completes batches, oldest first, until its own oldest is done.
func (w *writer) flushStream(st *stream, pad bool) error {
	for st.inflight >= st.maxFlights {
		if err := w.complete(); err != nil {
			return err
		}
	}
	b := st.fill
	if sb := b.current(); sb != nil && pad {
		if len(sb.entries) == 0 {
			w.dropEmptyStripe(st, b)
		} else {
			w.closeStripe(st, sb)
		}
	}
	n := b.closedStripes()
	if n == 0 {
		return nil
	}
	// No stripe goes to a segment before its open row is durable: a
	// segment whose open a crash lost is free again with its old
	// generation, so its next open reuses the lost one's generation and
	// (the lost stripes never replayed) its sequences; stripes written
	// under the lost open would then pass for the new one's (segrows.go).
	if err := w.rows.wait(b.seg.openTicket); err != nil {
		return err
	}
	fl := &flight{st: st, b: b, n: n, sums: make([]summary, n), done: make(chan struct{})}
	if err := w.encodeStripes(b, fl.sums); err != nil {
		return err
	}
	st.fill, st.spare = st.spare[len(st.spare)-1], st.spare[:len(st.spare)-1]
	w.carry(b, st.fill, n)
	st.inflight++
	w.flights = append(w.flights, fl)
	if w.s.opts.synchronous {
		w.writeFlight(fl)
	} else {
		go w.writeFlight(fl)
	}
	return nil
}

// dropEmptyStripe removes an empty current stripe from b, giving its stripe
// index back to the stream.
func (w *writer) dropEmptyStripe(st *stream, b *batch) {
	sb := b.stripes[len(b.stripes)-1]
	b.stripes = b.stripes[:len(b.stripes)-1]
	b.spare = append(b.spare, sb)
	if st.seg == nil {
		st.seg, st.geom = b.seg, b.geom // it was the segment's last stripe
	}
	st.next--
	if len(b.stripes) == 0 {
		b.seg, b.geom = nil, nil
	}
}

// carry moves the partial stripe after the first n of from (if any) to the
// front of the empty batch to, which continues the same segment.
func (w *writer) carry(from, to *batch, n int) {
	to.stripes, to.seg, to.geom = to.stripes[:0], nil, nil
	if len(from.stripes) == n {
		return
	}
	// Only the data slots taken so far hold anything: summary, parity and
	// the free slots are written when the stripe is encoded. Slots fill the
	// data chunks in order.
	size, sb, sh := w.s.lay.chunkSize, from.stripes[n], from.geom.shape
	for c := 0; c < sh.data && c*sh.payload < sb.slots; c++ {
		col := sh.column(from.first+n, c)
		lo := sh.summaryBlocks * BlockSize
		hi := lo + min(sb.slots-c*sh.payload, sh.payload)*BlockSize
		copy(to.cols[col][lo:hi], from.cols[col][n*size+lo:n*size+hi])
	}
	to.stripes = append(to.stripes, sb)
	from.stripes = from.stripes[:n]
	to.seg, to.geom, to.first = from.seg, from.geom, from.first+n
	to.limit = min(to.room, w.s.lay.segStripes-to.first)
}

// writeFlight writes the flight's stripes, one I/O per drive in parallel,
// then syncs the drives, and counts the columns that failed.
func (w *writer) writeFlight(fl *flight) {
	defer close(fl.done)
	b := fl.b
	columns := b.geom.columns
	off := w.s.lay.chunkOffset(b.seg.id, b.first)
	failed := make([]bool, len(columns))
	w.s.parallel(len(columns), func(c int) {
		failed[c] = w.s.writeDrive(columns[c], b.cols[c][:fl.n*w.s.lay.chunkSize], off, false) != nil
	})
	w.s.parallel(len(columns), func(c int) {
		if !failed[c] {
			failed[c] = w.s.syncDrive(columns[c], false) != nil
		}
	})
	for _, f := range failed {
		if f {
			fl.lost++
		}
	}
}

// completeAll completes the batches in flight, oldest first.
func (w *writer) completeAll() error {
	for len(w.flights) > 0 {
		if err := w.complete(); err != nil {
			return err
		}
	}
	return nil
}

// oldest returns the batch in flight longest, of either stream, or nil.
func (w *writer) oldest() *flight {
	if len(w.flights) == 0 {
		return nil
	}
	return w.flights[0]
}

// flightDone returns the channel closed when the oldest batch in flight is
// written, or nil if none is.
func (w *writer) flightDone() <-chan struct{} {
	if fl := w.oldest(); fl != nil {
		return fl.done
	}
	return nil
}

// complete waits for the oldest batch in flight, of either stream, and
// applies it: the stripes are accepted if no stripe lost more chunks than
// it has parity (a failed drive was marked so, and the stripes are read
// degraded).
func (w *writer) complete() error {
	fl := w.oldest()
	if fl == nil {
		return nil
	}
	<-fl.done
	st := fl.st
	w.flights = append(w.flights[:0], w.flights[1:]...)
	st.inflight--
	b := fl.b
	if fl.lost > b.geom.shape.parity {
		st.spare = append(st.spare, b)
		return fmt.Errorf("%w: %d of %d chunks of stripes %d..%d of %v could not be written",
			errUnrecoverable, fl.lost, len(b.geom.columns), b.first, b.first+fl.n-1, b.seg.id)
	}
	w.s.counters.stripes.Add(uint64(fl.n))
	w.durable = fl.sums[fl.n-1].seq
	for rel := range fl.n {
		w.applyBatched(st, b, rel, &fl.sums[rel])
	}
	if st.kind == streamGC && st.settled() {
		// Every relocation copied so far is applied: the victims are what
		// the maps say they are again.
		for _, g := range w.s.segs {
			g.cleaning = false
		}
	}
	return w.afterBatch(st, fl)
}

// afterBatch updates the segment once a flight is applied, releases the
// buffer records it completes, recycles its buffers and seals a segment
// whose last stripe it wrote.
func (w *writer) afterBatch(st *stream, fl *flight) error {
	b := fl.b
	g := b.seg
	g.written.Store(int32(b.first + fl.n))
	var bufferSeq uint64
	for _, sb := range b.stripes[:fl.n] {
		bufferSeq = max(bufferSeq, sb.bufferSeq)
		sb.reset()
	}
	b.spare = append(b.spare, b.stripes[:fl.n]...)
	b.stripes, b.seg, b.geom = b.stripes[:0], nil, nil
	st.spare = append(st.spare, b)
	if bufferSeq > uint64(w.released) {
		if err := w.release(cache.Seq(bufferSeq)); err != nil {
			return err
		}
	}
	if b.first+fl.n == w.s.lay.segStripes {
		return w.seal(g)
	}
	return nil
}

// encodeStripes assigns the batch's first len(sums) stripes their
// sequences, in order, and encodes them (encodeStripe). Encoding them on
// several goroutines was tried: with the host's goroutines on the same
// CPUs, the writer waited longer for the slowest share than it saved.
func (w *writer) encodeStripes(b *batch, sums []summary) error {
	for rel := range sums {
		sums[rel].seq = w.nextSeq
		w.nextSeq++
		if err := w.encodeStripe(b, rel, &sums[rel]); err != nil {
			return err
		}
	}
	b.seg.lastSeq = sums[len(sums)-1].seq
	return nil
}

// encodeStripe fills stripe rel's summary (its sequence already set),
// computes its parity and the parity checksums, and writes the summary into
// every chunk. An error is a bug (the codec refusing a stripe of its own
// geometry).
func (w *writer) encodeStripe(b *batch, rel int, sum *summary) error {
	sb := b.stripes[rel]
	sh := b.geom.shape
	size := w.s.lay.chunkSize
	*sum = summary{blocks: sh.summaryBlocks, seq: sum.seq, durable: w.durable, bufferSeq: sb.bufferSeq,
		segment: b.seg.id, gen: b.geom.gen, stripe: uint32(b.first + rel), data: sh.data,
		parity: sh.parity, stream: b.seg.stream, entries: sb.entries}
	// Batch buffers are reused without clearing (clearing whole columns
	// after every batch cost the writer 40% of its CPU): the data slots no
	// entry took are padding, zeroed here; summary and parity are written
	// whole below.
	w.closePacked(b, rel)
	for q := sb.slots; q < sh.slots; q++ {
		clear(b.slot(rel, q, size))
	}
	head := sh.summaryBlocks * BlockSize
	chunks := make([][]byte, sh.width())
	for c := range chunks {
		chunks[c] = b.chunk(rel, c, size)[head:]
	}
	if err := sh.full.Encode(chunks); err != nil {
		return fmt.Errorf("store: while encoding a %d+%d stripe: %w", sh.data, sh.parity, err)
	}
	sum.paritySums = make([]uint32, 0, sh.parity*sh.payload)
	for p := range sh.parity {
		for r := range sh.payload {
			sum.paritySums = append(sum.paritySums, blockSum(chunks[sh.data+p][r*BlockSize:(r+1)*BlockSize]))
		}
	}
	first := b.chunk(rel, 0, size)[:head]
	encodeSummary(first, sum)
	for c := 1; c < sh.width(); c++ {
		copy(b.chunk(rel, c, size)[:head], first)
	}
	return nil
}

// parallel runs fn(0..n-1) concurrently and waits (sequentially in the
// synchronous test mode).
func (s *Store) parallel(n int, fn func(i int)) {
	if s.opts.synchronous {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}

// errUnrecoverable wraps losses beyond parity.
var errUnrecoverable = errors.New("store: more chunks lost than the stripe has parity")

// applyBatched applies a written stripe of the batch and, for the host
// stream, forgets the overlay versions it made durable.
func (w *writer) applyBatched(st *stream, b *batch, rel int, sum *summary) {
	w.s.applyStripe(b.seg.id, b.geom.shape, sum, w.account)
	w.applied = sum.seq
	w.sinceCkpt++
	data := 0
	for _, e := range sum.entries {
		if e.kind.hasData() {
			data++
		}
	}
	c := &w.s.counters
	c.paddingBlocks.Add(uint64(b.geom.shape.slots - b.stripes[rel].slots))
	b.seg.fragments.Add(int64(data - b.stripes[rel].slots))
	if st.kind != streamHost {
		c.relocatedBlocks.Add(uint64(data))
		return
	}
	c.destagedBlocks.Add(uint64(data))
	w.appliedBuf = max(w.appliedBuf, sum.bufferSeq)
	w.forgetDestaged(sum.entries, b.stripes[rel].seqs)
}

// forgetDestaged tells the overlays that the versions in entries (made by
// records seqs) are in the maps now, one lock per run of entries of a
// volume.
func (w *writer) forgetDestaged(entries []summaryEntry, seqs []cache.Seq) {
	for start := 0; start < len(entries); {
		end := start + 1
		for end < len(entries) && entries[end].vol == entries[start].vol {
			end++
		}
		if v := w.s.volumeByID(entries[start].vol); v != nil {
			v.ov.destagedAll(entries[start:end], seqs[start:end])
		}
		start = end
	}
}

// applyStripe applies a stripe's summary to the maps, entry by entry, in
// order: a write maps its block, a relocation maps its block only if the map
// still points at the source, an unmap unmaps. Entries of unknown volumes or
// beyond a volume's end are skipped. account is told of every change. It is
// used by the writer and by recovery, which is what makes recovery replay
// exactly what the writer did. A relocation moves the block in every map of
// the volume's family that points at the source (snapshot.go).
func (s *Store) applyStripe(seg meta.SegmentID, sh *shape, sum *summary, account func(*volume, uint64, entry, entry)) {
	var slots slotCursor
	for _, e := range sum.entries {
		var pbn PBN
		if e.kind.hasData() {
			q, _ := slots.next(e)
			pbn = s.lay.pbn(seg, sh, int(sum.stripe), q)
		}
		v := s.volumeByID(e.vol)
		if v == nil || e.lba >= v.blocks() {
			continue
		}
		switch e.kind {
		case kindWrite:
			ne := slotEntry(pbn, e)
			account(v, e.lba, v.lmap.set(e.lba, ne), ne)
		case kindRelocate:
			ne := slotEntry(pbn, e)
			if from, ok := v.relocate(e.lba, e, ne); ok {
				account(nil, e.lba, from, ne)
			}
		case kindUnmap:
			v.lmap.unmapRange(e.lba, uint64(e.sum), func(lba uint64, old entry) { account(v, lba, old, 0) })
		}
	}
}
