package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/disk"
)

// The benchmarks compare the store with the drive files it sits on, side by
// side in one run:
//
//	go test ./pkg/store -run XXX -bench 'RandomWrite4K|RandomRead4K' -benchtime 200000x
//
// Store: 4 drive files of benchDriveSize in the test's temporary directory
// (O_DIRECT where the filesystem allows), 3+1 stripes of 256 KiB chunks (the defaults),
// the write buffer on a file in /dev/shm when it exists (tmpfs: msync
// persistence, as a development node runs) or in the temporary directory.
// Raw: the same kind of files, fully written first, 4 KiB O_DIRECT I/O at
// random offsets of random files from benchQueueDepth goroutines. Fio: fio
// with io_uring, O_DIRECT, the same files and queue depth (skipped when fio
// is not installed). Each reports IOPS. The drives' bandwidth ceilings,
// for the store's stripe writes and for the cleaner's reads beside them:
// BenchmarkFioSequentialWrite1M and BenchmarkFioMixed1M (MiB/s).
const (
	benchDriveSize  = 512 << 20
	benchDrives     = 4
	benchVolumeSize = 768 << 20
	benchBufferSize = 128 << 20
	benchQueueDepth = 32
)

func benchTempDir(b *testing.B) string {
	b.Helper()
	return b.TempDir()
}

// benchBufferPath returns where the write-buffer file goes.
func benchBufferPath(b *testing.B) string {
	if info, err := os.Stat("/dev/shm"); err == nil && info.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "basalt-bench-")
		if err == nil {
			b.Cleanup(func() { _ = os.RemoveAll(dir) })
			return filepath.Join(dir, "buffer")
		}
	}
	return filepath.Join(benchTempDir(b), "buffer")
}

// openBenchStore opens a store on drive files written in full first, as
// the raw and fio baselines' files are: the filesystem allocates nothing
// during the run, as on a block device.
func openBenchStore(b *testing.B, opts Options) *Store {
	return openBenchStoreOn(b, opts, benchDriveSize, true)
}

// openBenchStoreSized opens a store on fresh, sparse drive files.
func openBenchStoreSized(b *testing.B, opts Options, driveSize int64) *Store {
	return openBenchStoreOn(b, opts, driveSize, false)
}

func openBenchStoreOn(b *testing.B, opts Options, driveSize int64, prewrite bool) *Store {
	b.Helper()
	dir := benchTempDir(b)
	p := Paths{Buffer: benchBufferPath(b), BufferSize: benchBufferSize, MetaDir: filepath.Join(dir, "meta"),
		DriveSize: driveSize}
	for i := range benchDrives {
		path := filepath.Join(dir, fmt.Sprintf("drive%d", i))
		if prewrite {
			writeFull(b, path, driveSize).Close()
		}
		p.Drives = append(p.Drives, path)
	}
	s, err := OpenPaths(p, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// parallelOps runs b.N calls of op from benchQueueDepth goroutines and
// reports IOPS.
func parallelOps(b *testing.B, op func(rng *rand.Rand, buf []byte) error) {
	b.Helper()
	var seed atomic.Uint64
	b.SetParallelism(max(1, benchQueueDepth/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 1))
		buf := disk.AlignedBuffer(BlockSize)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		for pb.Next() {
			if err := op(rng, buf); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func reportIOPS(b *testing.B, start time.Time) {
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
}

// BenchmarkRandomWrite4K: 4 KiB writes at random LBAs of a volume, timed
// until everything is destaged to the drives (Flush at the end), so the
// figure is sustained, not the write buffer's alone.
func BenchmarkRandomWrite4K(b *testing.B) { randomWrites(b, openBenchStore(b, Options{})) }

// BenchmarkRandomWrite4KSparseFiles is BenchmarkRandomWrite4K on fresh,
// sparse drive files: every stripe lands where the filesystem has to
// allocate blocks first (ext4 takes about 1.7 times as long per byte here).
func BenchmarkRandomWrite4KSparseFiles(b *testing.B) {
	randomWrites(b, openBenchStoreSized(b, Options{}, benchDriveSize))
}

// randomWrites measures 4 KiB writes at random LBAs of a new volume of s.
func randomWrites(b *testing.B, s *Store) {
	v, err := s.CreateVolume("bench", benchVolumeSize)
	if err != nil {
		b.Fatal(err)
	}
	blocks := uint64(benchVolumeSize / BlockSize)
	rd0, wr0 := processIO(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	parallelOps(b, func(rng *rand.Rand, buf []byte) error {
		return v.WriteAt(context.Background(), buf, int64(rng.Uint64N(blocks))*BlockSize, 0)
	})
	if err := s.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	reportIOPS(b, start)
	rd1, wr1 := processIO(b)
	b.ReportMetric(float64(rd1-rd0+wr1-wr0)/(1<<20)/time.Since(start).Seconds(), "driveMiB/s")
	st := s.Stats()
	b.ReportMetric(st.WriteAmplification, "WA")
	if st.DestagedBlocks > 0 {
		b.ReportMetric(100*float64(st.PaddingBlocks)/float64(st.DestagedBlocks+st.PaddingBlocks), "pad%")
	}
}

// BenchmarkRandomRead4K: 4 KiB reads at random LBAs of a volume whose data
// is all destaged.
func BenchmarkRandomRead4K(b *testing.B) { randomReads(b, openBenchStore(b, Options{})) }

// randomReads fills a 256 MiB volume of s, destages it, and measures 4 KiB
// reads at random LBAs.
func randomReads(b *testing.B, s *Store) {
	const size = 256 << 20
	v, err := s.CreateVolume("bench", size)
	if err != nil {
		b.Fatal(err)
	}
	fillVolume(b, s, v, size)
	blocks := uint64(size / BlockSize)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	parallelOps(b, func(rng *rand.Rand, buf []byte) error {
		return v.ReadAt(context.Background(), buf, int64(rng.Uint64N(blocks))*BlockSize)
	})
	reportIOPS(b, start)
}

// rawFiles creates benchDrives drive files, fully written so that random
// writes do not allocate, and opens them as drives.
func rawFiles(b *testing.B) ([]*disk.FileDrive, []string) {
	b.Helper()
	dir := benchTempDir(b)
	var drives []*disk.FileDrive
	var paths []string
	for i := range benchDrives {
		path := filepath.Join(dir, fmt.Sprintf("raw%d", i))
		d := writeFull(b, path, benchDriveSize)
		b.Cleanup(func() { _ = d.Close() })
		drives, paths = append(drives, d), append(paths, path)
	}
	if !drives[0].Direct() {
		b.Log("the filesystem refuses O_DIRECT: raw I/O is buffered")
	}
	return drives, paths
}

// writeFull creates a drive file of size bytes and writes all of it, so
// that later writes do not allocate.
func writeFull(b *testing.B, path string, size int64) *disk.FileDrive {
	b.Helper()
	d, err := disk.OpenFile(path, size)
	if err != nil {
		b.Fatal(err)
	}
	fill := disk.AlignedBuffer(4 << 20)
	for off := int64(0); off < size; off += int64(len(fill)) {
		if _, err := d.WriteAt(fill[:min(int64(len(fill)), size-off)], off); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	return d
}

func rawRandom(b *testing.B, write bool) {
	drives, _ := rawFiles(b)
	driveOps(b, drives, write)
}

// driveOps measures 4 KiB writes or reads at random offsets of drives.
func driveOps(b *testing.B, drives []*disk.FileDrive, write bool) {
	blocks := uint64(benchDriveSize / BlockSize)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	parallelOps(b, func(rng *rand.Rand, buf []byte) error {
		d := drives[rng.IntN(len(drives))]
		off := int64(rng.Uint64N(blocks)) * BlockSize
		var err error
		if write {
			_, err = d.WriteAt(buf, off)
		} else {
			_, err = d.ReadAt(buf, off)
		}
		return err
	})
	reportIOPS(b, start)
}

// BenchmarkRawRandomWrite4K writes 4 KiB blocks straight to the drive files
// with O_DIRECT: the baseline for BenchmarkRandomWrite4K.
func BenchmarkRawRandomWrite4K(b *testing.B) { rawRandom(b, true) }

// BenchmarkRawRandomRead4K reads 4 KiB blocks straight from the drive files
// with O_DIRECT: the baseline for BenchmarkRandomRead4K.
func BenchmarkRawRandomRead4K(b *testing.B) { rawRandom(b, false) }

func fioRandom(b *testing.B, rw string) { runFio(b, rw, "4k", benchQueueDepth) }

// runFio runs fio on the raw files for 5 seconds and reports its IOPS and
// MiB/s.
func runFio(b *testing.B, rw, bs string, qd int) {
	if _, err := exec.LookPath("fio"); err != nil {
		b.Skip("fio is not installed")
	}
	_, paths := rawFiles(b)
	b.ResetTimer()
	out, err := exec.Command("fio", "--name=raw", "--filename="+strings.Join(paths, ":"),
		fmt.Sprintf("--size=%d", benchDrives*benchDriveSize), "--ioengine=io_uring", "--direct=1",
		"--rw="+rw, "--bs="+bs, fmt.Sprintf("--iodepth=%d", qd), "--runtime=5", "--time_based",
		"--output-format=json").Output()
	if err != nil {
		b.Skipf("fio: %v", err)
	}
	type side struct {
		IOPS float64 `json:"iops"`
		BW   float64 `json:"bw"` // KiB/s
	}
	var result struct {
		Jobs []struct {
			Read  side `json:"read"`
			Write side `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &result); err != nil || len(result.Jobs) == 0 {
		b.Fatalf("fio output: %v", err)
	}
	job := result.Jobs[0]
	b.ReportMetric(job.Read.IOPS+job.Write.IOPS, "IOPS")
	b.ReportMetric((job.Read.BW+job.Write.BW)/1024, "MiB/s")
}

// BenchmarkFioSequentialWrite1M is the drive files' bandwidth ceiling for
// the store's stripe writes: fio writing 1 MiB sequentially at queue depth
// 8. Compare BenchmarkRandomWrite4K's driveMiB/s (bytes the store moved to
// and from the drives per second) with it.
func BenchmarkFioSequentialWrite1M(b *testing.B) { runFio(b, "write", "1m", 8) }

// BenchmarkFioMixed1M is the ceiling once the cleaner runs: fio reading
// and writing 1 MiB at once (half each, sequential streams, queue depth 8).
func BenchmarkFioMixed1M(b *testing.B) { runFio(b, "rw", "1m", 8) }

// BenchmarkFioRandomWrite4K runs fio (io_uring, O_DIRECT) on the same kind
// of files: 4 KiB random writes, queue depth benchQueueDepth, 5 seconds.
func BenchmarkFioRandomWrite4K(b *testing.B) { fioRandom(b, "randwrite") }

// BenchmarkFioRandomRead4K is fio's random-read baseline.
func BenchmarkFioRandomRead4K(b *testing.B) { fioRandom(b, "randread") }

// BenchmarkOverwriteAtFill fills a volume to a share of the store's
// capacity (4 drive files of 160 MiB, written in full first, 3+1 stripes of 64 KiB chunks, 3 MiB
// segments), overwrites it twice over at random to reach the steady state
// and destages everything, then measures b.N more random 4 KiB overwrites
// (until destaged): IOPS and the write amplification at each fill, for each
// cleaning policy. Run it with a fixed count (-benchtime 50000x): the
// cleaner's work comes in bursts, and a small b.N measures one burst.
//
// skew=uniform writes every block alike; skew=80/20 sends 80% of the
// writes to 20% of the blocks (hot and cold data), where cost-benefit
// cleaning is expected to beat greedy.
func BenchmarkOverwriteAtFill(b *testing.B) {
	for _, fill := range []int{50, 70, 85} {
		for _, skewed := range []bool{false, true} {
			name := fmt.Sprintf("fill=%d/skew=uniform", fill)
			if skewed {
				name = fmt.Sprintf("fill=%d/skew=80-20", fill)
			}
			b.Run(name, func(b *testing.B) {
				for _, policy := range []GCPolicy{GCGreedy, GCCostBenefit} {
					b.Run(policy.String(), func(b *testing.B) { benchmarkOverwrite(b, fill, skewed, policy) })
				}
			})
		}
	}
}

// pickLBA returns a random LBA of blocks, 80% of them in the first fifth
// when skewed.
func pickLBA(rng *rand.Rand, blocks uint64, skewed bool) uint64 {
	if skewed && rng.IntN(10) < 8 {
		return rng.Uint64N(max(1, blocks/5))
	}
	return rng.Uint64N(blocks)
}

func benchmarkOverwrite(b *testing.B, fill int, skewed bool, policy GCPolicy) {
	s := openBenchStoreOn(b, Options{GCPolicy: policy, ChunkSize: 64 << 10, SegmentStripes: 16}, 160<<20, true)
	blocks := uint64(s.Stats().CapacityBytes/BlockSize) * uint64(fill) / 100
	v, err := s.CreateVolume("bench", int64(blocks)*BlockSize)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for off := int64(0); off < int64(blocks)*BlockSize; off += int64(len(chunk)) {
		n := min(int64(len(chunk)), int64(blocks)*BlockSize-off)
		if err := v.WriteAt(context.Background(), chunk[:n], off, 0); err != nil {
			b.Fatal(err)
		}
	}
	// Warm up to the steady state: overwrite the volume once.
	warm := func(rng *rand.Rand, buf []byte) error {
		return v.WriteAt(context.Background(), buf, int64(pickLBA(rng, blocks, skewed))*BlockSize, 0)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	buf := make([]byte, BlockSize)
	for range 2 * blocks {
		if err := warm(rng, buf); err != nil {
			b.Fatal(err)
		}
	}
	// The timed run starts from an empty write buffer: its final Flush
	// destages what the run wrote, not the warm-up's backlog as well.
	if err := s.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	before := s.Stats()
	rd0, wr0 := processIO(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	parallelOps(b, warm)
	if err := s.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	reportIOPS(b, start)
	after := s.Stats()
	destaged := after.DestagedBlocks - before.DestagedBlocks
	relocated := after.RelocatedBlocks - before.RelocatedBlocks
	if destaged > 0 {
		b.ReportMetric(float64(destaged+relocated)/float64(destaged), "WA")
	}
	rd1, wr1 := processIO(b)
	b.ReportMetric(float64(after.PaddingBlocks-before.PaddingBlocks)/float64(b.N)*100, "pad%")
	b.ReportMetric(float64(rd1-rd0)/float64(b.N)/1024, "readKiB/op")
	b.ReportMetric(float64(wr1-wr0)/float64(b.N)/1024, "writeKiB/op")
}

// processIO returns the bytes this process has read from and written to
// block devices (/proc/self/io; O_DIRECT I/O counts there as it happens).
func processIO(b *testing.B) (read, written uint64) {
	b.Helper()
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, value, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseUint(value, 10, 64)
		switch name {
		case "read_bytes":
			read = n
		case "write_bytes":
			written = n
		}
	}
	return read, written
}

// BenchmarkWriteAt4KMemory is the write path's CPU cost on memory drives
// and a fake persistent region: 4 KiB writes over a 32 MiB range (so the
// destager and the cleaner run as well).
func BenchmarkWriteAt4KMemory(b *testing.B) {
	cfg := defaultRigConfig()
	cfg.bufferSize, cfg.driveSize = 64<<20, 64<<20
	r := newRig(b, cfg)
	v, err := r.s.CreateVolume("a", 32<<20)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, BlockSize)
	b.SetBytes(BlockSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := v.WriteAt(context.Background(), buf, int64(i%8192)*BlockSize, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadAt4KMemory is the read path's CPU cost for destaged blocks
// on memory drives.
func BenchmarkReadAt4KMemory(b *testing.B) {
	cfg := defaultRigConfig()
	cfg.driveSize = 64 << 20
	r := newRig(b, cfg)
	v, err := r.s.CreateVolume("a", 16<<20)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < 16<<20; off += 1 << 20 {
		if err := v.WriteAt(context.Background(), buf, off, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := r.s.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	buf = buf[:BlockSize]
	b.SetBytes(BlockSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := v.ReadAt(context.Background(), buf, int64(i*7919%4096)*BlockSize); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecovery measures Open on a volume filled with sequential 1 MiB
// writes (BASALT_RECOVERY_GIB GiB, default 1), on file drives: after a
// clean Close (the checkpoint is loaded), and after a Close that took no
// checkpoint (every stripe summary is read and replayed, the worst case
// recovery meets when CheckpointStripes is as large as the volume).
func BenchmarkRecovery(b *testing.B) {
	gib, _ := strconv.Atoi(os.Getenv("BASALT_RECOVERY_GIB"))
	gib = max(gib, 1)
	for _, replay := range []bool{false, true} {
		b.Run(fmt.Sprintf("replay=%v", replay), func(b *testing.B) {
			dir := benchTempDir(b)
			p := Paths{Buffer: benchBufferPath(b), BufferSize: benchBufferSize, MetaDir: filepath.Join(dir, "meta"),
				DriveSize: int64(gib)<<29 + 64<<20}
			for i := range benchDrives {
				p.Drives = append(p.Drives, filepath.Join(dir, fmt.Sprintf("drive%d", i)))
			}
			opts := Options{CheckpointStripes: 1 << 30, CheckpointInterval: time.Hour, noCloseCheckpoint: replay}
			s, err := OpenPaths(p, opts)
			if err != nil {
				b.Fatal(err)
			}
			size := int64(gib) << 30
			v, err := s.CreateVolume("big", size)
			if err != nil {
				b.Fatal(err)
			}
			chunk := make([]byte, 1<<20)
			for off := int64(0); off < size; off += int64(len(chunk)) {
				if err := v.WriteAt(context.Background(), chunk, off, 0); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				s, err = OpenPaths(p, opts)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/open")
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
