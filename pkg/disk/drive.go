package disk

import (
	"errors"
	"fmt"
	"unsafe"
)

// BlockSize is the unit of every drive operation: offsets, lengths and buffer
// addresses are multiples of it. 4096 bytes matches the logical block size of
// current NVMe drives and the page size, so O_DIRECT accepts it everywhere.
const BlockSize = 4096

// SectorSize is the unit a drive may tear a block write into on power loss.
const SectorSize = 512

// Sentinel errors. Errors returned by this package wrap one of them, so
// callers test with errors.Is.
var (
	// ErrIO is a failed read, write, sync or discard: the drive answered, with
	// an error. The same range may work on a retry, or may not.
	ErrIO = errors.New("disk: i/o error")
	// ErrDriveFailed means the whole drive is gone: every operation fails
	// and will keep failing. The caller should stop using the drive.
	ErrDriveFailed = errors.New("disk: drive failed")
	// ErrOutOfRange is an operation that reaches beyond Size.
	ErrOutOfRange = errors.New("disk: out of range")
	// ErrMisaligned is an offset, length or buffer address that is not a
	// multiple of BlockSize.
	ErrMisaligned = errors.New("disk: misaligned")
	// ErrClosed is an operation on a closed drive.
	ErrClosed = errors.New("disk: drive closed")
)

// Drive is a block device: a file or device opened for direct I/O, an
// in-memory fake, or a fault-injecting wrapper around either.
//
// Contract, common to every implementation:
//   - off and len(p) (or n for Discard) are multiples of BlockSize, and p's
//     first byte is BlockSize-aligned (use AlignedBuffer); otherwise the call
//     fails with ErrMisaligned and does nothing. Empty operations succeed.
//   - The range [off, off+len) lies within [0, Size()); otherwise the call
//     fails with ErrOutOfRange and does nothing.
//   - ReadAt and WriteAt transfer all of p or return an error; n < len(p)
//     only with a non-nil error.
//   - A completed WriteAt is visible to later reads but durable only after a
//     Sync that started after it returned. After a crash, unsynced blocks may
//     hold the old data, the new data, or (at SectorSize granularity) a mix.
//   - After Discard the range's content is unspecified until it is written
//     again (it reads as zeros on files and MemDrive).
//   - Methods are safe for concurrent use; concurrent writes to overlapping
//     ranges leave the overlap in an unspecified state.
//   - After Close every method fails with ErrClosed.
type Drive interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Sync() error
	Discard(off, n int64) error
	// Size returns the capacity in bytes, a multiple of BlockSize.
	Size() int64
	// BlockSize returns the I/O unit in bytes (BlockSize for every drive in
	// this package).
	BlockSize() int
	Close() error
}

// AlignedBuffer returns a zeroed slice of length and capacity n whose first
// byte is BlockSize-aligned in memory, as O_DIRECT requires. n must not be
// negative.
func AlignedBuffer(n int) []byte {
	if n < 0 {
		panic(fmt.Sprintf("disk: AlignedBuffer(%d): negative size", n))
	}
	if n == 0 {
		return []byte{}
	}
	raw := make([]byte, n+BlockSize-1)
	skip := alignmentOffset(raw)
	return raw[skip : skip+n : skip+n]
}

// alignmentOffset returns how many bytes to skip from p[0] to reach the next
// BlockSize boundary.
func alignmentOffset(p []byte) int {
	rest := int(uintptr(unsafe.Pointer(unsafe.SliceData(p))) & (BlockSize - 1))
	if rest == 0 {
		return 0
	}
	return BlockSize - rest
}

// IsAligned reports whether p starts on a BlockSize boundary in memory and its
// length is a multiple of BlockSize.
func IsAligned(p []byte) bool {
	return len(p)%BlockSize == 0 && (len(p) == 0 || alignmentOffset(p) == 0)
}

// checkRange validates an operation of n bytes at off on a drive of size
// bytes, and returns an error wrapping ErrMisaligned or ErrOutOfRange.
func checkRange(op string, off, n, size int64) error {
	if off%BlockSize != 0 || n%BlockSize != 0 {
		return fmt.Errorf("%w: %s of %d bytes at offset %d (block size %d)",
			ErrMisaligned, op, n, off, BlockSize)
	}
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("%w: %s of %d bytes at offset %d (drive size %d)",
			ErrOutOfRange, op, n, off, size)
	}
	return nil
}

// checkBuffer validates a read or write of p at off, including p's address.
func checkBuffer(op string, p []byte, off, size int64) error {
	if err := checkRange(op, off, int64(len(p)), size); err != nil {
		return err
	}
	if len(p) > 0 && alignmentOffset(p) != 0 {
		return fmt.Errorf("%w: %s buffer at %p is not %d-byte aligned",
			ErrMisaligned, op, unsafe.SliceData(p), BlockSize)
	}
	return nil
}
