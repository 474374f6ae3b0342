//go:build !linux

package pmem

// FileRegion is a Region backed by a memory-mapped file. It is implemented on
// Linux only.
type FileRegion struct{ Region }

// OpenFile returns ErrUnsupported outside Linux.
func OpenFile(path string, size int) (*FileRegion, error) { return nil, ErrUnsupported }
