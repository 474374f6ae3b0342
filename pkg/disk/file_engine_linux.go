package disk

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
)

// IOEngine selects how a FileDrive issues its reads and writes.
type IOEngine uint8

const (
	// EngineAuto uses io_uring where the kernel allows it and pread/pwrite
	// otherwise (io_uring_setup refused with EPERM or ENOSYS in containers,
	// disabled by sysctl, Linux before 5.6).
	EngineAuto IOEngine = iota
	// EnginePread issues blocking pread/pwrite calls: one OS thread per
	// request in flight.
	EnginePread
	// EngineURing submits through one io_uring per drive and fails to open
	// the drive (with ErrURingUnavailable) where the kernel refuses it.
	EngineURing
)

// String returns "auto", "pread" or "io_uring".
func (e IOEngine) String() string {
	switch e {
	case EngineAuto:
		return "auto"
	case EnginePread:
		return "pread"
	case EngineURing:
		return "io_uring"
	}
	return fmt.Sprintf("IOEngine(%d)", uint8(e))
}

// DefaultURingDepth is the number of requests a drive's ring holds in
// flight at once; more wait for a slot.
const DefaultURingDepth = 128

// FileOptions tune OpenFileWith. The zero value is OpenFile's behaviour.
type FileOptions struct {
	// Engine chooses io_uring or pread/pwrite for ReadAt and WriteAt.
	// Sync and Discard always use their own system calls.
	Engine IOEngine
	// URingDepth is the ring's request capacity; 0 means DefaultURingDepth.
	URingDepth int
	// URingBlockingWait makes the ring's reaper wait for completions in a
	// blocking io_uring_enter (which holds an OS thread) instead of on an
	// eventfd in Go's netpoller. For comparison; the eventfd is the default.
	URingBlockingWait bool
}

// OpenFileWith is OpenFile with options.
func OpenFileWith(path string, size int64, opts FileOptions) (*FileDrive, error) {
	d, err := openFile(path, size, os.OpenFile)
	if err != nil {
		return nil, err
	}
	if err := d.startEngine(opts); err != nil {
		_ = d.file.Close()
		return nil, err
	}
	return d, nil
}

// startURingQueue is newURingQueue; tests substitute a kernel that refuses.
var startURingQueue = newURingQueue

// logEngineOnce reports, once per process, which engine the first
// FileDrive with EngineAuto got, and why io_uring was refused if it was.
var logEngineOnce sync.Once

func (d *FileDrive) startEngine(opts FileOptions) error {
	if opts.Engine == EnginePread {
		return nil
	}
	if opts.Engine != EngineAuto && opts.Engine != EngineURing {
		return fmt.Errorf("disk: opening %s: unknown I/O engine %v", d.path, opts.Engine)
	}
	depth := opts.URingDepth
	if depth == 0 {
		depth = DefaultURingDepth
	}
	var fd int
	if err := d.control(func(f int) { fd = f }); err != nil {
		return fmt.Errorf("disk: opening %s: %w", d.path, err)
	}
	q, err := startURingQueue(depth, !opts.URingBlockingWait)
	switch {
	case err == nil:
		d.ring, d.fd = q, int32(fd)
		if opts.Engine == EngineAuto {
			logEngineOnce.Do(func() { slog.Info("disk: drive I/O through io_uring", "depth", depth) })
		}
		return nil
	case opts.Engine == EngineAuto && errors.Is(err, ErrURingUnavailable):
		logEngineOnce.Do(func() { slog.Warn("disk: io_uring refused; drive I/O through pread/pwrite", "err", err) })
		return nil
	}
	return fmt.Errorf("disk: opening %s: %w", d.path, err)
}

// Engine reports the engine ReadAt and WriteAt use: EngineURing or
// EnginePread.
func (d *FileDrive) Engine() IOEngine {
	if d.ring != nil {
		return EngineURing
	}
	return EnginePread
}

// engineFailure returns, once the drive's io_uring queue has failed, an
// error wrapping ErrDriveFailed and the cause; nil otherwise. Sync and
// Discard, which do not go through the ring, answer with it too: a drive
// whose reads and writes fail must not report its syncs durable.
func (d *FileDrive) engineFailure() error {
	if d.ring == nil {
		return nil
	}
	if err := d.ring.failure(); err != nil {
		return fmt.Errorf("%w: %w", ErrDriveFailed, err)
	}
	return nil
}

// transfer reads (uringOpRead) or writes all of p at off with the drive's
// engine: the ring, or pread/pwrite.
func (d *FileDrive) transfer(op uint8, p []byte, off int64) (int, error) {
	switch {
	case d.ring != nil:
		return d.uringIO(op, p, off)
	case op == uringOpRead:
		return d.file.ReadAt(p, off)
	}
	return d.file.WriteAt(p, off)
}

// uringIO reads (op uringOpRead) or writes all of p at off through the
// ring, looping on short transfers as os.File does. Once the ring has
// failed (ErrEngineFailed) it returns an error wrapping ErrDriveFailed as
// well, which ioError wraps as ErrIO. A read that fails so may leave p
// still being written by the kernel (see uringQueue): drop p.
func (d *FileDrive) uringIO(op uint8, p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		chunk := p[done:min(len(p), done+uringMaxLen)]
		res, err := d.ring.do(op, d.fd, chunk, off+int64(done))
		switch {
		case errors.Is(err, ErrEngineFailed):
			// The ring is gone for good: so are this drive's reads and
			// writes, and its owner should stop using it.
			return done, fmt.Errorf("%w: %w", ErrDriveFailed, err)
		case err != nil:
			return done, err
		case res > 0:
			done += int(res)
		case res == 0 && op == uringOpRead:
			return done, io.EOF
		case res == 0:
			return done, io.ErrShortWrite
		case syscall.Errno(-res) == syscall.EINTR || syscall.Errno(-res) == syscall.EAGAIN:
			// Retry, as os.File does on EINTR.
		default:
			return done, syscall.Errno(-res)
		}
	}
	return done, nil
}
