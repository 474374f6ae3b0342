package pmem

import (
	"fmt"
	"sync/atomic"
)

// Memory is a Region of plain process memory (ModeMemory): Persist checks
// the range and does nothing, and the bytes are gone when the process ends.
// It is for a buffer whose durability lives elsewhere: a cluster node's
// store stages replicated writes in it, while the Raft log in the
// persistent write buffer keeps every entry until the store has destaged
// it (replication/doc.go), so data reach persistent memory once.
type Memory struct {
	mem    []byte
	closed atomic.Bool
}

var _ Region = (*Memory)(nil)

// NewMemory returns a zeroed Memory region of size bytes, a positive
// multiple of CacheLineSize.
func NewMemory(size int) (*Memory, error) {
	if size <= 0 || size%CacheLineSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a positive multiple of %d", ErrSize, size, CacheLineSize)
	}
	return &Memory{mem: make([]byte, size)}, nil
}

// Bytes implements Region.
func (m *Memory) Bytes() []byte { return m.mem }

// Size implements Region.
func (m *Memory) Size() int { return len(m.mem) }

// Mode implements Region: ModeMemory.
func (m *Memory) Mode() Mode { return ModeMemory }

// Persist implements Region: it checks the range; nothing is made durable.
func (m *Memory) Persist(off, n int) error {
	if m.closed.Load() {
		return ErrClosed
	}
	return checkRange(off, n, len(m.mem))
}

// Close implements Region. Later Persist calls return ErrClosed.
func (m *Memory) Close() error {
	if m.closed.Swap(true) {
		return ErrClosed
	}
	return nil
}
