package store

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"basalt/pkg/disk"
	"basalt/pkg/pmem"
)

// BenchmarkRebuildOntoReplacement measures a rebuild onto a replacement
// drive file of a store on four drive files (3+1, default chunk and
// segment), unlimited and at the default rate, while one client reads
// 4 KiB blocks at random: the rebuild's drive I/O rate and the client's
// read latency before (degraded) and during it. A stripe rebuilt reads its
// four chunks and writes one: a fifth of the I/O is written. Run with
// -benchtime=1x.
func BenchmarkRebuildOntoReplacement(b *testing.B) {
	for _, rate := range []int64{-1, DefaultRebuildRate} {
		name := "unlimited"
		if rate > 0 {
			name = strconv.FormatInt(rate>>20, 10) + "MiBps"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				benchRebuild(b, rate)
			}
		})
	}
}

func benchRebuild(b *testing.B, rate int64) {
	const driveSize, data = 192 << 20, 96 << 20
	dir := b.TempDir()
	var drives []disk.Drive
	for i := range 4 {
		d, err := disk.OpenFile(filepath.Join(dir, "d"+strconv.Itoa(i)), driveSize)
		if err != nil {
			b.Fatal(err)
		}
		drives = append(drives, d)
	}
	region, err := pmem.OpenFile(filepath.Join(dir, "wbuf"), 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(Options{Drives: drives, Buffer: region, MetaDir: filepath.Join(dir, "meta")})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	v, err := s.CreateVolume("a", data)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < data; off += int64(len(buf)) {
		makeBlock(buf, uint64(off+1))
		if err := v.WriteAt(context.Background(), buf, off, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := s.FailDrive(2); err != nil {
		b.Fatal(err)
	}
	before := clientReads(b, v, data, func() bool { return false }, 2*time.Second)
	repl, err := disk.OpenFile(filepath.Join(dir, "new"), driveSize)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.ReplaceDrive(2, repl); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := s.StartRebuilder(RebuildOptions{BytesPerSecond: rate}); err != nil {
		b.Fatal(err)
	}
	during := clientReads(b, v, data, func() bool {
		st := s.RebuildStatus()
		return st.Passes > 0 && !st.Running
	}, 10*time.Minute)
	took := time.Since(start)
	st := s.RebuildStatus()
	if st.LastError != "" || s.Drives()[2].State != "healthy" {
		b.Fatalf("rebuild: %+v", st)
	}
	mbps := float64(st.BytesDone) / took.Seconds() / 1e6
	b.ReportMetric(mbps, "io_MB/s")
	b.ReportMetric(float64(st.BytesDone)/5/took.Seconds()/1e6, "written_MB/s")
	b.ReportMetric(before.p99.Seconds()*1e6, "p99_before_us")
	b.ReportMetric(during.p99.Seconds()*1e6, "p99_during_us")
	b.Logf("rebuild of %d segments: %d bytes of drive I/O in %v (%.0f MB/s, %.0f MB/s written to the replacement); "+
		"client 4 KiB reads: before (degraded) %d reads p50 %v p99 %v, during %d reads p50 %v p99 %v",
		st.SegmentsDone, st.BytesDone, took.Round(time.Millisecond), mbps, mbps/5, before.n, before.p50, before.p99,
		during.n, during.p50, during.p99)
}

type latencies struct {
	n        int
	p50, p99 time.Duration
}

// clientReads reads random blocks of v until done reports true (checked
// every 64 reads) or for at most limit, and returns the read latencies.
func clientReads(b *testing.B, v *Volume, size int64, done func() bool, limit time.Duration) latencies {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, BlockSize)
	var lat []time.Duration
	end := time.Now().Add(limit)
	for i := 0; ; i++ {
		if i%64 == 0 && (done() || time.Now().After(end)) {
			break
		}
		off := rng.Int64N(size/BlockSize) * BlockSize
		t0 := time.Now()
		if err := v.ReadAt(context.Background(), buf, off); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	if len(lat) == 0 {
		return latencies{}
	}
	return latencies{n: len(lat), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}
}
