package pmem

import (
	"errors"
	"fmt"
	"os"
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
// its first size bytes are mapped.
//
// It first asks for a MAP_SHARED_VALIDATE|MAP_SYNC mapping (ModeDAX). A kernel
// or filesystem that cannot give one (EOPNOTSUPP, EINVAL: tmpfs, ext4 or XFS
// without -o dax) gets a plain MAP_SHARED mapping instead (ModeMsync, or
// ModeVolatile on tmpfs and ramfs). Mode says which one was obtained.
func OpenFile(path string, size int) (*FileRegion, error) {
	pageSize := os.Getpagesize()
	if size <= 0 || size%pageSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a positive multiple of the %d-byte page", ErrSize, size, pageSize)
	}
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pmem: while opening: %w", err)
	}
	r, err := mapFile(file, size)
	if err != nil {
		return nil, errors.Join(err, file.Close())
	}
	return r, nil
}

func mapFile(file *os.File, size int) (*FileRegion, error) {
	path := file.Name()
	if err := extendFile(file, int64(size)); err != nil {
		return nil, err
	}
	fd := int(file.Fd())
	const protection = unix.PROT_READ | unix.PROT_WRITE
	mem, err := unix.Mmap(fd, 0, size, protection, unix.MAP_SHARED_VALIDATE|unix.MAP_SYNC)
	if err == nil {
		r := &FileRegion{path: path, file: file, mem: mem, mode: ModeDAX, writeBack: writeBackMethod}
		return r, nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
		return nil, fmt.Errorf("pmem: while mapping %s with MAP_SYNC: %w", path, err)
	}
	mem, err = unix.Mmap(fd, 0, size, protection, unix.MAP_SHARED)
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
// lack of space (SIGBUS).
func extendFile(file *os.File, size int64) error {
	info, err := file.Stat()
	if err != nil {
		return fmt.Errorf("pmem: while sizing: %w", err)
	}
	if info.Size() >= size {
		return nil
	}
	err = unix.Fallocate(int(file.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = file.Truncate(size)
	}
	if err != nil {
		return fmt.Errorf("pmem: while extending %s to %d bytes: %w", file.Name(), size, err)
	}
	return nil
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
