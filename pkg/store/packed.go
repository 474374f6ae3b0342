package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"basalt/pkg/compress"
	"basalt/pkg/meta"
)

// Packed slot format constants; the byte diagram is in doc.go ("Packed
// slot").
const (
	packedMagic      = "BPAK"
	packedVersion    = 1
	packedHeaderLen  = 12
	packedDescLen    = 28
	maxFragments     = 8
	maxFragmentBytes = 3072 // a block that compresses to more is stored raw
)

// ErrBadPackedSlot wraps every reason a packed slot does not parse.
var ErrBadPackedSlot = errors.New("store: bad packed slot")

// fragment describes one compressed block of a packed slot.
type fragment struct {
	lba    uint64
	vol    meta.VolumeID
	sum    uint32 // CRC32C of the block once decompressed
	csum   uint32 // CRC32C of the compressed bytes
	offset int
	length int
	alg    compress.Algorithm
}

// packedHeader is a packed slot's header, parsed.
type packedHeader struct {
	n     int
	frags [maxFragments]fragment
}

// encodePackedHeader writes h's header and descriptors into slot and its
// checksum. The fragments' bytes are already in place.
func encodePackedHeader(slot []byte, h *packedHeader) {
	le := binary.LittleEndian
	copy(slot[0:4], packedMagic)
	slot[4], slot[5], slot[6], slot[7] = packedVersion, byte(h.n), 0, 0
	for i := range h.n {
		f, d := &h.frags[i], slot[packedHeaderLen+i*packedDescLen:]
		le.PutUint64(d, f.lba)
		le.PutUint32(d[8:], uint32(f.vol))
		le.PutUint32(d[12:], f.sum)
		le.PutUint32(d[16:], f.csum)
		le.PutUint16(d[20:], uint16(f.offset))
		le.PutUint16(d[22:], uint16(f.length))
		d[24], d[25], d[26], d[27] = byte(f.alg), 0, 0, 0
	}
	le.PutUint32(slot[8:], packedHeaderSum(slot, h.n))
}

// packedHeaderSum is the CRC32C of the header's first 8 bytes and its n
// descriptors.
func packedHeaderSum(slot []byte, n int) uint32 {
	c := crc32.Update(0, castagnoli, slot[0:8])
	return crc32.Update(c, castagnoli, slot[packedHeaderLen:packedHeaderLen+n*packedDescLen])
}

// parsePackedHeader parses and checks a packed slot's header into h:
// magic, version, count, checksum, reserved bytes, and that every fragment
// lies after the descriptors, inside the slot, with no two overlapping.
// Fragment bytes are checked by fragmentData. Malformed input is an error,
// never a panic.
func parsePackedHeader(slot []byte, h *packedHeader) error {
	if len(slot) != BlockSize {
		return fmt.Errorf("%w: %d bytes", ErrBadPackedSlot, len(slot))
	}
	if string(slot[0:4]) != packedMagic || slot[4] != packedVersion || slot[6] != 0 || slot[7] != 0 {
		return fmt.Errorf("%w: header % x", ErrBadPackedSlot, slot[0:8])
	}
	n := int(slot[5])
	if n < 1 || n > maxFragments {
		return fmt.Errorf("%w: %d fragments", ErrBadPackedSlot, n)
	}
	le := binary.LittleEndian
	if stored, sum := le.Uint32(slot[8:]), packedHeaderSum(slot, n); stored != sum {
		return fmt.Errorf("%w: header checksum %#08x, computed %#08x", ErrBadPackedSlot, stored, sum)
	}
	h.n = n
	low := BlockSize // fragments are laid from the end of the slot down
	for i := range n {
		d := slot[packedHeaderLen+i*packedDescLen:]
		f := fragment{lba: le.Uint64(d), vol: meta.VolumeID(le.Uint32(d[8:])), sum: le.Uint32(d[12:]),
			csum: le.Uint32(d[16:]), offset: int(le.Uint16(d[20:])), length: int(le.Uint16(d[22:])),
			alg: compress.Algorithm(d[24])}
		switch {
		case d[25] != 0 || d[26] != 0 || d[27] != 0:
			return fmt.Errorf("%w: fragment %d: reserved bytes are not zero", ErrBadPackedSlot, i)
		case f.vol == 0 || f.alg == compress.None || !f.alg.Valid():
			return fmt.Errorf("%w: fragment %d: volume %d, algorithm %v", ErrBadPackedSlot, i, f.vol, f.alg)
		case f.length < 1 || f.offset+f.length != low || f.offset < packedHeaderLen+n*packedDescLen:
			return fmt.Errorf("%w: fragment %d at %d+%d", ErrBadPackedSlot, i, f.offset, f.length)
		}
		low = f.offset
		h.frags[i] = f
	}
	return nil
}

// find returns the index of the newest fragment of (vol, lba), or -1.
func (h *packedHeader) find(vol meta.VolumeID, lba uint64) int {
	for i := h.n - 1; i >= 0; i-- {
		if h.frags[i].vol == vol && h.frags[i].lba == lba {
			return i
		}
	}
	return -1
}

// unpackFragment decompresses fragment i of slot into dst (one block) and
// checks it against its checksums.
func unpackFragment(slot []byte, h *packedHeader, i int, dst []byte) error {
	f := &h.frags[i]
	src := slot[f.offset : f.offset+f.length]
	if crc32.Checksum(src, castagnoli) != f.csum {
		return fmt.Errorf("%w: fragment %d fails its checksum", ErrBadPackedSlot, i)
	}
	if err := compress.Decompress(f.alg, dst[:BlockSize], src); err != nil {
		return fmt.Errorf("%w: fragment %d: %w", ErrBadPackedSlot, i, err)
	}
	if blockSum(dst[:BlockSize]) != f.sum {
		return fmt.Errorf("%w: fragment %d decompresses to a block that fails its checksum", ErrBadPackedSlot, i)
	}
	return nil
}

// packFits reports whether a fragment of length bytes fits into a slot
// holding h.
func (h *packedHeader) fits(length int) bool {
	if h.n == maxFragments {
		return false
	}
	low := BlockSize
	if h.n > 0 {
		low = h.frags[h.n-1].offset
	}
	return packedHeaderLen+(h.n+1)*packedDescLen <= low-length
}

// add places a fragment of the compressed bytes comp into slot (h.fits
// must hold) and rewrites the header.
func (h *packedHeader) add(slot []byte, f fragment, comp []byte) {
	low := BlockSize
	if h.n > 0 {
		low = h.frags[h.n-1].offset
	}
	f.offset, f.length = low-len(comp), len(comp)
	f.csum = crc32.Checksum(comp, castagnoli)
	copy(slot[f.offset:], comp)
	h.frags[h.n] = f
	h.n++
	clear(slot[packedHeaderLen+h.n*packedDescLen : f.offset])
	encodePackedHeader(slot, h)
}
