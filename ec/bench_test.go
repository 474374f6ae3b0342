package ec

import (
	"fmt"
	"testing"
)

// benchmarkEncode measures Encode of one stripe of k data and m parity chunks
// of shardSize bytes; the bytes counted are the whole stripe, data and parity.
func benchmarkEncode(b *testing.B, k, m, shardSize int, opts ...Option) {
	c := mustCodec(b, Geometry{Data: k, Parity: m, ChunkSize: shardSize}, opts...)
	stripe, _ := encodedStripe(b, c, 1) // also the warm-up, so setup is not measured
	b.SetBytes(int64(shardSize * (k + m)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := c.Encode(stripe); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode_4x1x64K(b *testing.B) { benchmarkEncode(b, 4, 1, 64<<10) }
func BenchmarkEncode_4x2x64K(b *testing.B) { benchmarkEncode(b, 4, 2, 64<<10) }
func BenchmarkEncode_8x3x64K(b *testing.B) { benchmarkEncode(b, 8, 3, 64<<10) }
func BenchmarkEncode_4x2x1M(b *testing.B)  { benchmarkEncode(b, 4, 2, 1<<20) }

// BenchmarkEncodeSIMD sweeps the instruction-set levels for 4+2x64K.
func BenchmarkEncodeSIMD(b *testing.B) {
	for _, level := range SIMDLevels {
		b.Run(fmt.Sprintf("simd=%v", level), func(b *testing.B) {
			benchmarkEncode(b, 4, 2, 64<<10, WithSIMD(level))
		})
	}
}

// benchmarkReconstruct measures rebuilding lost chunks (given by index) of a
// k+m stripe; the bytes counted are the whole stripe. The lost chunks are
// repaired in place, so each iteration starts from the same erasure.
func benchmarkReconstruct(b *testing.B, k, m, shardSize int, dataOnly bool, lost ...int) {
	c := mustCodec(b, Geometry{Data: k, Parity: m, ChunkSize: shardSize})
	stripe, sums := encodedStripe(b, c, 2)
	reconstruct := c.Reconstruct
	if dataOnly {
		reconstruct = c.ReconstructData
	}
	b.SetBytes(int64(shardSize * (k + m)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, i := range lost {
			stripe[i] = stripe[i][:0]
		}
		if err := reconstruct(stripe, sums); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReconstruct_4x1x64K_1Data(b *testing.B) {
	benchmarkReconstruct(b, 4, 1, 64<<10, false, 0)
}
func BenchmarkReconstruct_4x2x64K_1Data(b *testing.B) {
	benchmarkReconstruct(b, 4, 2, 64<<10, false, 1)
}
func BenchmarkReconstruct_4x2x64K_2Data(b *testing.B) {
	benchmarkReconstruct(b, 4, 2, 64<<10, false, 0, 3)
}
func BenchmarkReconstruct_4x2x64K_1Data1Parity(b *testing.B) {
	benchmarkReconstruct(b, 4, 2, 64<<10, false, 2, 5)
}
func BenchmarkReconstructData_4x2x64K_1Data(b *testing.B) {
	benchmarkReconstruct(b, 4, 2, 64<<10, true, 1)
}
func BenchmarkReconstruct_8x3x64K_3Data(b *testing.B) {
	benchmarkReconstruct(b, 8, 3, 64<<10, false, 0, 4, 7)
}

// BenchmarkVerify_4x2x64K measures the checksum pass plus the parity check
// of an intact stripe (the scrub path).
func BenchmarkVerify_4x2x64K(b *testing.B) {
	c := mustCodec(b, Geometry{Data: 4, Parity: 2, ChunkSize: 64 << 10})
	stripe, sums := encodedStripe(b, c, 3)
	b.SetBytes(int64(6 * 64 << 10))
	b.ReportAllocs()
	for b.Loop() {
		if bad, err := c.Verify(stripe, sums); bad != nil || err != nil {
			b.Fatal(bad, err)
		}
	}
}

func BenchmarkChecksum_64K(b *testing.B) {
	chunk := make([]byte, 64<<10)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		Checksum(chunk)
	}
}
