package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"basalt/ec"
	"basalt/pkg/meta"
)

// Summary format constants; the byte diagram is in doc.go.
const (
	summaryMagic     = "BSUM"
	summaryVersion   = 1
	summaryHeaderLen = 64
	entrySize        = 24
)

// entryKind says what a summary entry records.
type entryKind uint8

const (
	// kindWrite maps (volume, lba) to the entry's data slot: host data.
	kindWrite entryKind = 1
	// kindRelocate maps (volume, lba) to the entry's data slot only if the
	// map still points at from: data moved by GC or re-striping.
	kindRelocate entryKind = 2
	// kindUnmap unmaps count blocks from lba; it takes no data slot.
	kindUnmap entryKind = 3
)

func (k entryKind) String() string {
	switch k {
	case kindWrite:
		return "write"
	case kindRelocate:
		return "relocate"
	case kindUnmap:
		return "unmap"
	}
	return fmt.Sprintf("entryKind(%d)", uint8(k))
}

func (k entryKind) hasData() bool { return k == kindWrite || k == kindRelocate }

// summaryEntry is one entry of a stripe summary.
type summaryEntry struct {
	kind entryKind
	vol  meta.VolumeID
	lba  uint64
	// sum is the data block's checksum (write, relocate) or the number of
	// blocks (unmap).
	sum uint32
	// from is the PBN+1 the block is relocated from (relocate), else 0;
	// with packedBit set when the source is a packed slot.
	from uint32
	// frag is 0 for a block in a slot of its own, else its place (1..8)
	// among the fragments of a packed slot (packed.go, slotCursor).
	frag uint8
}

// summary describes one stripe. A copy of it starts every chunk of the
// stripe, so any one surviving drive tells what the stripe holds.
type summary struct {
	blocks    int // summary blocks per chunk (the shape's summaryBlocks)
	seq       uint64
	durable   uint64 // every stripe with a sequence <= durable was synced first
	bufferSeq uint64 // write-buffer records <= bufferSeq are destaged
	segment   meta.SegmentID
	gen       uint32
	stripe    uint32
	data      int
	parity    int
	stream    uint8
	// paritySums holds the checksum of every parity payload block, parity
	// chunk p's row r at p*payload+r.
	paritySums []uint32
	entries    []summaryEntry
}

// ErrBadSummary wraps every reason a summary does not decode.
var ErrBadSummary = errors.New("store: bad stripe summary")

// encodeSummary writes s into b, which is s.blocks*BlockSize bytes, with its
// checksum. The caller has checked that the entries fit.
func encodeSummary(b []byte, s *summary) {
	clear(b)
	copy(b[0:4], summaryMagic)
	le := binary.LittleEndian
	le.PutUint16(b[4:], summaryVersion)
	le.PutUint16(b[6:], uint16(s.blocks))
	le.PutUint64(b[8:], s.seq)
	le.PutUint64(b[16:], s.durable)
	le.PutUint64(b[24:], s.bufferSeq)
	le.PutUint32(b[32:], uint32(s.segment))
	le.PutUint32(b[36:], s.gen)
	le.PutUint32(b[40:], s.stripe)
	b[44], b[45], b[46] = byte(s.data), byte(s.parity), s.stream
	le.PutUint16(b[48:], uint16(len(s.paritySums)))
	le.PutUint16(b[50:], uint16(len(s.entries)))
	off := summaryHeaderLen
	for _, sum := range s.paritySums {
		le.PutUint32(b[off:], sum)
		off += 4
	}
	for _, e := range s.entries {
		le.PutUint64(b[off:], e.lba)
		le.PutUint32(b[off+8:], uint32(e.vol))
		le.PutUint32(b[off+12:], e.sum)
		le.PutUint32(b[off+16:], e.from)
		b[off+20], b[off+21] = byte(e.kind), e.frag
		off += entrySize
	}
	end := len(b) - 4
	le.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
}

// errNoSummary: the summary's place is all zeros, as in a chunk never
// written or discarded since (a freed segment's range). Recovery reads it
// as the end of the segment's stripes, like any summary that is not intact
// and of the segment's current life; it is not a sign of corruption.
var errNoSummary = errors.New("store: no summary (the chunk is zeros: never written, or discarded)")

// decodeSummary parses and checks a summary of chunkBlocks-block chunks. It
// checks, in order: size, all zeros (errNoSummary, wrapped in
// ErrBadSummary), magic, checksum, version, reserved bytes, then
// every field against the others (summaryShapeError). dst's slices are
// reused.
func decodeSummary(b []byte, chunkBlocks int, dst *summary) error {
	if len(b) < BlockSize || len(b)%BlockSize != 0 {
		return fmt.Errorf("%w: %d bytes", ErrBadSummary, len(b))
	}
	if allZero(b) {
		return fmt.Errorf("%w: %w", ErrBadSummary, errNoSummary)
	}
	if string(b[0:4]) != summaryMagic {
		return fmt.Errorf("%w: magic %q", ErrBadSummary, b[0:4])
	}
	le := binary.LittleEndian
	end := len(b) - 4
	if stored, sum := le.Uint32(b[end:]), crc32.Checksum(b[:end], castagnoli); stored != sum {
		return fmt.Errorf("%w: checksum %#08x, computed %#08x", ErrBadSummary, stored, sum)
	}
	if v := le.Uint16(b[4:]); v != summaryVersion {
		return fmt.Errorf("%w: version %d", ErrBadSummary, v)
	}
	if b[47] != 0 || !allZero(b[52:summaryHeaderLen]) {
		return fmt.Errorf("%w: reserved header bytes are not zero", ErrBadSummary)
	}
	s := dst
	s.blocks = int(le.Uint16(b[6:]))
	s.seq, s.durable, s.bufferSeq = le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:])
	s.segment, s.gen, s.stripe = meta.SegmentID(le.Uint32(b[32:])), le.Uint32(b[36:]), le.Uint32(b[40:])
	s.data, s.parity, s.stream = int(b[44]), int(b[45]), b[46]
	nParity, nEntries := int(le.Uint16(b[48:])), int(le.Uint16(b[50:]))
	if err := summaryShapeError(s, len(b), chunkBlocks, nParity, nEntries); err != nil {
		return err
	}
	off := summaryHeaderLen
	s.paritySums = s.paritySums[:0]
	for range nParity {
		s.paritySums = append(s.paritySums, le.Uint32(b[off:]))
		off += 4
	}
	s.entries = s.entries[:0]
	var slots slotCursor
	for i := range nEntries {
		e, err := decodeEntry(b[off : off+entrySize])
		if err == nil {
			_, err = slots.next(e)
		}
		if err != nil {
			return fmt.Errorf("%w: entry %d: %w", ErrBadSummary, i, err)
		}
		s.entries = append(s.entries, e)
		off += entrySize
	}
	if slots.used > s.data*(chunkBlocks-s.blocks) {
		return fmt.Errorf("%w: %d data slots taken of %d", ErrBadSummary, slots.used,
			s.data*(chunkBlocks-s.blocks))
	}
	if !allZero(b[off:end]) {
		return fmt.Errorf("%w: bytes after the entries are not zero", ErrBadSummary)
	}
	return nil
}

// summaryShapeError checks the header fields of a summary of size bytes
// against each other and the chunk size.
func summaryShapeError(s *summary, size, chunkBlocks, nParity, nEntries int) error {
	switch {
	case s.blocks*BlockSize != size || s.blocks >= chunkBlocks:
		return fmt.Errorf("%w: %d summary blocks in %d bytes, chunks of %d blocks", ErrBadSummary,
			s.blocks, size, chunkBlocks)
	case s.data < 1 || s.parity < 0 || s.data+s.parity > ec.MaxWidth:
		return fmt.Errorf("%w: geometry %d+%d", ErrBadSummary, s.data, s.parity)
	case nParity != s.parity*(chunkBlocks-s.blocks):
		return fmt.Errorf("%w: %d parity checksums for %d+%d", ErrBadSummary, nParity, s.data, s.parity)
	case summaryHeaderLen+4*nParity+entrySize*nEntries > size-4:
		return fmt.Errorf("%w: %d entries overflow %d bytes", ErrBadSummary, nEntries, size)
	case s.seq == 0 || s.durable >= s.seq:
		return fmt.Errorf("%w: sequence %d, durable %d", ErrBadSummary, s.seq, s.durable)
	}
	return nil
}

func decodeEntry(b []byte) (summaryEntry, error) {
	le := binary.LittleEndian
	e := summaryEntry{lba: le.Uint64(b), vol: meta.VolumeID(le.Uint32(b[8:])), sum: le.Uint32(b[12:]),
		from: le.Uint32(b[16:]), kind: entryKind(b[20]), frag: b[21]}
	switch {
	case b[22] != 0 || b[23] != 0:
		return e, errors.New("reserved bytes are not zero")
	case e.frag > maxFragments || (e.frag != 0 && !e.kind.hasData()):
		return e, errors.New("reserved bytes are not zero")
	case e.vol == 0:
		return e, errors.New("volume 0")
	case e.kind == kindWrite && e.from != 0, e.kind == kindUnmap && e.from != 0:
		return e, fmt.Errorf("%v entry with a source", e.kind)
	case e.kind == kindRelocate && e.from == 0:
		return e, errors.New("relocation without a source")
	case e.kind == kindUnmap && e.sum == 0:
		return e, errors.New("unmap of 0 blocks")
	case e.kind == kindUnmap && e.lba+uint64(e.sum) < e.lba:
		return e, errors.New("unmap range overflows")
	case e.kind < kindWrite || e.kind > kindUnmap:
		return e, fmt.Errorf("unknown kind %d", e.kind)
	}
	return e, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
