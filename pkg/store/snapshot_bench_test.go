package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/disk"
)

// The snapshot benchmarks, on the drive files of the other benchmarks
// (sparse, bench_test.go), side by side in one run:
//
//	go test ./pkg/store -run XXX -bench 'Snapshot' -benchtime 20x
//
// BenchmarkSnapshotCreateUnderLoad: the latency of CreateSnapshot on a
// 4 GiB volume with snapBenchFill bytes written, while 8 goroutines write
// 4 KiB blocks at random without pause (p50 and max, ms).
// BenchmarkSnapshotIO: random 4 KiB writes, then reads, on a volume with no
// snapshot and with 10 (each taken after a tenth of the filled range was
// overwritten), IOPS.
const (
	snapBenchVolume = 4 << 30
	snapBenchFill   = 64 << 20
)

// fillVolume writes the first n bytes of v in 1 MiB writes and destages them.
func fillVolume(b *testing.B, s *Store, v *Volume, n int64) {
	b.Helper()
	buf := disk.AlignedBuffer(1 << 20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for off := int64(0); off < n; off += int64(len(buf)) {
		if err := v.WriteAt(context.Background(), buf, off, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkSnapshotCreateUnderLoad(b *testing.B) {
	s := openBenchStoreSized(b, Options{}, benchDriveSize)
	v, err := s.CreateVolume("bench", snapBenchVolume)
	if err != nil {
		b.Fatal(err)
	}
	fillVolume(b, s, v, snapBenchFill)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			buf := disk.AlignedBuffer(BlockSize)
			for {
				select {
				case <-stop:
					return
				default:
				}
				off := int64(rng.Uint64N(snapBenchFill/BlockSize)) * BlockSize
				if err := v.WriteAt(context.Background(), buf, off, 0); err != nil {
					b.Error(err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the load is on
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start, w0 := time.Now(), writes.Load()
	for i := range b.N {
		t0 := time.Now()
		if _, err := s.CreateSnapshot(context.Background(), "bench", fmt.Sprintf("s%d", i)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(20 * time.Millisecond)
	}
	b.StopTimer()
	elapsed, done := time.Since(start), writes.Load()-w0
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-ms")
	b.ReportMetric(float64(done)/elapsed.Seconds(), "load-IOPS")
}

func BenchmarkSnapshotIO(b *testing.B) {
	for _, snaps := range []int{0, 10} {
		b.Run(fmt.Sprintf("snapshots=%d", snaps), func(b *testing.B) {
			s := openBenchStoreSized(b, Options{}, benchDriveSize)
			v, err := s.CreateVolume("bench", snapBenchVolume)
			if err != nil {
				b.Fatal(err)
			}
			fillVolume(b, s, v, snapBenchFill)
			for i := range snaps {
				if _, err := s.CreateSnapshot(context.Background(), "bench", fmt.Sprintf("s%d", i)); err != nil {
					b.Fatal(err)
				}
				tenth := int64(snapBenchFill/10) &^ (1<<20 - 1) // whole 1 MiB writes
				buf := disk.AlignedBuffer(1 << 20)
				for off := int64(i) * tenth; off+int64(len(buf)) <= int64(i+1)*tenth; off += int64(len(buf)) {
					if err := v.WriteAt(context.Background(), buf, off, 0); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := s.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			blocks := uint64(snapBenchFill / BlockSize)
			b.Run("write", func(b *testing.B) {
				b.ReportAllocs()
				start := time.Now()
				parallelOps(b, func(rng *rand.Rand, buf []byte) error {
					return v.WriteAt(context.Background(), buf, int64(rng.Uint64N(blocks))*BlockSize, 0)
				})
				if err := s.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
				reportIOPS(b, start)
			})
			b.Run("read", func(b *testing.B) {
				b.ReportAllocs()
				start := time.Now()
				parallelOps(b, func(rng *rand.Rand, buf []byte) error {
					return v.ReadAt(context.Background(), buf, int64(rng.Uint64N(blocks))*BlockSize)
				})
				reportIOPS(b, start)
			})
		})
	}
}
