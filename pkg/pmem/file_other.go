//go:build !linux

package pmem

// FileRegion is a Region backed by a memory-mapped file. It is implemented on
// Linux only.
type FileRegion struct{ Region }

// OpenFile returns ErrUnsupported outside Linux.
func OpenFile(path string, size int) (*FileRegion, error) { return nil, ErrUnsupported }

// FileOptions adjust how OpenFileWith maps a file (see the Linux version).
type FileOptions struct {
	// Msync: never a MAP_SYNC mapping, msync instead.
	Msync bool
}

// OpenFileWith returns ErrUnsupported outside Linux.
func OpenFileWith(path string, size int, opts FileOptions) (*FileRegion, error) {
	return nil, ErrUnsupported
}
