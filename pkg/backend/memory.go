package backend

import (
	"context"
	"fmt"
	"sync"
)

// memoryChunkSize is the allocation unit of a Memory backend: chunks are
// allocated on first write, so an unwritten volume costs no memory.
const memoryChunkSize = 1 << 20

// Memory is a thin, sparse, volatile Backend held in RAM. Flush and FUA are
// no-ops (nothing survives the process anyway). It is meant for tests and
// benchmarks.
type Memory struct {
	size      int64
	blockSize int
	chunks    []memoryChunk
}

type memoryChunk struct {
	mu   sync.RWMutex
	data []byte // nil until first written; nil reads as zeroes
}

// NewMemory returns a zero-filled Memory backend of size bytes. size must be a
// positive multiple of blockSize, and blockSize 512 or 4096.
func NewMemory(size int64, blockSize int) (*Memory, error) {
	if err := checkGeometry(size, blockSize); err != nil {
		return nil, err
	}
	n := (size + memoryChunkSize - 1) / memoryChunkSize
	return &Memory{size: size, blockSize: blockSize, chunks: make([]memoryChunk, n)}, nil
}

func checkGeometry(size int64, blockSize int) error {
	if blockSize != 512 && blockSize != 4096 {
		return fmt.Errorf("backend: block size %d: must be 512 or 4096", blockSize)
	}
	if size <= 0 || size%int64(blockSize) != 0 {
		return fmt.Errorf("backend: size %d: must be a positive multiple of the block size %d", size, blockSize)
	}
	return nil
}

// checkRange validates [off, off+n) against a backend's geometry.
func checkRange(off, n, size int64, blockSize int) error {
	bs := int64(blockSize)
	if off%bs != 0 || n%bs != 0 {
		return fmt.Errorf("offset %d length %d: %w", off, n, ErrMisaligned)
	}
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("offset %d length %d size %d: %w", off, n, size, ErrOutOfRange)
	}
	return nil
}

// Size implements Backend.
func (m *Memory) Size() int64 { return m.size }

// BlockSize implements Backend.
func (m *Memory) BlockSize() int { return m.blockSize }

// ReadAt implements Backend.
func (m *Memory) ReadAt(_ context.Context, p []byte, off int64) error {
	if err := checkRange(off, int64(len(p)), m.size, m.blockSize); err != nil {
		return err
	}
	m.each(off, int64(len(p)), func(c *memoryChunk, coff, poff, n int64) {
		c.mu.RLock()
		if c.data == nil {
			clear(p[poff : poff+n])
		} else {
			copy(p[poff:poff+n], c.data[coff:coff+n])
		}
		c.mu.RUnlock()
	})
	return nil
}

// WriteAt implements Backend.
func (m *Memory) WriteAt(_ context.Context, p []byte, off int64, _ WriteFlags) error {
	if err := checkRange(off, int64(len(p)), m.size, m.blockSize); err != nil {
		return err
	}
	m.each(off, int64(len(p)), func(c *memoryChunk, coff, poff, n int64) {
		c.mu.Lock()
		if c.data == nil {
			c.data = make([]byte, memoryChunkSize)
		}
		copy(c.data[coff:coff+n], p[poff:poff+n])
		c.mu.Unlock()
	})
	return nil
}

// Flush implements Backend; memory has nothing to flush.
func (m *Memory) Flush(context.Context) error { return nil }

// Trim implements Backend: the range reads as zeroes afterwards. Whole chunks
// are released.
func (m *Memory) Trim(_ context.Context, off, n int64) error {
	if err := checkRange(off, n, m.size, m.blockSize); err != nil {
		return err
	}
	m.each(off, n, func(c *memoryChunk, coff, _, cn int64) {
		c.mu.Lock()
		if cn == memoryChunkSize {
			c.data = nil
		} else if c.data != nil {
			clear(c.data[coff : coff+cn])
		}
		c.mu.Unlock()
	})
	return nil
}

// WriteZeroes implements Backend (same as Trim for memory).
func (m *Memory) WriteZeroes(ctx context.Context, off, n int64) error { return m.Trim(ctx, off, n) }

// Close implements Backend.
func (m *Memory) Close() error { return nil }

// NonBlocking reports true: no method waits for anything but a chunk lock
// held around a memory copy, and none keeps a reference to its buffer. The
// target runs Memory's I/O inline on the connection's receive goroutine
// (target.NonBlocker).
func (m *Memory) NonBlocking() bool { return true }

// each calls fn for every chunk piece of [off, off+n): the chunk, the offset in
// the chunk, the offset relative to off, and the piece length.
func (m *Memory) each(off, n int64, fn func(c *memoryChunk, coff, poff, n int64)) {
	for done := int64(0); done < n; {
		abs := off + done
		ci, coff := abs/memoryChunkSize, abs%memoryChunkSize
		piece := min(n-done, memoryChunkSize-coff)
		fn(&m.chunks[ci], coff, done, piece)
		done += piece
	}
}
