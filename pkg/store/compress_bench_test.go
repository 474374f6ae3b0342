package store

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"basalt/pkg/compress"
)

// cpuTime returns the process's user and system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompression4K compares a volume without compression, with lz4
// and with zstd, side by side in one run: 4 KiB writes of generated text
// over a 32 MiB range on memory drives, timed until destaged (Flush), then
// 4 KiB reads of those blocks. It reports IOPS, the process's CPU time per
// I/O (writer, cleaner and caller together) and, for writes, the ratio
// achieved.
func BenchmarkCompression4K(b *testing.B) {
	const span = 8192 // blocks
	corpus := make([][]byte, 256)
	for i := range corpus {
		corpus[i] = make([]byte, BlockSize)
		corpusBlock(corpus[i], uint64(2*i+1))
	}
	for _, alg := range []compress.Algorithm{compress.None, compress.LZ4, compress.Zstd} {
		open := func(b *testing.B) *Volume {
			cfg := defaultRigConfig()
			cfg.bufferSize, cfg.driveSize = 64<<20, 64<<20
			r := newRig(b, cfg)
			v, err := r.s.CreateVolumeWith("a", span*BlockSize, VolumeOptions{Compression: alg})
			if err != nil {
				b.Fatal(err)
			}
			return v
		}
		b.Run("write/"+alg.String(), func(b *testing.B) {
			v := open(b)
			b.SetBytes(BlockSize)
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuTime(b)
			for i := range b.N {
				if err := v.WriteAt(context.Background(), corpus[i%len(corpus)], int64(i%span)*BlockSize, 0); err != nil {
					b.Fatal(err)
				}
			}
			if err := v.s.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			reportIOPS(b, start)
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			if logical, stored := v.CompressionStats(); stored > 0 {
				b.ReportMetric(float64(logical)/float64(stored), "ratio")
			}
		})
		b.Run("read/"+alg.String(), func(b *testing.B) {
			v := open(b)
			for lba := range span {
				if err := v.WriteAt(context.Background(), corpus[lba%len(corpus)], int64(lba)*BlockSize, 0); err != nil {
					b.Fatal(err)
				}
			}
			if err := v.s.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, BlockSize)
			rng := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(BlockSize)
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuTime(b)
			for range b.N {
				if err := v.ReadAt(context.Background(), buf, int64(rng.IntN(span))*BlockSize); err != nil {
					b.Fatal(err)
				}
			}
			reportIOPS(b, start)
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// TestCompressionRatio reports the ratio each algorithm achieves on a
// generated text corpus and on random data, and checks text compresses
// and random data is stored raw (ratio 1).
func TestCompressionRatio(t *testing.T) {
	for _, alg := range []compress.Algorithm{compress.LZ4, compress.Zstd} {
		for _, kind := range []string{"text", "random"} {
			cfg := defaultRigConfig()
			cfg.opts.synchronous = true
			r := newRig(t, cfg)
			v, err := r.s.CreateVolumeWith("a", 256*BlockSize, VolumeOptions{Compression: alg})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]uint64, 256)
			for lba := range want {
				want[lba] = uint64(2*lba + 1) // odd: text
				if kind == "random" {
					want[lba] = uint64(6*lba + 2) // even, not divisible by 3: random bytes (makeBlock)
				}
				writeCorpus(t, v, uint64(lba), want[lba])
				if lba%8 == 7 {
					r.s.w.work() // synchronous: the test runs the writer
				}
			}
			if err := r.s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			checkCorpus(t, v, want)
			logical, stored := v.CompressionStats()
			ratio := float64(logical) / float64(stored)
			t.Logf("%v on %s: %d bytes stored in %d, ratio %.2f", alg, kind, logical, stored, ratio)
			if (kind == "text" && ratio < 1.5) || (kind == "random" && ratio != 1) {
				t.Errorf("%v on %s: ratio %.2f", alg, kind, ratio)
			}
		}
	}
}
