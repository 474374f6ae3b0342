package store

import (
	"cmp"
	"fmt"
	"slices"

	"basalt/cache"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
)

// recover rebuilds the in-memory state (doc.go, "Recovery"): volumes, the
// checkpointed maps, the stripes written after the checkpoint, the segment
// table, then the write buffer's records on top; and prepares the writer.
func (s *Store) recover() error {
	if err := s.loadSegments(); err != nil {
		return err
	}
	head, _, err := s.meta.Checkpoint()
	if err != nil {
		return err
	}
	if err := s.loadVolumes(head.Gen); err != nil {
		return err
	}
	if err := s.meta.ReadCheckpoint(head, s.loadChunk); err != nil {
		return fmt.Errorf("store: while loading the map checkpoint: %w", err)
	}
	reshare(s.volumeList()) // snapshot.go
	if err := s.meta.DeleteStrayChunks(); err != nil {
		return fmt.Errorf("store: while deleting what a checkpoint cut short left: %w", err)
	}
	if s.counters.base, err = s.meta.GCStats(); err != nil {
		return err
	}
	found := s.scanSegments(head.Seq)
	last, bufferSeq, err := s.replay(found, head)
	if err != nil {
		return err
	}
	sealed, err := s.sealOpenSegments()
	if err != nil {
		return err
	}
	if err := s.recount(); err != nil {
		return err
	}
	first, bufferSeq, err := s.openStage(head, bufferSeq)
	if err != nil {
		return err
	}
	w := &writer{s: s, nextSeq: last + 1, durable: last, applied: last, appliedBuf: bufferSeq,
		ckptSeq: head.Seq, sinceCkpt: int(last - head.Seq), ckptDue: last > head.Seq || sealed,
		nextPack: first, lastComplete: first - 1, released: first - 1}
	for _, g := range s.segs {
		if g.getState() == meta.SegmentFree {
			w.free = append(w.free, g.id)
		}
	}
	s.counters.freeSegments.Store(int64(len(w.free)))
	s.w = w
	s.log.Info("store recovered", "checkpoint", head.Seq, "replayed_stripes", last-head.Seq,
		"buffered_records", s.stage.usage().live)
	return nil
}

func (s *Store) loadChunk(id meta.VolumeID, chunk uint32, data []byte) error {
	if v := s.volumeByID(id); v != nil {
		return v.lmap.loadChunk(chunk, data)
	}
	return nil // a deleted volume's
}

// loadVolumes loads the volume records. A snapshot or clone whose record is
// newer than the checkpoint in force (of generation ckptGen) was being
// created at the crash, its creation never acknowledged: it is marked
// deleted (snapshot.go).
func (s *Store) loadVolumes(ckptGen uint64) error {
	infos, err := s.meta.Volumes()
	if err != nil {
		return err
	}
	s.vols.Lock()
	defer s.vols.Unlock()
	s.vols.byName = make(map[string]*volume)
	s.vols.nextID = 1
	var unfinished []meta.VolumeInfo
	var vols []*volume
	for _, info := range infos {
		s.vols.nextID = max(s.vols.nextID, info.ID+1)
		switch {
		case info.Deleted:
		case info.CkptGen > ckptGen:
			info.Deleted = true
			unfinished = append(unfinished, info)
		default:
			v := s.newVolume(info)
			s.vols.byName[info.Name] = v
			vols = append(vols, v)
		}
	}
	buildFamilies(vols)
	s.publishVolumesLocked()
	if len(unfinished) == 0 {
		return nil
	}
	err = s.meta.Update(func(tx *meta.Tx) error {
		for _, info := range unfinished {
			if err := tx.PutVolume(info); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: while dropping unfinished snapshots and clones: %w", err)
	}
	return nil
}

// foundStripe is a stripe whose summary recovery found.
type foundStripe struct {
	seg  *segment
	geom *segGeom
	j    int
	sum  summary
}

// scanSegments reads the summaries of every segment that may hold stripes
// newer than the checkpoint: the open ones and those sealed after it. In
// each, it takes stripes from the first on while their summaries are intact,
// of the segment's current life, in increasing sequence, and (for a sealed
// segment) not past its seal. The result is in sequence order.
func (s *Store) scanSegments(ckptSeq uint64) []*foundStripe {
	var found []*foundStripe
	for _, g := range s.segs {
		state := g.getState()
		if state == meta.SegmentFree || (state == meta.SegmentSealed && g.sealSeq <= ckptSeq) {
			continue
		}
		geom := g.geom.Load()
		limit := s.lay.segStripes
		if state == meta.SegmentSealed {
			limit = int(g.written.Load())
		}
		prev := uint64(0)
		for j := range limit {
			f := &foundStripe{seg: g, geom: geom, j: j}
			if s.readSummary(g.id, geom, j, &f.sum) != nil {
				break
			}
			seq := f.sum.seq
			if seq < g.allocSeq || seq <= prev || (state == meta.SegmentSealed && seq > g.sealSeq) {
				break
			}
			prev = seq
			found = append(found, f)
		}
	}
	slices.SortFunc(found, func(a, b *foundStripe) int { return cmp.Compare(a.sum.seq, b.sum.seq) })
	return found
}

// replay applies, in sequence order, the found stripes that follow the
// checkpoint without a gap. A stripe that no later summary vouches was
// synced (its sequence is above every summary's durable mark) is read back
// whole first, and ends the replay if it is not intact: it was being
// written at the crash, and everything it holds is still in the write
// buffer or at its old place. A gap below a durable mark is corruption.
func (s *Store) replay(found []*foundStripe, head meta.CheckpointHead) (last, bufferSeq uint64, err error) {
	var durable uint64
	for _, f := range found {
		durable = max(durable, f.sum.durable)
	}
	last, bufferSeq = head.Seq, head.BufferSeq
	ignore := func(*volume, uint64, entry, entry) {}
	for _, f := range found {
		if f.sum.seq <= head.Seq {
			f.seg.noteReplayed(f.j, f.sum.seq)
			continue
		}
		if f.sum.seq != last+1 {
			break
		}
		if f.sum.seq > durable {
			if res := s.checkStripe(f.seg.id, f.geom, f.j, &f.sum, true /* repair */); res.unrecoverable > 0 {
				s.log.Warn("stripe torn at the crash; ignored", "segment", f.seg.id, "stripe", f.j, "seq", f.sum.seq)
				break
			}
		}
		s.applyStripe(f.seg.id, f.geom.shape, &f.sum, ignore)
		last, bufferSeq = f.sum.seq, max(bufferSeq, f.sum.bufferSeq)
		f.seg.noteReplayed(f.j, last)
	}
	if last < durable {
		return 0, 0, fmt.Errorf("%w: stripe %d is missing, but a later summary says stripes up to %d were synced",
			ErrCorrupt, last+1, durable)
	}
	return last, bufferSeq, nil
}

// noteReplayed records that stripe j, of sequence seq, is part of the
// recovered state: an open segment's written stripes and last sequence
// follow it.
func (g *segment) noteReplayed(j int, seq uint64) {
	if g.getState() == meta.SegmentOpen {
		g.written.Store(int32(j + 1))
		g.lastSeq = seq
	}
}

// sealOpenSegments seals the segments that were open at the crash (or the
// clean shutdown) at their last replayed stripe: whatever lies beyond is
// never read. New stripes go to newly opened segments.
func (s *Store) sealOpenSegments() (bool, error) {
	var rows []meta.SegmentInfo
	for _, g := range s.segs {
		if g.getState() != meta.SegmentOpen {
			continue
		}
		g.sealSeq = g.lastSeq
		if g.lastSeq == 0 {
			g.sealSeq = g.allocSeq - 1
			g.written.Store(0)
		}
		g.state.Store(uint32(meta.SegmentSealed))
		rows = append(rows, g.info())
	}
	if len(rows) == 0 {
		return false, nil
	}
	err := s.meta.Update(func(tx *meta.Tx) error {
		for _, r := range rows {
			if err := tx.PutSegment(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: while sealing segments at recovery: %w", err)
	}
	return true, nil
}

// recount computes every segment's live count and every volume's mapped
// count from the maps, checking that each entry points into a segment in
// use. A block a family shares counts once.
func (s *Store) recount() error {
	var bad error
	var total int64
	frags := s.newFragmentCount()
	for _, v := range s.volumeList() {
		v.lmap.forEach(func(lba uint64, e entry) {
			at, ok := s.locate(e)
			if !ok || at.stripe >= int(s.segs[at.seg].written.Load()) {
				if bad == nil {
					bad = fmt.Errorf("%w: %v block %d maps to PBN %d, outside any written stripe",
						ErrCorrupt, v.info.ID, lba, e.pbn())
				}
				return
			}
			v.mapped.Add(1)
			if !v.sharedBefore(lba, e) {
				s.segs[at.seg].live.Add(1)
				frags.add(s.segs[at.seg], e)
				total++
			}
		})
	}
	s.counters.mappedBlocks.Store(total)
	return bad
}

// openBuffer opens the write buffer, releases the records the replayed
// stripes made durable, and enters the rest into the overlays. It returns
// the first record left and the buffer sequence destaged up to, which is 0
// when the buffer is not the one the checkpoint counts in (newBuffer).
func (s *Store) openBuffer(head meta.CheckpointHead, destaged uint64) (cache.Seq, uint64, error) {
	buf, err := cache.Open(s.region, cache.Options{})
	if err != nil {
		return 0, 0, fmt.Errorf("store: while opening the write buffer: %w", err)
	}
	s.buf, s.stage = buf, bufferStager{buf: buf, region: s.region}
	st := buf.Stats()
	s.counters.maxPayload = st.MaxPayload
	if minRecord := writeRecordSize(1); st.MaxPayload < minRecord {
		return 0, 0, fmt.Errorf("%w: the write buffer's records hold %d bytes, a block needs %d",
			ErrInvalidOptions, st.MaxPayload, minRecord)
	}
	if s.newBuffer(head, st.UUID) {
		destaged = 0
	}
	if upTo := min(cache.Seq(destaged), st.Last); upTo >= st.First {
		if err := buf.Release(upTo); err != nil {
			return 0, 0, fmt.Errorf("store: while releasing destaged records: %w", err)
		}
	}
	first := buf.Stats().First
	s.pub.reset(first)
	err = buf.Replay(func(seq cache.Seq, kind cache.Kind, payload []byte) error {
		r, err := decodeRecord(kind, payload)
		if err != nil {
			return fmt.Errorf("%w: write-buffer record %v: %w", ErrCorrupt, seq, err)
		}
		if v := s.volumeByID(r.vol); v != nil && r.lba+uint64(r.count) <= v.blocks() {
			if kind == recordWrite {
				v.ov.addWrite(seq, r.lba, r.count)
			} else {
				v.ov.addTrim(seq, r.lba, uint64(r.count))
			}
		}
		s.pub.publish(seq)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("store: while replaying the write buffer: %w", err)
	}
	return first, destaged, nil
}

// newBuffer reports whether the write buffer is another one than the
// checkpoint's: then the sequence numbers the checkpoint and the stripes
// after it destaged up to count in the old buffer, and none of the new
// buffer's records may be taken for destaged. What the old buffer held and
// had not destaged is gone; the log says so. A checkpoint that names no
// buffer (written before buffers were named) is trusted.
func (s *Store) newBuffer(head meta.CheckpointHead, uuid [16]byte) bool {
	if head.BufferUUID == ([16]byte{}) || head.BufferUUID == uuid {
		return false
	}
	if s.region.Mode() == pmem.ModeMemory { // by design: the caller replays from its own log
		s.log.Info("the write buffer is in memory and starts empty", "checkpoint", head.Seq)
		return true
	}
	s.log.Warn("the write buffer is not the one the store last used: writes it held that were not yet destaged are lost",
		"buffer", disk.UUID(uuid), "checkpoint_buffer", disk.UUID(head.BufferUUID), "checkpoint", head.Seq)
	return true
}
