package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directAlign is the buffer, offset and length alignment O_DIRECT needs.
const directAlign = 4096

// File is a Backend on a regular file or block device. It opens the file with
// O_DIRECT where the filesystem allows (tmpfs does not) so reads and writes
// bypass the page cache; Direct reports which mode is in use. Writes with
// WriteFUA and Flush call fdatasync. Trim and WriteZeroes punch holes.
type File struct {
	f         *os.File
	size      int64
	blockSize int
	direct    bool
	bounce    sync.Pool // *[]byte of maxBounce bytes, 4 KiB aligned
}

// maxBounce is the largest transfer copied through one bounce buffer; larger
// unaligned transfers are split.
const maxBounce = 1 << 20

// OpenFile opens or creates path as a backend of size bytes (the file is
// extended if shorter; a block device must be at least size bytes).
func OpenFile(path string, size int64, blockSize int) (*File, error) {
	if err := checkGeometry(size, blockSize); err != nil {
		return nil, err
	}
	f, direct, err := openDirect(path)
	if err != nil {
		return nil, fmt.Errorf("backend: open %s: %w", path, err)
	}
	if err := ensureSize(f, size); err != nil {
		f.Close()
		return nil, fmt.Errorf("backend: size %s: %w", path, err)
	}
	b := &File{f: f, size: size, blockSize: blockSize, direct: direct}
	b.bounce.New = func() any { buf := alignedBuffer(maxBounce); return &buf }
	return b, nil
}

func openDirect(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_DIRECT, 0o600)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	return f, false, err
}

func ensureSize(f *os.File, size int64) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeDevice != 0 {
		n, err := unix.IoctlGetUint64(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			return err
		}
		if int64(n) < size {
			return fmt.Errorf("block device holds %d bytes, %d needed", n, size)
		}
		return nil
	}
	if st.Size() < size {
		return f.Truncate(size)
	}
	return nil
}

func alignedBuffer(n int) []byte {
	buf := make([]byte, n+directAlign)
	shift := int(uintptr(unsafe.Pointer(&buf[0])) & (directAlign - 1))
	if shift != 0 {
		shift = directAlign - shift
	}
	return buf[shift : shift+n : shift+n]
}

func aligned(p []byte, off int64) bool {
	return len(p) > 0 && uintptr(unsafe.Pointer(&p[0]))%directAlign == 0 &&
		len(p)%directAlign == 0 && off%directAlign == 0
}

// Direct reports whether the file is open with O_DIRECT.
func (b *File) Direct() bool { return b.direct }

// Size implements Backend.
func (b *File) Size() int64 { return b.size }

// BlockSize implements Backend.
func (b *File) BlockSize() int { return b.blockSize }

// ReadAt implements Backend.
func (b *File) ReadAt(_ context.Context, p []byte, off int64) error {
	if err := checkRange(off, int64(len(p)), b.size, b.blockSize); err != nil {
		return err
	}
	return b.transfer(p, off, false)
}

// WriteAt implements Backend.
func (b *File) WriteAt(_ context.Context, p []byte, off int64, flags WriteFlags) error {
	if err := checkRange(off, int64(len(p)), b.size, b.blockSize); err != nil {
		return err
	}
	if err := b.transfer(p, off, true); err != nil {
		return err
	}
	if flags&WriteFUA != 0 {
		return b.sync()
	}
	return nil
}

// transfer moves p at off, through aligned bounce buffers when O_DIRECT is in
// use and p is not aligned.
func (b *File) transfer(p []byte, off int64, write bool) error {
	if !b.direct || aligned(p, off) {
		return b.rawIO(p, off, write)
	}
	bp := b.bounce.Get().(*[]byte)
	defer b.bounce.Put(bp)
	for done := 0; done < len(p); {
		n := min(len(p)-done, maxBounce)
		// A sub-4K block size with an unaligned offset cannot use O_DIRECT
		// on a 4K-sector file system; fall back to buffered for that piece.
		if (off+int64(done))%directAlign != 0 || n%directAlign != 0 {
			return b.rawIOBuffered(p[done:], off+int64(done), write)
		}
		buf := (*bp)[:n]
		if write {
			copy(buf, p[done:done+n])
		}
		if err := b.rawIO(buf, off+int64(done), write); err != nil {
			return err
		}
		if !write {
			copy(p[done:done+n], buf)
		}
		done += n
	}
	return nil
}

func (b *File) rawIO(p []byte, off int64, write bool) error {
	var err error
	if write {
		_, err = b.f.WriteAt(p, off)
		if err != nil {
			return fmt.Errorf("backend: write at %d: %v: %w", off, err, ErrWriteFault)
		}
		return nil
	}
	_, err = b.f.ReadAt(p, off)
	if err != nil {
		return fmt.Errorf("backend: read at %d: %v: %w", off, err, ErrMedia)
	}
	return nil
}

// rawIOBuffered does one transfer through a second descriptor without
// O_DIRECT, then syncs, so the direct descriptor never sees stale data.
func (b *File) rawIOBuffered(p []byte, off int64, write bool) error {
	f, err := os.OpenFile(b.f.Name(), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("backend: reopen for unaligned I/O: %v: %w", err, ErrWriteFault)
	}
	defer f.Close()
	g := &File{f: f, size: b.size, blockSize: b.blockSize}
	if err := g.rawIO(p, off, write); err != nil {
		return err
	}
	if write {
		return g.sync()
	}
	return nil
}

func (b *File) sync() error {
	if err := unix.Fdatasync(int(b.f.Fd())); err != nil {
		return fmt.Errorf("backend: fdatasync: %v: %w", err, ErrWriteFault)
	}
	return nil
}

// Flush implements Backend.
func (b *File) Flush(context.Context) error { return b.sync() }

// Trim implements Backend by punching a hole (the range then reads as zeroes).
func (b *File) Trim(ctx context.Context, off, n int64) error { return b.WriteZeroes(ctx, off, n) }

// WriteZeroes implements Backend: a punched hole where the file system
// supports it, written zeroes otherwise.
func (b *File) WriteZeroes(_ context.Context, off, n int64) error {
	if err := checkRange(off, n, b.size, b.blockSize); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	err := unix.Fallocate(int(b.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		return nil
	}
	zero := alignedBuffer(min(int(n), maxBounce))
	for done := int64(0); done < n; {
		piece := min(n-done, int64(len(zero)))
		if err := b.rawIO(zero[:piece], off+done, true); err != nil {
			return err
		}
		done += piece
	}
	return nil
}

// Close implements Backend.
func (b *File) Close() error { return b.f.Close() }
