package pmem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FileRegion is a Region backed by a memory-mapped file.
type FileRegion struct {
	path      string
	file      *os.File
	mem       []byte
	mode      Mode
	writeBack writeBack // how ModeDAX writes lines back; writeBackMsync elsewhere
	closed    atomic.Bool
}

var _ Region = (*FileRegion)(nil)

// OpenFile maps the first size bytes of the file at path, creating the file,
// or extending it with allocated zero bytes, when it is shorter. size must be a
// positive multiple of the page size. A longer file keeps its length and only
// its first size bytes are mapped. A file it extends is synced (fsync) before
// it is mapped, and a file it creates has its directory synced too, so that
// after a power loss the file is still there at its full size: a log on it
// must not vanish or shrink under records it acknowledged.
//
// It first asks for a MAP_SHARED_VALIDATE|MAP_SYNC mapping (ModeDAX). A kernel
// or filesystem that cannot give one (EOPNOTSUPP, EINVAL: tmpfs, ext4 or XFS
// without -o dax) gets a plain MAP_SHARED mapping instead (ModeMsync, or
// ModeVolatile on tmpfs and ramfs). Mode says which one was obtained.
func OpenFile(path string, size int) (*FileRegion, error) {
	return OpenFileWith(path, size, FileOptions{})
}

// FileOptions adjust how OpenFileWith maps a file. The zero value is what
// OpenFile does.
type FileOptions struct {
	// Msync, when set, never asks for a MAP_SYNC mapping: the file is
	// mapped MAP_SHARED and Persist is msync(MS_SYNC) (ModeMsync, or
	// ModeVolatile on tmpfs and ramfs) even on a DAX filesystem. It exists
	// to compare the two ways of persisting on the same file.
	Msync bool
}

// OpenFileWith is OpenFile with opts.
func OpenFileWith(path string, size int, opts FileOptions) (*FileRegion, error) {
	pageSize := os.Getpagesize()
	if size <= 0 || size%pageSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a positive multiple of the %d-byte page", ErrSize, size, pageSize)
	}
	file, created, err := openOrCreate(path)
	if err != nil {
		return nil, fmt.Errorf("pmem: while opening: %w", err)
	}
	r, err := mapFile(file, size, created, !opts.Msync)
	if err != nil {
		return nil, errors.Join(err, file.Close())
	}
	return r, nil
}

// openOrCreate opens path read-write, creating it if it does not exist;
// created says whether this call created it.
func openOrCreate(path string) (file *os.File, created bool, err error) {
	for {
		file, err = os.OpenFile(path, os.O_RDWR, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			return file, false, err
		}
		file, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) { // else created meanwhile: open it
			return file, err == nil, err
		}
	}
}

// syncFile and syncDir make a file's data and size, and a directory's
// entries, durable, and mmap maps a file. Tests replace them to see that
// OpenFile calls them.
var (
	mmap     = unix.Mmap
	syncFile = func(f *os.File) error { return f.Sync() }
	syncDir  = func(dir string) error {
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		return errors.Join(d.Sync(), d.Close())
	}
)

// mapFile sizes, syncs and maps file: with MAP_SYNC first when trySync is
// set, else (or when the filesystem refuses MAP_SYNC) with MAP_SHARED.
func mapFile(file *os.File, size int, created, trySync bool) (*FileRegion, error) {
	path := file.Name()
	extended, err := extendFile(file, int64(size))
	if err != nil {
		return nil, err
	}
	if extended || created {
		if err := syncFile(file); err != nil {
			return nil, fmt.Errorf("pmem: while syncing %s: %w", path, err)
		}
	}
	if created {
		if err := syncDir(filepath.Dir(path)); err != nil {
			return nil, fmt.Errorf("pmem: while syncing the directory of %s: %w", path, err)
		}
	}
	fd := int(file.Fd())
	const protection = unix.PROT_READ | unix.PROT_WRITE
	if trySync {
		mem, err := mmap(fd, 0, size, protection, unix.MAP_SHARED_VALIDATE|unix.MAP_SYNC)
		if err == nil {
			r := &FileRegion{path: path, file: file, mem: mem, mode: ModeDAX, writeBack: writeBackMethod}
			return r, nil
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("pmem: while mapping %s with MAP_SYNC: %w", path, err)
		}
	}
	mem, err := mmap(fd, 0, size, protection, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("pmem: while mapping %s: %w", path, err)
	}
	mode := ModeMsync
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) == nil && (fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC) {
		mode = ModeVolatile
	}
	return &FileRegion{path: path, file: file, mem: mem, mode: mode, writeBack: writeBackMsync}, nil
}

// extendFile makes the file at least size bytes long, allocating the blocks
// where the filesystem can, so that a store to the mapping never faults for
// lack of space (SIGBUS). It reports whether it changed the file.
func extendFile(file *os.File, size int64) (bool, error) {
	info, err := file.Stat()
	if err != nil {
		return false, fmt.Errorf("pmem: while sizing: %w", err)
	}
	if info.Size() >= size {
		return false, nil
	}
	err = unix.Fallocate(int(file.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = file.Truncate(size)
	}
	if err != nil {
		return false, fmt.Errorf("pmem: while extending %s to %d bytes: %w", file.Name(), size, err)
	}
	return true, nil
}

// Bytes returns the mapping.
func (r *FileRegion) Bytes() []byte { return r.mem }

// Size returns the length of the mapping.
func (r *FileRegion) Size() int { return len(r.mem) }

// Mode says how Persist works.
func (r *FileRegion) Mode() Mode { return r.mode }

// Path returns the name of the mapped file.
func (r *FileRegion) Path() string { return r.path }

// Persist makes [off, off+n) durable: cache-line write-back and SFENCE in
// ModeDAX, msync(MS_SYNC) of the pages that hold the range otherwise.
func (r *FileRegion) Persist(off, n int) error {
	if r.closed.Load() {
		return ErrClosed
	}
	if err := checkRange(off, n, len(r.mem)); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if r.mode == ModeDAX && writeBackRange(r.writeBack, unsafe.Pointer(&r.mem[off]), uintptr(n)) {
		return nil
	}
	if r.mode == ModeVolatile {
		// tmpfs and ramfs pages are the file itself: a store through the
		// shared mapping is in the file at once, survives the process, and
		// msync would make it no more durable (nothing survives the machine).
		return nil
	}
	start := off &^ (os.Getpagesize() - 1)
	if err := unix.Msync(r.mem[start:off+n], unix.MS_SYNC); err != nil {
		return fmt.Errorf("pmem: while msync of %s [%d, +%d): %w", r.path, off, n, err)
	}
	return nil
}

// Close unmaps the region and closes the file. Later calls return ErrClosed.
func (r *FileRegion) Close() error {
	if r.closed.Swap(true) {
		return ErrClosed
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return errors.Join(err, r.file.Close())
}
