package disk

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// engineDriveMakers are the FileDrive variants of the contract tests for
// each engine and wait mode.
func engineDriveMakers() []driveMaker {
	open := func(opts FileOptions) func(t *testing.T, size int64) Drive {
		return func(t *testing.T, size int64) Drive {
			return openEngine(t, filepath.Join(t.TempDir(), "drive"), size, opts)
		}
	}
	return []driveMaker{
		{"file-pread", open(FileOptions{Engine: EnginePread})},
		{"file-io_uring-eventfd", open(FileOptions{Engine: EngineURing, URingDepth: 4})},
		{"file-io_uring-blocking-wait", open(FileOptions{Engine: EngineURing, URingBlockingWait: true})},
		{"file-buffered-io_uring", func(t *testing.T, size int64) Drive {
			d, err := openFile(filepath.Join(t.TempDir(), "drive"), size, refuseDirect)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.startEngine(FileOptions{Engine: EngineURing}); err != nil {
				t.Fatal(err)
			}
			return d
		}},
	}
}

func openEngine(t *testing.T, path string, size int64, opts FileOptions) *FileDrive {
	t.Helper()
	d, err := OpenFileWith(path, size, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := opts.Engine
	if want == EngineAuto {
		want = EngineURing // this kernel has io_uring: the probe test checks
	}
	if d.Engine() != want {
		t.Fatalf("Engine() = %v, want %v", d.Engine(), want)
	}
	return d
}

// TestURingAvailableHere: the tests below run the io_uring engine; where
// the kernel refuses io_uring they would silently test pread twice.
func TestURingAvailableHere(t *testing.T) {
	q, err := newURingQueue(8, true)
	if err != nil {
		t.Skipf("no io_uring on this kernel: %v", err)
	}
	q.close()
	d := openEngine(t, filepath.Join(t.TempDir(), "drive"), 16*BlockSize, FileOptions{})
	defer d.Close()
}

// TestURingMatchesPread: writes through one engine read back identically
// through the other, from many goroutines at random offsets of one file.
func TestURingMatchesPread(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		t.Run(fmt.Sprintf("blocking-wait=%v", blocking), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "drive")
			const blocks = 512
			uring := openEngine(t, path, blocks*BlockSize,
				FileOptions{Engine: EngineURing, URingDepth: 8, URingBlockingWait: blocking})
			defer uring.Close()
			pread := openEngine(t, path, 0, FileOptions{Engine: EnginePread})
			defer pread.Close()
			crossCheck(t, uring, pread, blocks)
			crossCheck(t, pread, uring, blocks)
		})
	}
}

// crossCheck writes random blocks (1 to 4 at a time) with w from 32
// goroutines, each in its own stripe of the drive, and reads each back
// with r.
func crossCheck(t *testing.T, w, r *FileDrive, blocks int) {
	t.Helper()
	const workers = 32
	each := blocks / workers
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 20 {
				n := 1 + rng.IntN(4)
				off := int64(g*each+rng.IntN(each-n+1)) * BlockSize
				data := pattern(n*BlockSize, rng.Uint64())
				if k, err := w.WriteAt(data, off); err != nil || k != len(data) {
					errs <- fmt.Errorf("WriteAt(%d, %d) = %d, %w", len(data), off, k, err)
					return
				}
				got := AlignedBuffer(len(data))
				if k, err := r.ReadAt(got, off); err != nil || k != len(got) || !bytes.Equal(got, data) {
					errs <- fmt.Errorf("ReadAt(%d, %d) = %d, %v; equal %v", len(got), off, k, err, bytes.Equal(got, data))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestURingShortReadAtEOF: a file truncated behind the drive's back reads
// short; ReadAt reports how much it got and an error, as with pread.
func TestURingShortReadAtEOF(t *testing.T) {
	for _, engine := range []IOEngine{EngineURing, EnginePread} {
		t.Run(engine.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "drive")
			d := openEngine(t, path, 8*BlockSize, FileOptions{Engine: engine})
			defer d.Close()
			data := pattern(8*BlockSize, 3)
			mustWrite(t, d, data, 0)
			if err := os.Truncate(path, 6*BlockSize); err != nil {
				t.Fatal(err)
			}
			got := AlignedBuffer(4 * BlockSize)
			n, err := d.ReadAt(got, 4*BlockSize)
			if n != 2*BlockSize || !errors.Is(err, ErrIO) || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("ReadAt across EOF = %d, %v; want %d, ErrIO and ErrUnexpectedEOF", n, err, 2*BlockSize)
			}
			if !bytes.Equal(got[:n], data[4*BlockSize:6*BlockSize]) {
				t.Fatal("the bytes before EOF differ")
			}
			if n, err := d.ReadAt(got[:2*BlockSize], 6*BlockSize); n != 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("ReadAt at EOF = %d, %v", n, err)
			}
		})
	}
}

// TestURingQueueErrorsComeBackAsResults: requests the kernel rejects
// complete with a negated errno instead of hanging, and the queue goes on
// working.
func TestURingQueueErrorsComeBackAsResults(t *testing.T) {
	q, err := newURingQueue(4, true)
	if err != nil {
		t.Skip(err)
	}
	defer q.close()
	f, err := os.CreateTemp(t.TempDir(), "file")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ro, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	buf := AlignedBuffer(BlockSize)
	cases := []struct {
		name string
		op   uint8
		fd   int32
		off  int64
		want syscall.Errno
	}{
		{"negative offset", uringOpRead, int32(f.Fd()), -BlockSize, syscall.EINVAL},
		{"closed descriptor", uringOpRead, 1 << 20, 0, syscall.EBADF},
		{"write to a read-only descriptor", uringOpWrite, int32(ro.Fd()), 0, syscall.EBADF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := q.do(c.op, c.fd, buf, c.off)
			if err != nil || syscall.Errno(-res) != c.want {
				t.Fatalf("do = %d (%v), %v; want -%d (%v)", res, syscall.Errno(-res), err, int(c.want), c.want)
			}
		})
	}
	if _, err := f.Write(pattern(BlockSize, 1)); err != nil {
		t.Fatal(err)
	}
	if res, err := q.do(uringOpRead, int32(f.Fd()), buf, 0); err != nil || res != BlockSize {
		t.Fatalf("read after the errors = %d, %v", res, err)
	}
}

// TestURingCloseWithRequestsInFlight: Close during a storm of reads, with
// more goroutines than slots, returns; every request either completes or
// fails with ErrClosed, and nothing hangs.
func TestURingCloseWithRequestsInFlight(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		t.Run(fmt.Sprintf("blocking-wait=%v", blocking), func(t *testing.T) {
			const blocks = 256
			d := openEngine(t, filepath.Join(t.TempDir(), "drive"), blocks*BlockSize,
				FileOptions{Engine: EngineURing, URingDepth: 4, URingBlockingWait: blocking})
			data := pattern(blocks*BlockSize, 9)
			mustWrite(t, d, data, 0)
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			started := make(chan struct{}, 32)
			for g := range 32 {
				wg.Go(func() {
					buf := AlignedBuffer(BlockSize)
					for i := 0; ; i++ {
						off := int64((g*31+i)%blocks) * BlockSize
						n, err := d.ReadAt(buf, off)
						if i == 0 {
							started <- struct{}{}
						}
						switch {
						case errors.Is(err, ErrClosed):
							errs <- nil
							return
						case err != nil || n != BlockSize || !bytes.Equal(buf, data[off:off+BlockSize]):
							errs <- fmt.Errorf("ReadAt(%d) = %d, %v", off, n, err)
							return
						}
					}
				})
			}
			for range 8 {
				<-started
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestOpenFileFallsBackToPread: EnginePread forces pread; with a kernel
// that refuses io_uring, EngineAuto falls back and EngineURing fails.
func TestOpenFileFallsBackToPread(t *testing.T) {
	saved := startURingQueue
	defer func() { startURingQueue = saved }()
	startURingQueue = func(int, bool) (*uringQueue, error) {
		return nil, fmt.Errorf("%w: io_uring_setup: %w", ErrURingUnavailable, syscall.EPERM)
	}
	dir := t.TempDir()
	d := openEngine(t, filepath.Join(dir, "auto"), 16*BlockSize, FileOptions{Engine: EnginePread})
	defer d.Close()
	auto, err := OpenFileWith(filepath.Join(dir, "auto"), 0, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer auto.Close()
	if auto.Engine() != EnginePread {
		t.Fatalf("EngineAuto without io_uring: Engine() = %v", auto.Engine())
	}
	mustWrite(t, auto, pattern(BlockSize, 5), BlockSize)
	if got := mustRead(t, d, BlockSize, BlockSize); !bytes.Equal(got, pattern(BlockSize, 5)) {
		t.Fatal("fallback write not read back")
	}
	_, err = OpenFileWith(filepath.Join(dir, "auto"), 0, FileOptions{Engine: EngineURing})
	if !errors.Is(err, ErrURingUnavailable) || !errors.Is(err, syscall.EPERM) {
		t.Fatalf("EngineURing without io_uring: %v, want ErrURingUnavailable", err)
	}
	if _, err := OpenFileWith(filepath.Join(dir, "auto"), 0, FileOptions{Engine: 9}); err == nil {
		t.Fatal("unknown engine accepted")
	}
}

func TestOpenFileWithRejectsBadDepth(t *testing.T) {
	for _, depth := range []int{-1, 4097} {
		_, err := OpenFileWith(filepath.Join(t.TempDir(), "d"), 16*BlockSize,
			FileOptions{Engine: EngineURing, URingDepth: depth})
		if err == nil {
			t.Errorf("depth %d accepted", depth)
		}
	}
}

func TestIOEngineString(t *testing.T) {
	for e, want := range map[IOEngine]string{EngineAuto: "auto", EnginePread: "pread",
		EngineURing: "io_uring", 7: "IOEngine(7)"} {
		if e.String() != want {
			t.Errorf("%d.String() = %q, want %q", e, e.String(), want)
		}
	}
}

// TestURingReadAllocatesNothing: the hot path allocates nothing per I/O.
func TestURingReadAllocatesNothing(t *testing.T) {
	d := openEngine(t, filepath.Join(t.TempDir(), "drive"), 16*BlockSize, FileOptions{Engine: EngineURing})
	defer d.Close()
	buf := AlignedBuffer(BlockSize)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := d.ReadAt(buf, 3*BlockSize); err != nil {
			t.Fatal(err)
		}
		if _, err := d.WriteAt(buf, 5*BlockSize); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per read and write", allocs)
	}
}

// BenchmarkFileDriveRead4K: one goroutine's 4 KiB reads, per engine: the
// latency and CPU of one request.
func BenchmarkFileDriveRead4K(b *testing.B) {
	for _, engine := range []IOEngine{EnginePread, EngineURing} {
		b.Run(engine.String(), func(b *testing.B) {
			d, err := OpenFileWith(filepath.Join(b.TempDir(), "drive"), 1<<20, FileOptions{Engine: engine})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			buf := AlignedBuffer(BlockSize)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := d.ReadAt(buf, int64(i%256)*BlockSize); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
