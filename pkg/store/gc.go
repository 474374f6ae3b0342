package store

import (
	"errors"
	"fmt"

	"basalt/pkg/backend"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// clean runs the cleaner while free segments are short (below
// GCLowSegments, until GCHighSegments): it frees empty segments a
// checkpoint covers, takes a checkpoint when empty segments wait for one,
// and otherwise relocates the live blocks of one victim.
func (w *writer) clean() (bool, error) {
	o := &w.s.opts
	free := w.freeSoon()
	if free < o.GCLowSegments {
		w.gcActive = true
	}
	if free >= o.GCHighSegments {
		w.gcActive = false
	}
	if !w.gcActive {
		return false, nil
	}
	return w.cleanNow(free <= o.GCReserveSegments /* pad */)
}

// cleanNow runs one round of the cleaner whatever the free count: free,
// checkpoint or relocate one victim (padding the cleaner's last stripe with
// pad). It reports whether it did anything.
func (w *writer) cleanNow(pad bool) (bool, error) {
	if n, err := w.freeEligible(); err != nil || n > 0 {
		return n > 0, err
	}
	if w.sinceCkpt > 0 && w.awaitingCheckpoint() {
		return true, w.checkpoint()
	}
	victim := w.gcNext
	if w.gcNext = nil; victim == nil || !w.candidate(victim) {
		victim = w.pickVictim(nil)
	}
	if victim == nil {
		if w.gc.settled() {
			return false, nil
		}
		// Every candidate waits for the cleaner's stripes to be written
		// and applied (the partial one padded).
		if err := w.flushStream(w.gc, true /* pad */); err != nil {
			return true, err
		}
		return true, w.completeAll()
	}
	err := w.relocate(victim, pad)
	w.s.counters.gcRuns.Add(1)
	return true, err
}

// awaitingCheckpoint reports whether an empty sealed segment waits for a
// checkpoint to cover its stripes before it can be freed.
func (w *writer) awaitingCheckpoint() bool {
	for _, g := range w.s.segs {
		if g.getState() == meta.SegmentSealed && !g.broken && g.live.Load() == 0 && g.sealSeq > w.ckptSeq {
			return true
		}
	}
	return false
}

// candidate reports whether cleaning g would free anything: a sealed
// segment, not broken, not cleaned already, with some but not all of its
// blocks live.
func (w *writer) candidate(g *segment) bool {
	if g.getState() != meta.SegmentSealed || g.broken || g.cleaning {
		return false
	}
	live := g.live.Load()
	return live > 0 && live < g.capacity()
}

// capacity returns the blocks the segment's written stripes hold.
func (g *segment) capacity() int64 {
	return int64(g.written.Load())*int64(g.geom.Load().shape.slots) + g.fragments.Load()
}

// pickVictim chooses the segment to clean by the configured policy, other
// than except; nil if none would free anything.
func (w *writer) pickVictim(except *segment) *segment {
	var best *segment
	bestScore := 0.0
	for _, g := range w.s.segs {
		if g == except || !w.candidate(g) {
			continue
		}
		u := float64(g.live.Load()) / float64(g.capacity())
		score := 1 - u
		if w.s.opts.GCPolicy == GCCostBenefit {
			age := float64(w.nextSeq-g.sealSeq) + 1
			score = (1 - u) * age / (1 + u)
		}
		if best == nil || score > bestScore {
			best, bestScore = g, score
		}
	}
	return best
}

// freeEligible frees every sealed segment that holds no live block, whose
// stripes are all covered by the checkpoint in force (so recovery never
// needs their summaries) and that nobody has pinned. Their free rows join
// the segment rows on their way to the metadata, and the segments reach the
// free list once those rows are durable and their ranges discarded
// (freeing.go). It returns how many it freed.
func (w *writer) freeEligible() (int, error) {
	s := w.s
	var ids []meta.SegmentID
	s.segMu.Lock()
	for _, g := range s.segs {
		if g.getState() != meta.SegmentSealed || g.broken || g.live.Load() != 0 ||
			g.sealSeq > w.ckptSeq || g.pins.Load() != 0 {
			continue
		}
		g.geom.Store(nil)
		g.state.Store(uint32(meta.SegmentFree))
		g.written.Store(0)
		ids = append(ids, g.id)
	}
	s.segMu.Unlock()
	if len(ids) == 0 {
		return 0, nil
	}
	var ticket uint64
	for _, id := range ids {
		t, err := w.rows.add(s.segs[id].info())
		if err != nil {
			return 0, fmt.Errorf("store: while freeing segments: %w", err)
		}
		ticket = t
	}
	w.freeing = append(w.freeing, &freeing{ids: ids, ticket: ticket})
	return len(ids), w.advanceFreeing(s.opts.synchronous)
}

// relocate moves every live block of g to the cleaner's stream, stripe by
// stripe, and writes the stream's full stripes (its partial one too, with
// pad). A block that cannot be read back intact stays where it is and marks
// g broken; the error then wraps backend.ErrMedia.
func (w *writer) relocate(g *segment, pad bool) error {
	geom := g.geom.Load()
	if geom == nil {
		return nil
	}
	var sum summary
	var lost error
	written := int(g.written.Load())
	for j := range written {
		if g.live.Load() == 0 {
			break
		}
		w.load(g, geom, j, written)
		if err := w.summaryOf(g, geom, j, &sum); err != nil {
			g.broken, lost = true, err
			continue
		}
		if err := w.relocateStripe(g, geom, j, &sum); err != nil {
			return err
		}
	}
	g.cleaning = true
	if err := w.flushStream(w.gc, pad); err != nil {
		return err
	}
	if g.broken && lost == nil {
		lost = fmt.Errorf("%w: blocks of %v could not be relocated", backend.ErrMedia, g.id)
	}
	if lost != nil {
		w.s.log.Error("segment has unreadable blocks; left in place", "segment", g.id, "err", lost)
	}
	return lost
}

// liveBlock is a block the cleaner moves.
type liveBlock struct {
	q int
	e summaryEntry
}

// relocateStripe relocates the live blocks of stripe j of g.
func (w *writer) relocateStripe(g *segment, geom *segGeom, j int, sum *summary) error {
	sh := geom.shape
	var lives []liveBlock
	var slots slotCursor
	for _, e := range sum.entries {
		if !e.kind.hasData() {
			continue
		}
		q, _ := slots.next(e)
		pbn := w.s.lay.pbn(g.id, sh, j, q)
		if v := w.s.volumeByID(e.vol); v != nil && v.familyMaps(e.lba, slotEntry(pbn, e)) {
			lives = append(lives, liveBlock{q: q, e: e})
		}
	}
	if len(lives) == 0 {
		return nil
	}
	chunks := w.readDataChunks(g.id, geom, j, lives)
	block := disk.AlignedBuffer(BlockSize)
	for _, lb := range lives {
		chunk, b := sh.locate(lb.q)
		pbn := w.s.lay.pbn(g.id, sh, j, lb.q)
		if data := chunks[chunk]; data != nil && blockSum(data[b*BlockSize:(b+1)*BlockSize]) == lb.e.sum {
			copy(block, data[b*BlockSize:])
		} else {
			at, _ := w.s.locate(makeEntry(pbn, lb.e.sum))
			if err := w.s.reconstructBlock(at, lb.e.sum, block); err != nil {
				g.broken = true
				continue
			}
		}
		e := lb.e
		if e.frag != 0 {
			var err error
			if e.sum, err = w.unpackInPlace(block, e); err != nil {
				g.broken = true
				continue
			}
		}
		if err := w.addRelocation(e, uint32(slotEntry(pbn, lb.e)), block); err != nil {
			return err
		}
	}
	return nil
}

// readDataChunks reads the data chunks of stripe j that hold a live block;
// a chunk that cannot be read is nil.
func (w *writer) readDataChunks(seg meta.SegmentID, geom *segGeom, j int, lives []liveBlock) [][]byte {
	sh := geom.shape
	chunks := make([][]byte, sh.data)
	for _, lb := range lives {
		c, _ := sh.locate(lb.q)
		if chunks[c] != nil {
			continue
		}
		if loaded := w.gcRead.chunk(sh.column(j, c), j, w.s.lay.chunkSize); loaded != nil {
			chunks[c] = loaded
			continue
		}
		if len(w.chunkBufs) <= c {
			for len(w.chunkBufs) <= c {
				w.chunkBufs = append(w.chunkBufs, disk.AlignedBuffer(w.s.lay.chunkSize))
			}
		}
		buf := w.chunkBufs[c]
		if err := w.s.readDrive(geom.columns[sh.column(j, c)], buf, w.s.lay.chunkOffset(seg, j)); err != nil {
			continue
		}
		chunks[c] = buf
	}
	return chunks
}

// addRelocation appends a relocation of block (now at from, a map entry's
// PBN+1 field, e.sum its CRC32C) to the cleaner's stream, writing the
// stream's batch first if it is full.
func (w *writer) addRelocation(e summaryEntry, from uint32, block []byte) error {
	st := w.gc
	if st.batchFull() {
		if err := w.flushStream(st, false); err != nil {
			return err
		}
	}
	err := w.room(st, true)
	if errors.Is(err, errBatchFull) {
		if err = w.flushStream(st, false); err == nil {
			err = w.room(st, true)
		}
	}
	if err != nil {
		return err
	}
	re := summaryEntry{kind: kindRelocate, vol: e.vol, lba: e.lba, sum: e.sum, from: from}
	if v := w.s.volumeByID(e.vol); v != nil {
		w.addBlock(st, v, re, 0, block)
	} else {
		w.addData(st, re, 0, block)
	}
	return nil
}

// evacuate relocates every live block of segment id and writes the
// cleaner's stream out, so the segment empties (re-striping onto the
// survivors after a drive loss).
func (w *writer) evacuate(id meta.SegmentID) error {
	g := w.s.segs[id]
	for _, st := range []*stream{w.host, w.gc} {
		if st.seg == g || st.fill.seg == g {
			if err := w.closeOut(st); err != nil {
				return err
			}
		}
	}
	if err := w.completeAll(); err != nil {
		return err
	}
	if g.getState() != meta.SegmentSealed || g.live.Load() == 0 {
		return nil
	}
	if err := w.relocate(g, true /* pad */); err != nil {
		return err
	}
	return w.completeAll() // the segment is empty when the command returns
}
