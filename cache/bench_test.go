package cache_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"basalt/cache"
	"basalt/pkg/pmem"
)

const benchRegionSize = 64 << 20

// benchRegions returns the regions to measure on: the Fake, and a file on
// tmpfs (/dev/shm) when there is one, else in the test's temporary directory.
func benchRegions(b *testing.B) map[string]func(b *testing.B) pmem.Region {
	return map[string]func(b *testing.B) pmem.Region{
		"region=fake": func(b *testing.B) pmem.Region { return pmem.NewFake(benchRegionSize, 1) },
		"region=file": func(b *testing.B) pmem.Region {
			dir := b.TempDir()
			if info, err := os.Stat("/dev/shm"); err == nil && info.IsDir() {
				if shm, err := os.MkdirTemp("/dev/shm", "basalt-bench-"); err == nil {
					b.Cleanup(func() { os.RemoveAll(shm) })
					dir = shm
				}
			}
			r, err := pmem.OpenFile(filepath.Join(dir, "buffer"), benchRegionSize)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { r.Close() })
			return r
		},
	}
}

// benchmarkAppend appends payloadSize-byte records, releasing every 256th
// record and all before it, as a destager that keeps up would.
func benchmarkAppend(b *testing.B, region pmem.Region, payloadSize int) {
	buf, err := cache.Open(region, cache.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("mode: %s", buf.Stats().Mode)
	header, data := make([]byte, 64), make([]byte, payloadSize-64)
	ctx := context.Background()
	appendOne := func() {
		seq, err := buf.Append(ctx, 1, header, data)
		if err != nil {
			b.Fatal(err)
		}
		if seq%256 == 0 {
			if err := buf.Release(seq); err != nil {
				b.Fatal(err)
			}
		}
	}
	for range 1024 { // warm-up: the entry ring reaches its steady size
		appendOne()
	}
	b.SetBytes(int64(payloadSize))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		appendOne()
	}
}

func BenchmarkAppend4K(b *testing.B) {
	for name, open := range benchRegions(b) {
		b.Run(name, func(b *testing.B) { benchmarkAppend(b, open(b), 4096) })
	}
}

// BenchmarkAppend4KParallel appends from GOMAXPROCS goroutines at once.
func BenchmarkAppend4KParallel(b *testing.B) {
	for name, open := range benchRegions(b) {
		b.Run(name, func(b *testing.B) {
			buf, err := cache.Open(open(b), cache.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(4096)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				payload := make([]byte, 4096)
				for pb.Next() {
					seq, err := buf.Append(context.Background(), 1, payload)
					if err != nil {
						b.Fatal(err)
					}
					if seq%256 == 0 && seq > 1024 {
						if err := buf.Release(seq - 1024); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		})
	}
}

func BenchmarkRead4K(b *testing.B) {
	buf, _ := openFake(b, 1<<20, 1)
	seq := mustAppend(b, buf, 1, make([]byte, 4096))
	dst := make([]byte, 0, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, _, err := buf.Read(seq, dst); err != nil {
			b.Fatal(err)
		}
	}
}
