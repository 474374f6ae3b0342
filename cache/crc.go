package cache

import (
	"encoding/binary"
	"hash/crc32"
)

// BlockSize is the block size of AppendBlocks: the payload's data part is a
// whole number of blocks, each checksummed on its own.
const BlockSize = 4096

// castagnoliPoly is the CRC32C polynomial, bit-reflected (as hash/crc32
// uses it).
const castagnoliPoly = 0x82f63b78

// gfMul multiplies a and b as polynomials over GF(2) modulo the CRC32C
// polynomial, both in the reflected representation where bit 31 is x^0.
func gfMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow8n returns x^(8n) modulo the polynomial: the operator that moves a CRC
// past n zero bytes.
func xPow8n(n uint64) uint32 {
	result := uint32(1) << 31 // x^0
	square := uint32(1) << 23 // x^8
	for ; n != 0; n >>= 1 {
		if n&1 != 0 {
			result = gfMul(result, square)
		}
		square = gfMul(square, square)
	}
	return result
}

// blockShift is multiplication by x^(8*BlockSize), as four byte-indexed
// tables: the operator is linear over XOR, so the product of a 32-bit value
// is the XOR of its bytes' products.
var blockShift = func() (t [4][256]uint32) {
	op := xPow8n(BlockSize)
	for j := range 4 {
		for v := range 256 {
			t[j][v] = gfMul(op, uint32(v)<<(8*j))
		}
	}
	return t
}()

// crcAppendBlock returns the CRC32C of A||B given crc, the CRC32C of A (or
// any running crc32.Update value over A), and sum, the CRC32C of a block B
// of BlockSize bytes: crc32.Update(crc, castagnoli, B) without reading B.
// The identity crc(A||B) = crc(A)*x^(8|B|) + crc(B) holds for CRCs with
// pre- and post-inversion as hash/crc32 computes them (the inversions of A's
// and B's computations cancel over B's length).
func crcAppendBlock(crc, sum uint32) uint32 {
	t := &blockShift
	return t[0][crc&0xff] ^ t[1][crc>>8&0xff] ^ t[2][crc>>16&0xff] ^ t[3][crc>>24] ^ sum
}

// copyBlocks copies data, a whole number of blocks, to dst and writes the
// CRC32C of each copied block to sums (4 bytes each, little-endian). It
// returns the running CRC crc continued over sums and then the copied data.
// Each block is checksummed from the copy right after it is made, while it
// is in the CPU cache, and the record CRC is extended by each block's sum
// instead of reading the block a second time.
func copyBlocks(crc uint32, dst, sums, data []byte) uint32 {
	n := len(data) / BlockSize
	for i := range n {
		block := dst[i*BlockSize : (i+1)*BlockSize]
		copy(block, data[i*BlockSize:(i+1)*BlockSize])
		binary.LittleEndian.PutUint32(sums[4*i:], crc32.Checksum(block, castagnoli))
	}
	crc = crc32.Update(crc, castagnoli, sums[:4*n])
	for i := range n {
		crc = crcAppendBlock(crc, binary.LittleEndian.Uint32(sums[4*i:]))
	}
	return crc
}
