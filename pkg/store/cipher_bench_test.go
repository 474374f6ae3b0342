package store

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// BenchmarkEncryption compares a volume in clear with an aes-xts-256 one,
// side by side in one run: 4 KiB writes at random LBAs (timed until
// destaged) and 4 KiB reads at random LBAs of destaged blocks, on drive
// files as BenchmarkRandomWrite4K has them (sparse, 128 MiB each, a 64 MiB
// volume). Each reports IOPS and the process's CPU time per I/O (user +
// system, every goroutine: the writer's encryption included).
//
//	go test ./pkg/store -run XXX -bench Encryption -benchtime 100000x
func BenchmarkEncryption(b *testing.B) {
	key := make([]byte, XTSKeySize)
	for i := range key {
		key[i] = byte(i*7 + 1)
	}
	for _, enc := range []struct {
		name string
		o    VolumeOptions
	}{{"none", VolumeOptions{}}, {EncryptionAESXTS256, VolumeOptions{Encryption: EncryptionAESXTS256, Key: key}}} {
		for _, op := range []string{"write", "read"} {
			b.Run(op+"/"+enc.name, func(b *testing.B) { encryptionOps(b, op == "write", enc.o) })
		}
	}
}

const encBenchVolume = 64 << 20

func encryptionOps(b *testing.B, write bool, o VolumeOptions) {
	s := openBenchStoreSized(b, Options{}, 128<<20)
	v, err := s.CreateVolumeWith("bench", encBenchVolume, o)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if !write {
		fill := make([]byte, 1<<20)
		for i := range fill {
			fill[i] = byte(i * 31)
		}
		for off := int64(0); off < encBenchVolume; off += int64(len(fill)) {
			if err := v.WriteAt(ctx, fill, off, 0); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	blocks := uint64(encBenchVolume / BlockSize)
	cpu0 := processCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	parallelOps(b, func(rng *rand.Rand, buf []byte) error {
		off := int64(rng.Uint64N(blocks)) * BlockSize
		if write {
			return v.WriteAt(ctx, buf, off, 0)
		}
		return v.ReadAt(ctx, buf, off)
	})
	if write {
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	reportIOPS(b, start)
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
}

// processCPU returns the process's CPU time so far (user + system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSealSlot is the cipher alone: one 4096-byte slot encrypted and
// its checksum taken, as the writer does per block (no allocation).
func BenchmarkSealSlot(b *testing.B) {
	c, err := newSlotCipher(make([]byte, XTSKeySize))
	if err != nil {
		b.Fatal(err)
	}
	src, dst := make([]byte, BlockSize), make([]byte, BlockSize)
	b.SetBytes(BlockSize)
	b.ReportAllocs()
	for i := range b.N {
		c.seal(dst, src, uint64(i))
	}
}

// BenchmarkOpenSlot is the read side: one 4096-byte slot decrypted in
// place, as a read of an encrypted block does.
func BenchmarkOpenSlot(b *testing.B) {
	c, err := newSlotCipher(make([]byte, XTSKeySize))
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, BlockSize)
	b.SetBytes(BlockSize)
	b.ReportAllocs()
	for i := range b.N {
		c.open(buf, buf, uint64(i))
	}
}
