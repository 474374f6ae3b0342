package store

import (
	"context"
	"errors"
	"fmt"

	"basalt/cache"
	"basalt/pkg/backend"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// errRetry: the map or the overlay changed under a read; look again.
var errRetry = errors.New("store: retry")

// maxReadRun bounds the blocks read from one chunk in one drive I/O.
const maxReadRun = 32

// readScratch is a reader's per-call state.
type readScratch struct {
	seq    cache.Seq // record held in payload, 0 if none
	rec    record
	buffer []byte
}

// ReadAt reads len(p) bytes at off: from the write buffer for blocks still
// there, from the drives for the others (verifying each block's checksum
// and reconstructing from parity when a drive fails or returns bad data),
// zeros for unmapped blocks. It fails with backend.ErrMedia only when a
// block cannot be read back intact; it never returns wrong data.
func (h *Volume) ReadAt(ctx context.Context, p []byte, off int64) error {
	lba, n, err := h.check(off, int64(len(p)))
	if err != nil {
		return err
	}
	var rs readScratch
	for i, retries := 0, 0; i < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		read, err := h.s.readFrom(h.v, &rs, lba+uint64(i), p[i*BlockSize:], n-i)
		if errors.Is(err, errRetry) && retries < 100 {
			retries++
			continue
		}
		if err != nil {
			return err
		}
		i += read
	}
	return nil
}

// readFrom reads at least one block at lba into p (up to max blocks, when
// they lie together on a drive) and returns how many it read.
func (s *Store) readFrom(v *volume, rs *readScratch, lba uint64, p []byte, max int) (int, error) {
	if ref, ok := v.ov.lookup(lba); ok {
		if ref.index == zeroIndex {
			clear(p[:BlockSize])
			return 1, nil
		}
		return 1, s.stage.readBlock(rs, ref, p[:BlockSize])
	}
	e := v.lmap.get(lba)
	if !e.mapped() {
		clear(p[:BlockSize])
		return 1, nil
	}
	return s.readMapped(v, lba, e, p, max)
}

// blockAt locates the block an entry points at.
type blockAt struct {
	seg    meta.SegmentID
	geom   *segGeom
	stripe int
	q      int // data slot
	chunk  int // data chunk index
	block  int // block offset in the chunk
	drive  int
	offset int64 // drive offset of the block
}

// locate resolves e; ok is false if the segment has been freed or reopened
// with a shape the PBN does not fit (the map has moved on).
func (s *Store) locate(e entry) (blockAt, bool) {
	seg := s.lay.segmentOf(e.pbn())
	if int(seg) >= len(s.segs) {
		return blockAt{}, false
	}
	geom := s.segs[seg].geom.Load()
	if geom == nil {
		return blockAt{}, false
	}
	sh := geom.shape
	_, stripe, q, ok := s.lay.split(e.pbn(), sh)
	if !ok {
		return blockAt{}, false
	}
	chunk, block := sh.locate(q)
	return blockAt{seg: seg, geom: geom, stripe: stripe, q: q, chunk: chunk, block: block,
		drive:  geom.columns[sh.column(stripe, chunk)],
		offset: s.lay.chunkOffset(seg, stripe) + int64(block)*BlockSize}, true
}

// readMapped reads lba, and the following blocks up to max that lie next to
// it in the same chunk and have no newer version in the buffer, in one
// drive read; a block that fails its checksum takes the slow path.
func (s *Store) readMapped(v *volume, lba uint64, e entry, p []byte, max int) (int, error) {
	if e.packed() {
		return s.readPacked(v, lba, e, p, max)
	}
	at, ok := s.locate(e)
	if !ok {
		return 0, errRetry
	}
	run := 1
	limit := min(max, maxReadRun, at.geom.shape.chunkBlocks-at.block)
	for run < limit {
		next := v.lmap.get(lba + uint64(run))
		if !next.mapped() || next.packed() || next.pbn() != e.pbn()+PBN(run) {
			break
		}
		if _, pending := v.ov.lookup(lba + uint64(run)); pending {
			break
		}
		run++
	}
	bp := s.chunkBuffer()
	defer s.putChunkBuffer(bp)
	buf := (*bp)[:run*BlockSize]
	if err := s.readDrive(at.drive, buf, at.offset); err != nil {
		run = 1 // the slow path handles the first block; the others are read again
		return run, s.readBlock(v, lba, e, p[:BlockSize])
	}
	for i := range run {
		block := buf[i*BlockSize : (i+1)*BlockSize]
		ei := v.lmap.get(lba + uint64(i))
		if i > 0 && (ei.packed() || ei.pbn() != e.pbn()+PBN(i)) {
			return i, nil // moved meanwhile: the caller reads it again
		}
		if blockSum(block) == ei.sum() {
			v.opened(lba+uint64(i), p[i*BlockSize:], block)
			continue
		}
		if err := s.readBlock(v, lba+uint64(i), ei, p[i*BlockSize:(i+1)*BlockSize]); err != nil {
			return i, err
		}
	}
	return run, nil
}

// readBlock reads one block the slow way: from its drive, and if that
// fails or returns a block that fails its checksum, by reconstruction from
// the rest of its stripe row, then repairs the copy on the drive.
func (s *Store) readBlock(v *volume, lba uint64, e entry, dst []byte) error {
	at, ok := s.locate(e)
	if !ok {
		return errRetry
	}
	bp := s.chunkBuffer()
	defer s.putChunkBuffer(bp)
	block := (*bp)[:BlockSize]
	readErr := s.readDrive(at.drive, block, at.offset)
	if readErr == nil && blockSum(block) == e.sum() {
		v.opened(lba, dst, block)
		return nil
	}
	if v.lmap.get(lba) != e {
		return errRetry // the block moved: what we read may be another's
	}
	s.counters.degradedReads.Add(1)
	if err := s.reconstructBlock(at, e.sum(), block); err != nil {
		if v.lmap.get(lba) != e {
			return errRetry
		}
		s.counters.unrecoverable.Add(1)
		return fmt.Errorf("%w: block %d of %v (%v stripe %d): %w", backend.ErrMedia, lba, v.info.ID,
			at.seg, at.stripe, err)
	}
	v.opened(lba, dst, block)
	if !errors.Is(readErr, errDriveUnavailable) {
		s.repair(at, block)
	}
	return nil
}

// repair writes a reconstructed block back in place, if its segment is
// still in the same life.
func (s *Store) repair(at blockAt, block []byte) {
	if !s.pin(at.seg, at.geom.gen) {
		return
	}
	defer s.unpin(at.seg)
	if err := s.writeDrive(at.drive, block, at.offset, false); err == nil {
		s.counters.repairs.Add(1)
		s.log.Warn("repaired a block from parity", "drive", at.drive, "segment", at.seg, "stripe", at.stripe)
	}
}

// rowScratch holds one stripe row for reconstruction.
type rowScratch struct {
	blocks [][]byte // one aligned block per chunk, capacity BlockSize
	sums   []uint32
	sum    summary
}

func (s *Store) getRow(width int) *rowScratch {
	rs, _ := s.rowBufs.Get().(*rowScratch)
	if rs == nil || len(rs.blocks) < width {
		rs = &rowScratch{}
		all := disk.AlignedBuffer(s.lay.drives * BlockSize)
		for i := range s.lay.drives {
			rs.blocks = append(rs.blocks, all[i*BlockSize:(i+1)*BlockSize:(i+1)*BlockSize])
		}
		rs.sums = make([]uint32, s.lay.drives)
	}
	return rs
}

// reconstructBlock rebuilds the block at from the other chunks of its
// stripe row into dst, checking it against want.
func (s *Store) reconstructBlock(at blockAt, want uint32, dst []byte) error {
	sh := at.geom.shape
	rs := s.getRow(sh.width())
	defer s.rowBufs.Put(rs)
	if err := s.readSummary(at.seg, at.geom, at.stripe, &rs.sum); err != nil {
		return err
	}
	stripe := rs.blocks[:sh.width()]
	row := at.block - sh.summaryBlocks
	s.readRow(at.seg, at.geom, at.stripe, row, &rs.sum, stripe, rs.sums, at.chunk)
	rs.sums[at.chunk] = want
	if err := reconstructRow(sh, stripe, rs.sums[:sh.width()]); err != nil {
		return err
	}
	copy(dst, stripe[at.chunk])
	return nil
}

// reconstructRow rebuilds the data chunks of a row that are missing or fail
// their sums. Parity blocks are checked against their sums from the
// summary too, so a bad one counts as missing rather than corrupting the
// result; and every rebuilt chunk is checked against its sum.
func reconstructRow(sh *shape, stripe [][]byte, sums []uint32) error {
	return sh.row.ReconstructData(stripe, sums)
}

// readRow reads row r of every chunk of stripe j but skip (which is marked
// missing), sets sums from the summary, and marks missing the chunks whose
// drive is unavailable or whose read fails.
func (s *Store) readRow(seg meta.SegmentID, geom *segGeom, j, r int, sum *summary, stripe [][]byte,
	sums []uint32, skip int) {
	sh := geom.shape
	off := s.lay.chunkOffset(seg, j) + int64(sh.summaryBlocks+r)*BlockSize
	slotSums := dataSums(sum)
	for c := range sh.width() {
		stripe[c] = stripe[c][:BlockSize]
		switch {
		case c < sh.data:
			q := c*sh.payload + r
			sums[c] = zeroBlockSum
			if q < len(slotSums) {
				sums[c] = slotSums[q]
			}
		default:
			sums[c] = sum.paritySums[(c-sh.data)*sh.payload+r]
		}
		if c == skip || s.readDrive(geom.columns[sh.column(j, c)], stripe[c], off) != nil {
			stripe[c] = stripe[c][:0]
		}
	}
}

// dataSums returns the checksum of every data slot that holds data, in slot
// order.
func dataSums(sum *summary) []uint32 {
	var out []uint32
	for _, e := range sum.entries {
		if e.kind.hasData() && e.frag <= 1 { // a packed slot's entries all carry its sum
			out = append(out, e.sum)
		}
	}
	return out
}

// readSummary reads the summary of stripe j from the first column whose
// copy is intact and describes that stripe of that life of the segment.
func (s *Store) readSummary(seg meta.SegmentID, geom *segGeom, j int, dst *summary) error {
	sh := geom.shape
	bp := s.chunkBuffer()
	defer s.putChunkBuffer(bp)
	buf := (*bp)[:sh.summaryBlocks*BlockSize]
	off := s.lay.chunkOffset(seg, j)
	var errs []error
	for i := range sh.width() {
		c := (j + i) % sh.width()
		if err := s.readDrive(geom.columns[c], buf, off); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := s.checkSummary(buf, seg, geom, j, dst); err != nil {
			errs = append(errs, err)
			continue
		}
		return nil
	}
	return fmt.Errorf("%w: no intact summary for %v stripe %d: %w", backend.ErrMedia, seg, j, errors.Join(errs...))
}

// checkSummary decodes a summary copy and checks it describes stripe j of
// this life of seg.
func (s *Store) checkSummary(b []byte, seg meta.SegmentID, geom *segGeom, j int, dst *summary) error {
	sh := geom.shape
	if err := decodeSummary(b, sh.chunkBlocks, dst); err != nil {
		return err
	}
	if dst.segment != seg || dst.gen != geom.gen || int(dst.stripe) != j || dst.data != sh.data ||
		dst.parity != sh.parity || dst.blocks != sh.summaryBlocks || len(dst.entries) > sh.entryCap {
		return fmt.Errorf("%w: summary of %v gen %d stripe %d found at %v gen %d stripe %d",
			ErrBadSummary, dst.segment, dst.gen, dst.stripe, seg, geom.gen, j)
	}
	return nil
}
