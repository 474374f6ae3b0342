package cache

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestCRCAppendBlockMatchesUpdate: extending a running CRC by a block's own
// CRC gives what crc32.Update over the block gives, for any running value.
func TestCRCAppendBlockMatchesUpdate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	block := make([]byte, BlockSize)
	for range 200 {
		for i := range block {
			block[i] = byte(rng.Uint32())
		}
		prefix := make([]byte, rng.IntN(100))
		for i := range prefix {
			prefix[i] = byte(rng.Uint32())
		}
		running := crc32.Update(rng.Uint32(), castagnoli, prefix)
		want := crc32.Update(running, castagnoli, block)
		if got := crcAppendBlock(running, crc32.Checksum(block, castagnoli)); got != want {
			t.Fatalf("crcAppendBlock(%#x) = %#x, crc32.Update = %#x", running, got, want)
		}
	}
}

// TestCopyBlocksChecksumsTheCopy: copyBlocks writes each block's CRC32C and
// returns the running CRC over sums and data, as one crc32.Update would.
func TestCopyBlocksChecksumsTheCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 7} {
		data := make([]byte, n*BlockSize)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		dst, sums := make([]byte, len(data)), make([]byte, 4*n)
		const seed = 0x12345678
		got := copyBlocks(seed, dst, sums, data)
		if string(dst) != string(data) {
			t.Fatalf("%d blocks: copy differs", n)
		}
		for i := range n {
			want := crc32.Checksum(data[i*BlockSize:(i+1)*BlockSize], castagnoli)
			if s := uint32(sums[4*i]) | uint32(sums[4*i+1])<<8 | uint32(sums[4*i+2])<<16 | uint32(sums[4*i+3])<<24; s != want {
				t.Fatalf("%d blocks: sum %d = %#x, want %#x", n, i, s, want)
			}
		}
		want := crc32.Update(crc32.Update(seed, castagnoli, sums), castagnoli, data)
		if got != want {
			t.Fatalf("%d blocks: running CRC %#x, want %#x", n, got, want)
		}
	}
}

func BenchmarkCopyBlocks(b *testing.B) {
	data, dst, sums := make([]byte, BlockSize), make([]byte, BlockSize), make([]byte, 4)
	b.SetBytes(BlockSize)
	b.ReportAllocs()
	for b.Loop() {
		copyBlocks(1, dst, sums, data)
	}
}

func BenchmarkCopyThenCRCTwice(b *testing.B) {
	data, dst := make([]byte, BlockSize), make([]byte, BlockSize)
	b.SetBytes(BlockSize)
	b.ReportAllocs()
	for b.Loop() {
		copy(dst, data)
		crc32.Update(crc32.Checksum(dst, castagnoli), castagnoli, dst)
	}
}
