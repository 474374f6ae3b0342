package store

import (
	"fmt"
	"hash/crc32"

	"basalt/ec"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// BlockSize is the logical block size of every volume and the unit of the
// map: 4096 bytes, the drive block size.
const BlockSize = disk.BlockSize

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// blockSum is the per-block checksum kept in the summary and the map.
func blockSum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// zeroBlockSum is blockSum of a block of zeros: padding blocks must match it.
var zeroBlockSum = blockSum(make([]byte, BlockSize))

// PBN is a physical block number: where a data block lives in the store.
// pbn = segment*stride + stripe*slots + slot, where slots is the number of
// data slots in a stripe of the segment's shape and stride the number of
// slots in a segment of the widest shape (doc.go, "Addressing").
type PBN uint32

// entry is one LBA map entry: the block's checksum in the high 32 bits and
// PBN+1 in the low 32 bits; 0 means unmapped (doc.go, "Map entry").
type entry uint64

func makeEntry(pbn PBN, sum uint32) entry { return entry(uint64(sum)<<32 | (uint64(pbn) + 1)) }

func (e entry) mapped() bool { return e != 0 }
func (e entry) pbn() PBN     { return PBN(uint32(e)&^packedBit - 1) }
func (e entry) sum() uint32  { return uint32(e >> 32) }

// shape is the stripe layout of one geometry (Data chunks, fixed Parity and
// ChunkSize). Every chunk of a stripe starts with summaryBlocks copies'
// worth of summary, then payload blocks; parity is computed over the
// payload rows only (doc.go, "Stripe").
type shape struct {
	data, parity  int
	chunkBlocks   int // blocks per chunk
	summaryBlocks int // s: summary blocks at the start of every chunk
	payload       int // blocks of payload per chunk: chunkBlocks - s
	slots         int // data slots per stripe: data*payload
	entryCap      int // entries a summary has room for
	row           *ec.Codec
	full          *ec.Codec // payload-sized chunks, for encoding
}

// minUnmapRoom is how many unmap entries a full stripe's summary can still
// carry: shapes are sized so that a stripe never closes for lack of room
// just because a few trims came along.
const minUnmapRoom = 8

func newShape(data, parity, chunkSize int) (*shape, error) {
	cb := chunkSize / BlockSize
	for s := 1; s < cb; s++ {
		payload := cb - s
		slots := data * payload
		room := s*BlockSize - summaryHeaderLen - 4 - 4*parity*payload
		if room < entrySize*(slots+minUnmapRoom) {
			continue
		}
		sh := &shape{data: data, parity: parity, chunkBlocks: cb, summaryBlocks: s, payload: payload,
			slots: slots, entryCap: room / entrySize}
		var err error
		if sh.row, err = ec.New(ec.Geometry{Data: data, Parity: parity, ChunkSize: BlockSize}); err != nil {
			return nil, err
		}
		if sh.full, err = ec.New(ec.Geometry{Data: data, Parity: parity, ChunkSize: payload * BlockSize}); err != nil {
			return nil, err
		}
		return sh, nil
	}
	return nil, fmt.Errorf("%w: chunks of %d bytes are too small for %d+%d stripes",
		ErrInvalidOptions, chunkSize, data, parity)
}

func (sh *shape) width() int { return sh.data + sh.parity }

// locate returns where data slot q of stripe j lies: its chunk and the block
// offset within the chunk.
func (sh *shape) locate(q int) (chunk, block int) {
	return q / sh.payload, sh.summaryBlocks + q%sh.payload
}

// column returns the segment column holding chunk c of stripe j: chunks
// rotate across the columns from stripe to stripe, so that reads of data
// spread over every drive and no drive holds only parity.
func (sh *shape) column(stripe, chunk int) int { return (chunk + stripe) % sh.width() }

// layout is the fixed geometry of a store: where each segment lies on the
// drives and how PBNs are numbered.
type layout struct {
	drives       int
	chunkSize    int
	segStripes   int   // stripes per segment
	segments     int   // segments per drive
	columnBytes  int64 // bytes of one segment on one drive
	stride       int64 // PBNs per segment
	shapes       []*shape
	fullData     int
	parity       int
	maxSlotsFull int
}

func newLayout(info meta.NodeInfo) (*layout, error) {
	l := &layout{drives: info.Drives, chunkSize: info.ChunkSize, segStripes: info.SegmentStripes,
		segments: info.Segments, fullData: info.Data, parity: info.Parity}
	l.columnBytes = int64(l.segStripes) * int64(l.chunkSize)
	l.shapes = make([]*shape, info.Data+1)
	for k := 1; k <= info.Data; k++ {
		sh, err := newShape(k, info.Parity, info.ChunkSize)
		if err != nil {
			return nil, err
		}
		l.shapes[k] = sh
	}
	l.maxSlotsFull = l.shapes[info.Data].slots
	l.stride = int64(l.segStripes) * int64(l.maxSlotsFull)
	if int64(l.segments)*l.stride >= packedBit-1 {
		return nil, fmt.Errorf("%w: %d segments of %d blocks exceed the 2^31 block addresses of the map",
			ErrInvalidOptions, l.segments, l.stride)
	}
	return l, nil
}

// shape returns the shape of stripes with data chunks.
func (l *layout) shape(data int) *shape { return l.shapes[data] }

// chunkOffset returns the drive offset of chunk-column of stripe j of
// segment seg (the same on every drive).
func (l *layout) chunkOffset(seg meta.SegmentID, stripe int) int64 {
	return disk.ReservedSize + int64(seg)*l.columnBytes + int64(stripe)*int64(l.chunkSize)
}

// pbn numbers slot q of stripe j of seg, whose stripes have shape sh.
func (l *layout) pbn(seg meta.SegmentID, sh *shape, stripe, q int) PBN {
	return PBN(int64(seg)*l.stride + int64(stripe*sh.slots+q))
}

// split is the inverse of pbn given the segment's shape; ok is false for a
// PBN that does not fit it.
func (l *layout) split(p PBN, sh *shape) (seg meta.SegmentID, stripe, q int, ok bool) {
	seg = meta.SegmentID(int64(p) / l.stride)
	rest := int(int64(p) % l.stride)
	stripe, q = rest/sh.slots, rest%sh.slots
	return seg, stripe, q, int(seg) < l.segments && stripe < l.segStripes
}

// segmentOf returns the segment a PBN lies in.
func (l *layout) segmentOf(p PBN) meta.SegmentID { return meta.SegmentID(int64(p) / l.stride) }
