package store

import (
	"testing"
	"time"
)

// BenchmarkWriteStaged compares, side by side in one run, 4 KiB writes over
// a 32 MiB range of a volume on memory drives:
//
//	go test ./pkg/store -run XXX -bench WriteStaged -benchtime 200000x
//
// WriteAt-memory-buffer: the copying mode of a cluster node today, WriteAt
// into a write buffer in process memory (pmem.Memory), the writer
// goroutine destaging. WriteStaged-writer: the same with staging by
// reference, the writer goroutine destaging; like a Raft group whose log
// is full, the loop waits while more than 16384 writes are outstanding
// (the 64 MiB buffer holds about as many).
// WriteAt-memory-buffer-call and WriteStaged-call: the write call alone
// (synchronous store, destaged by a Flush outside the timer every 4096
// writes). The caller's bytes are
// one buffer that never changes, which the contract allows to stage any
// number of times.
func BenchmarkWriteStaged(b *testing.B) {
	b.Run("WriteAt-memory-buffer", func(b *testing.B) {
		cfg := benchStagedConfig()
		cfg.memoryBuffer = true
		benchStagedWrites(b, newRig(b, cfg), false)
	})
	b.Run("WriteStaged-writer", func(b *testing.B) {
		cfg := benchStagedConfig()
		cfg.opts.StageByReference = true
		benchStagedWrites(b, newRig(b, cfg), true)
	})
	for _, staged := range []bool{false, true} {
		name := map[bool]string{false: "WriteAt-memory-buffer-call", true: "WriteStaged-call"}[staged]
		b.Run(name, func(b *testing.B) {
			cfg := benchStagedConfig()
			cfg.opts.StageByReference, cfg.memoryBuffer, cfg.opts.synchronous = staged, !staged, true
			benchStagingCalls(b, newRig(b, cfg), staged)
		})
	}
}

// benchStagingCalls times the write calls alone: the store is synchronous
// and a Flush outside the timer destages every 4096 writes.
func benchStagingCalls(b *testing.B, r *rig, staged bool) {
	v, err := r.s.CreateVolume("a", 32<<20)
	if err != nil {
		b.Fatal(err)
	}
	p := taggedBlocks(1)
	b.SetBytes(BlockSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%4096 == 4095 {
			b.StopTimer()
			if err := r.s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		off := int64(i%8192) * BlockSize
		if staged {
			err = v.WriteStaged(p, off, uint64(i+1))
		} else {
			err = v.WriteAt(ctx, p, off, 0)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// benchStagedConfig is the rig of the writer benchmarks: 64 KiB chunks (45
// data blocks a stripe), 32 stripes a segment, 64 MiB memory drives, a
// 64 MiB buffer or as much staged (StagedSize), the writer on its
// goroutine.
func benchStagedConfig() rigConfig {
	cfg := defaultRigConfig()
	cfg.bufferSize, cfg.driveSize = 64<<20, 64<<20
	cfg.opts = Options{ChunkSize: 64 << 10, SegmentStripes: 32, StagedSize: 64 << 20}
	return cfg
}

// benchStagedWrites writes b.N blocks with WriteAt or WriteStaged while the
// writer goroutine destages.
func benchStagedWrites(b *testing.B, r *rig, staged bool) {
	v, err := r.s.CreateVolume("a", 32<<20)
	if err != nil {
		b.Fatal(err)
	}
	p := taggedBlocks(1)
	b.SetBytes(BlockSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		off := int64(i%8192) * BlockSize
		if !staged {
			err = v.WriteAt(ctx, p, off, 0)
		} else {
			token := uint64(i + 1)
			for floor, ok := v.StagedFloor(); ok && floor+16384 < token; floor, ok = v.StagedFloor() {
				time.Sleep(20 * time.Microsecond) // the group waits for its log, leaving the CPU to the writer
			}
			err = v.WriteStaged(p, off, token)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := r.s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	st := r.s.Stats()
	b.ReportMetric(float64(b.N)/float64(st.Stripes), "writes/stripe")
	b.ReportMetric(float64(st.PaddingBlocks), "padding-blocks")
}
