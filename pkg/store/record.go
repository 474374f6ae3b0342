package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"basalt/cache"
	"basalt/pkg/meta"
)

// Write-buffer record kinds and payloads; the byte diagrams are in doc.go.
const (
	recordWrite cache.Kind = 1
	recordUnmap cache.Kind = 2

	recordHeaderLen = 16
	// maxUnmapBlocks bounds one unmap record (and summary entry), whose
	// count is 32 bits.
	maxUnmapBlocks = 1 << 30
)

// A write record's blocks are the write buffer's AppendBlocks blocks.
var _ [BlockSize - cache.BlockSize]struct{}
var _ [cache.BlockSize - BlockSize]struct{}

// ErrBadRecord wraps every reason a write-buffer record does not decode.
var ErrBadRecord = errors.New("store: bad write-buffer record")

// record is a decoded write-buffer record. For a write, sums and data alias
// the payload.
type record struct {
	kind  cache.Kind
	vol   meta.VolumeID
	lba   uint64
	count int
	sums  []byte // count little-endian CRC32Cs
	data  []byte // count blocks
}

// sum returns the checksum of block i of a write record.
func (r *record) sum(i int) uint32 { return binary.LittleEndian.Uint32(r.sums[4*i:]) }

// block returns block i of a write record.
func (r *record) block(i int) []byte { return r.data[i*BlockSize : (i+1)*BlockSize] }

// writeRecordSize is the payload size of a write of n blocks.
func writeRecordSize(n int) int { return recordHeaderLen + n*(4+BlockSize) }

// encodeRecordHeader fills a record header (recordHeaderLen bytes). A
// write's checksum table follows it in the payload: the write buffer's
// AppendBlocks computes it from its copy of the blocks.
func encodeRecordHeader(hdr []byte, vol meta.VolumeID, lba uint64, n int) {
	le := binary.LittleEndian
	le.PutUint32(hdr[0:], uint32(vol))
	le.PutUint32(hdr[4:], uint32(n))
	le.PutUint64(hdr[8:], lba)
}

// decodeRecord parses a payload of the given kind. It checks the kind, the
// length against the block count, and that the range does not wrap; block
// checksums are checked by the reader of each block.
func decodeRecord(kind cache.Kind, p []byte) (record, error) {
	if len(p) < recordHeaderLen {
		return record{}, fmt.Errorf("%w: %d bytes", ErrBadRecord, len(p))
	}
	le := binary.LittleEndian
	r := record{kind: kind, vol: meta.VolumeID(le.Uint32(p)), count: int(le.Uint32(p[4:])), lba: le.Uint64(p[8:])}
	switch {
	case r.vol == 0:
		return record{}, fmt.Errorf("%w: volume 0", ErrBadRecord)
	case r.count == 0:
		return record{}, fmt.Errorf("%w: 0 blocks", ErrBadRecord)
	case r.lba+uint64(r.count) < r.lba:
		return record{}, fmt.Errorf("%w: range at %d of %d blocks wraps", ErrBadRecord, r.lba, r.count)
	}
	switch kind {
	case recordWrite:
		if len(p) != writeRecordSize(r.count) {
			return record{}, fmt.Errorf("%w: write of %d blocks in %d bytes", ErrBadRecord, r.count, len(p))
		}
		r.sums = p[recordHeaderLen : recordHeaderLen+4*r.count]
		r.data = p[recordHeaderLen+4*r.count:]
	case recordUnmap:
		if len(p) != recordHeaderLen || r.count > maxUnmapBlocks {
			return record{}, fmt.Errorf("%w: unmap of %d blocks in %d bytes", ErrBadRecord, r.count, len(p))
		}
	default:
		return record{}, fmt.Errorf("%w: kind %v", ErrBadRecord, kind)
	}
	return r, nil
}
