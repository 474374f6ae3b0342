package cache

import (
	"encoding/binary"
	"hash/crc32"
)

// Layout constants; doc.go draws them.
const (
	headerBlockSize = 4096 // bytes before the log
	headerSlotSize  = 128
	headerVersion   = 1
	recordAlign     = 64 // a cache line: records persist independently
	recordHeaderLen = 40
	recordVersion   = 1
	flagPadding     = 1 << 0
	minLogSize      = 1024    // the smallest log Open accepts, in bytes
	maxRecordSize   = 1 << 31 // whatever the log size: the length field is 32 bits

	headerMagic = "BASALTWB"
	recordMagic = "WBRc"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is one header slot, decoded.
type header struct {
	uuid       [16]byte
	regionSize uint64
	generation uint64
	tailPos    uint64
	tailSeq    Seq
	truncSeq   Seq
	epoch      uint64
	closedHead uint64
	closedSeq  Seq // 0: not closed cleanly
}

// encode writes h into slot, which is headerSlotSize bytes.
func (h *header) encode(slot []byte) {
	_ = slot[headerSlotSize-1]
	clear(slot)
	copy(slot[0:8], headerMagic)
	binary.LittleEndian.PutUint16(slot[8:], headerVersion)
	binary.LittleEndian.PutUint16(slot[10:], headerSlotSize)
	binary.LittleEndian.PutUint32(slot[12:], headerBlockSize)
	copy(slot[16:32], h.uuid[:])
	binary.LittleEndian.PutUint64(slot[32:], h.regionSize)
	binary.LittleEndian.PutUint64(slot[40:], h.generation)
	binary.LittleEndian.PutUint64(slot[48:], h.tailPos)
	binary.LittleEndian.PutUint64(slot[56:], uint64(h.tailSeq))
	binary.LittleEndian.PutUint64(slot[64:], uint64(h.truncSeq))
	binary.LittleEndian.PutUint64(slot[72:], h.epoch)
	binary.LittleEndian.PutUint64(slot[80:], h.closedHead)
	binary.LittleEndian.PutUint64(slot[88:], uint64(h.closedSeq))
	binary.LittleEndian.PutUint32(slot[124:], crc32.Checksum(slot[:124], castagnoli))
}

// decodeHeader parses a slot. It returns false unless the magic, version,
// sizes and checksum are right and the fields are self-consistent; it does not
// compare them with the region.
func decodeHeader(slot []byte) (header, bool) {
	_ = slot[headerSlotSize-1]
	if string(slot[0:8]) != headerMagic ||
		binary.LittleEndian.Uint16(slot[8:]) != headerVersion ||
		binary.LittleEndian.Uint16(slot[10:]) != headerSlotSize ||
		binary.LittleEndian.Uint32(slot[12:]) != headerBlockSize ||
		binary.LittleEndian.Uint32(slot[124:]) != crc32.Checksum(slot[:124], castagnoli) {
		return header{}, false
	}
	var h header
	copy(h.uuid[:], slot[16:32])
	h.regionSize = binary.LittleEndian.Uint64(slot[32:])
	h.generation = binary.LittleEndian.Uint64(slot[40:])
	h.tailPos = binary.LittleEndian.Uint64(slot[48:])
	h.tailSeq = Seq(binary.LittleEndian.Uint64(slot[56:]))
	h.truncSeq = Seq(binary.LittleEndian.Uint64(slot[64:]))
	h.epoch = binary.LittleEndian.Uint64(slot[72:])
	h.closedHead = binary.LittleEndian.Uint64(slot[80:])
	h.closedSeq = Seq(binary.LittleEndian.Uint64(slot[88:]))
	// Positions, seqs and epochs grow by at most one record or one epoch at a
	// time; bounding them far below overflow keeps every sum below exact.
	const limit = 1 << 62
	valid := h.tailPos%recordAlign == 0 && h.tailPos < limit &&
		h.tailSeq > 0 && h.tailSeq < limit && h.truncSeq < limit &&
		h.epoch > 0 && h.epoch < limit &&
		h.closedHead%recordAlign == 0 && (h.closedSeq == 0 || h.closedHead >= h.tailPos)
	return h, valid
}

// recordHeader is the fixed part of a record, decoded.
type recordHeader struct {
	crc    uint32
	kind   Kind
	flags  uint8
	length uint32
	seq    Seq
	pos    uint64
	epoch  uint64
}

// encode writes r, without its CRC, into b (recordHeaderLen bytes).
func (r *recordHeader) encode(b []byte) {
	_ = b[recordHeaderLen-1]
	copy(b[0:4], recordMagic)
	b[8] = recordVersion
	b[9] = byte(r.kind)
	b[10] = r.flags
	b[11] = 0
	binary.LittleEndian.PutUint32(b[12:], r.length)
	binary.LittleEndian.PutUint64(b[16:], uint64(r.seq))
	binary.LittleEndian.PutUint64(b[24:], r.pos)
	binary.LittleEndian.PutUint64(b[32:], r.epoch)
}

// decodeRecordHeader parses b (recordHeaderLen bytes). It returns false on a
// wrong magic, version or reserved bits; the CRC is checked by the caller.
func decodeRecordHeader(b []byte) (recordHeader, bool) {
	_ = b[recordHeaderLen-1]
	if string(b[0:4]) != recordMagic || b[8] != recordVersion || b[10]&^flagPadding != 0 || b[11] != 0 {
		return recordHeader{}, false
	}
	return recordHeader{
		crc:    binary.LittleEndian.Uint32(b[4:]),
		kind:   Kind(b[9]),
		flags:  b[10],
		length: binary.LittleEndian.Uint32(b[12:]),
		seq:    Seq(binary.LittleEndian.Uint64(b[16:])),
		pos:    binary.LittleEndian.Uint64(b[24:]),
		epoch:  binary.LittleEndian.Uint64(b[32:]),
	}, true
}

// headerCRC starts a record CRC: the region's seed over the header bytes the
// CRC covers. Continue it over the payload with crc32.Update.
func headerCRC(seed uint32, b []byte) uint32 {
	crc := crc32.Update(seed, castagnoli, b[0:4])
	return crc32.Update(crc, castagnoli, b[8:recordHeaderLen])
}

// recordSize is the log space a record with a payload of length bytes takes.
func recordSize(length int) uint64 {
	return (uint64(length) + recordHeaderLen + recordAlign - 1) &^ (recordAlign - 1)
}
