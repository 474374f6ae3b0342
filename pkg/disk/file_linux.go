package disk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FileDrive is a Drive backed by a regular file or a block device, opened
// with O_DIRECT where the filesystem allows it. Without O_DIRECT (for example
// on a filesystem that rejects it with EINVAL) it runs buffered; Sync then
// flushes the page cache as well, so durability is the same, only slower and
// with a second copy of the data in memory. Direct reports the mode.
type FileDrive struct {
	file   *os.File
	path   string
	size   int64
	direct bool
	device bool // a block device rather than a regular file
	// noPunchHole is set once fallocate(PUNCH_HOLE) reported that the
	// filesystem does not support it; Discard then writes zeros.
	noPunchHole atomic.Bool
	closed      atomic.Bool
	// ring carries ReadAt and WriteAt when the engine is io_uring (nil for
	// pread/pwrite); fd is the file's descriptor for its SQEs.
	ring *uringQueue
	fd   int32
}

var _ Drive = (*FileDrive)(nil)

// openFunc opens a file; tests substitute one that refuses O_DIRECT.
type openFunc func(name string, flag int, perm os.FileMode) (*os.File, error)

// OpenFile opens the drive at path: a regular file, created if missing, or a
// block device.
//
// size is the drive's capacity in bytes, a multiple of BlockSize. A regular
// file shorter than size is extended (sparse); it is never truncated, and a
// longer file or device exposes only its first size bytes. size 0 means the
// whole existing file or device, whose length must then be a non-zero
// multiple of BlockSize. A block device shorter than size is an error
// wrapping ErrOutOfRange. A device's size comes from the BLKGETSIZE64 ioctl.
//
// Reads and writes go through io_uring where the kernel allows it and
// through pread/pwrite otherwise (EngineAuto); OpenFileWith chooses.
func OpenFile(path string, size int64) (*FileDrive, error) {
	return OpenFileWith(path, size, FileOptions{})
}

func openFile(path string, size int64, open openFunc) (*FileDrive, error) {
	if size < 0 || size%BlockSize != 0 {
		return nil, fmt.Errorf("%w: drive %s: size %d is not a multiple of %d",
			ErrMisaligned, path, size, BlockSize)
	}
	file, direct, err := openDirect(path, open)
	if err != nil {
		return nil, err
	}
	d := &FileDrive{file: file, path: path, direct: direct}
	if err := d.setSize(size); err != nil {
		_ = file.Close()
		return nil, err
	}
	if direct && !d.probeDirect() {
		// The filesystem accepted O_DIRECT at open but rejects direct I/O.
		_ = file.Close()
		if d.file, err = open(path, os.O_RDWR, 0o600); err != nil {
			return nil, fmt.Errorf("disk: reopening %s without O_DIRECT: %w", path, err)
		}
		d.direct = false
	}
	return d, nil
}

// openDirect opens path with O_DIRECT, falling back to buffered I/O when the
// filesystem refuses O_DIRECT with EINVAL (tmpfs before Linux 6.6, some FUSE).
func openDirect(path string, open openFunc) (*os.File, bool, error) {
	const flags = os.O_RDWR | os.O_CREATE
	file, err := open(path, flags|syscall.O_DIRECT, 0o600)
	if err == nil {
		return file, true, nil
	}
	if !errors.Is(err, syscall.EINVAL) {
		return nil, false, fmt.Errorf("disk: opening %s: %w", path, err)
	}
	file, err = open(path, flags, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("disk: opening %s: %w", path, err)
	}
	return file, false, nil
}

// setSize establishes d.size from the requested size and the file or device.
func (d *FileDrive) setSize(size int64) error {
	info, err := d.file.Stat()
	if err != nil {
		return fmt.Errorf("disk: stat %s: %w", d.path, err)
	}
	mode := info.Mode()
	var available int64
	switch {
	case mode.IsRegular():
		available = info.Size()
	case mode&os.ModeDevice != 0 && mode&os.ModeCharDevice == 0:
		d.device = true
		if available, err = d.deviceSize(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("disk: %s is neither a regular file nor a block device (%v)", d.path, mode)
	}
	switch {
	case size == 0:
		size = available - available%BlockSize
		if size == 0 {
			return fmt.Errorf("%w: drive %s is empty and no size was given", ErrOutOfRange, d.path)
		}
	case size > available && d.device:
		return fmt.Errorf("%w: device %s holds %d bytes, %d requested",
			ErrOutOfRange, d.path, available, size)
	case size > available:
		if err := d.file.Truncate(size); err != nil {
			return fmt.Errorf("disk: extending %s to %d bytes: %w", d.path, size, err)
		}
	}
	d.size = size
	return nil
}

// deviceSize returns a block device's capacity and checks that its logical
// block size divides BlockSize.
func (d *FileDrive) deviceSize() (int64, error) {
	var size uint64
	var sectorSize int
	var ioctlErr error
	err := d.control(func(fd int) {
		if size, ioctlErr = unix.IoctlGetUint64(fd, unix.BLKGETSIZE64); ioctlErr != nil {
			return
		}
		sectorSize, ioctlErr = unix.IoctlGetInt(fd, unix.BLKSSZGET)
	})
	if err = errors.Join(err, ioctlErr); err != nil {
		return 0, fmt.Errorf("disk: reading the size of device %s: %w", d.path, err)
	}
	if sectorSize <= 0 || BlockSize%sectorSize != 0 {
		return 0, fmt.Errorf("%w: device %s has logical block size %d",
			ErrMisaligned, d.path, sectorSize)
	}
	return int64(size), nil
}

// probeDirect reads the first block with O_DIRECT and reports whether the
// filesystem accepted it.
func (d *FileDrive) probeDirect() bool {
	_, err := d.file.ReadAt(AlignedBuffer(BlockSize), 0)
	return !errors.Is(err, syscall.EINVAL)
}

// control runs f with the file descriptor, keeping the file open meanwhile.
func (d *FileDrive) control(f func(fd int)) error {
	raw, err := d.file.SyscallConn()
	if err != nil {
		return err
	}
	return raw.Control(func(fd uintptr) { f(int(fd)) })
}

// Direct reports whether the drive runs with O_DIRECT.
func (d *FileDrive) Direct() bool { return d.direct }

// Path returns the path the drive was opened with.
func (d *FileDrive) Path() string { return d.path }

// Size returns the capacity in bytes.
func (d *FileDrive) Size() int64 { return d.size }

// BlockSize returns BlockSize.
func (d *FileDrive) BlockSize() int { return BlockSize }

// ReadAt reads len(p) bytes at off; see Drive.
func (d *FileDrive) ReadAt(p []byte, off int64) (int, error) {
	if err := d.check("read", p, off); err != nil {
		return 0, err
	}
	n, err := d.transfer(uringOpRead, p, off)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	return n, d.ioError("read", int64(len(p)), off, err)
}

// WriteAt writes p at off; see Drive.
func (d *FileDrive) WriteAt(p []byte, off int64) (int, error) {
	if err := d.check("write", p, off); err != nil {
		return 0, err
	}
	n, err := d.transfer(uringOpWrite, p, off)
	return n, d.ioError("write", int64(len(p)), off, err)
}

// Sync makes every completed write durable with fdatasync, which also flushes
// the device's volatile write cache and, for files, the block allocation.
func (d *FileDrive) Sync() error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := d.engineFailure(); err != nil {
		return d.ioError("sync", 0, 0, err)
	}
	var syncErr error
	err := d.control(func(fd int) { syncErr = unix.Fdatasync(fd) })
	return d.ioError("sync", 0, 0, errors.Join(err, syncErr))
}

// Discard releases [off, off+n): BLKDISCARD on a device (a no-op where the
// device does not support it), fallocate(PUNCH_HOLE|KEEP_SIZE) on a file, or
// zeros written where the filesystem cannot punch holes.
func (d *FileDrive) Discard(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := checkRange("discard", off, n, d.size); err != nil || n == 0 {
		return err
	}
	if err := d.engineFailure(); err != nil {
		return d.ioError("discard", off, n, err)
	}
	if d.device {
		return d.discardDevice(off, n)
	}
	if !d.noPunchHole.Load() {
		var punchErr error
		err := d.control(func(fd int) {
			punchErr = unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		})
		if err = errors.Join(err, punchErr); !isNotSupported(err) {
			return d.ioError("discard", n, off, err)
		}
		d.noPunchHole.Store(true)
	}
	return d.writeZeros(off, n)
}

// PunchesHoles reports whether Discard deallocates the blocks of a regular
// file, which the filesystem must then allocate again when the range is
// next written.
func (d *FileDrive) PunchesHoles() bool { return !d.device }

func (d *FileDrive) discardDevice(off, n int64) error {
	rangeArg := [2]uint64{uint64(off), uint64(n)}
	var errno syscall.Errno
	err := d.control(func(fd int) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKDISCARD,
			uintptr(unsafe.Pointer(&rangeArg)))
	})
	if err == nil && errno != 0 {
		err = errno
	}
	if isNotSupported(err) {
		return nil
	}
	return d.ioError("discard", n, off, err)
}

func isNotSupported(err error) bool {
	return errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) ||
		errors.Is(err, syscall.ENOTTY)
}

// zeroBlock is a read-only buffer of zeros for Discard's fallback.
var zeroBlock = sync.OnceValue(func() []byte { return AlignedBuffer(256 << 10) })

func (d *FileDrive) writeZeros(off, n int64) error {
	zeros := zeroBlock()
	for n > 0 {
		chunk := min(n, int64(len(zeros)))
		if _, err := d.file.WriteAt(zeros[:chunk], off); err != nil {
			return d.ioError("discard", chunk, off, err)
		}
		off, n = off+chunk, n-chunk
	}
	return nil
}

// Close closes the file. Later calls return ErrClosed. With io_uring,
// requests in flight complete first; those not yet submitted fail with
// ErrClosed.
func (d *FileDrive) Close() error {
	if d.closed.Swap(true) {
		return ErrClosed
	}
	if d.ring != nil {
		d.ring.close()
	}
	if err := d.file.Close(); err != nil {
		return fmt.Errorf("disk: closing %s: %w", d.path, err)
	}
	return nil
}

func (d *FileDrive) check(op string, p []byte, off int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	return checkBuffer(op, p, off, d.size)
}

// ioError wraps a system error as ErrIO (or ErrClosed), naming the operation.
func (d *FileDrive) ioError(op string, n, off int64, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrClosed), errors.Is(err, ErrClosed):
		return fmt.Errorf("%w: %s on %s", ErrClosed, op, d.path)
	case err == io.EOF:
		err = io.ErrUnexpectedEOF // the file was truncated behind our back
	}
	return fmt.Errorf("%w: %s of %d bytes at offset %d on %s: %w", ErrIO, op, n, off, d.path, err)
}
