package bench

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Op is the operation of one I/O.
type Op uint8

// Operations.
const (
	OpRead Op = iota + 1
	OpWrite
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Device is a block device under test: a Basalt volume over NVMe/TCP, a Ceph
// RBD image, or a fake in tests.
type Device interface {
	// Describe names the device for reports ("nvme-tcp 127.0.0.1:4420 nqn…/1").
	Describe() string
	// LBASize is the logical block size in bytes.
	LBASize() int
	// Size is the capacity in bytes.
	Size() int64
	// MaxTransfer is the largest I/O in bytes, 0 for no limit.
	MaxTransfer() int
	// OpenQueue opens a submission/completion queue for one job holding at
	// most depth I/Os, identified by slots 0..depth-1.
	OpenQueue(depth int) (Queue, error)
	Close() error
}

// Queue is one job's view of a device. It is used by one goroutine at a
// time. Implementations must not allocate per I/O in steady state.
type Queue interface {
	// Queue starts, or queues until Flush, op of len(buf) bytes at byte
	// offset off on slot. buf was allocated by AllocBuffers and stays the
	// caller's until the slot completes.
	Queue(slot int, op Op, off int64, buf []byte) error
	// Flush sends what Queue queued. On error the I/Os it could not send
	// still complete, through Wait, with an error.
	Flush() error
	// Wait returns a completed slot and its result. With block false it
	// returns ok false at once when none is ready. Errors the device can
	// retry (a path failing over) are retried inside Wait, not returned.
	Wait(block bool) (slot int, err error, ok bool)
	// Close releases the queue; no I/O may be in flight.
	Close() error
}

// Buffers are page-aligned I/O buffers outside the Go heap (anonymous
// mappings), so C libraries such as librbd may hold them while an I/O is
// in flight, and O_DIRECT alignment holds.
type Buffers struct {
	mem  []byte
	Each [][]byte
}

// AllocBuffers maps n buffers of size bytes each.
func AllocBuffers(n, size int) (*Buffers, error) {
	stride := (size + 4095) &^ 4095
	mem, err := unix.Mmap(-1, 0, n*stride, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("bench: mapping %d I/O buffers of %d bytes: %w", n, size, err)
	}
	b := &Buffers{mem: mem, Each: make([][]byte, n)}
	for i := range b.Each {
		b.Each[i] = mem[i*stride : i*stride+size : i*stride+size]
	}
	return b, nil
}

// Free unmaps the buffers; none may be in use.
func (b *Buffers) Free() error {
	if b == nil || b.mem == nil {
		return nil
	}
	err := unix.Munmap(b.mem)
	b.mem, b.Each = nil, nil
	return err
}
