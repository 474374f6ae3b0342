package replication

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// blockSM is the tests' state machine: size bytes in memory, changed by
// the entries its methods propose, which write or zero a range (pkg/volume
// has the real block device; this package's tests need only bytes that
// every replica must agree on). It keeps the shape of a block device's
// calls (WriteAt, ReadAtAsync, ...) so the cluster tests read as I/O.
//
// Like a volume over a volatile replica it makes its applied entries
// durable only at Checkpoint (AppliedIndex lags Apply), and its state
// outlives a crash of its host: a test that restarts a node adds the same
// blockSM again, as a node reopens its replica.
//
// An entry's payload, little-endian: 1 byte kind (1 write, 2 zero), 7
// zero, 8 offset, 8 length, then the data of a write.
type blockSM struct {
	group   atomic.Pointer[Group]
	applied atomic.Uint64
	durable atomic.Uint64
	mu      sync.Mutex
	data    []byte
}

const (
	smWrite     = 1
	smZero      = 2
	smOpHeader  = 24
	smBlockSize = 4096
)

func newBlockSM(size int) *blockSM { return &blockSM{data: make([]byte, size)} }

// addBlockSM adds group id on h with sm as its state machine.
func addBlockSM(h *Host, id GroupID, members []NodeID, sm *blockSM) (*blockSM, error) {
	g, err := h.AddGroup(id, members, sm)
	if err != nil {
		return nil, err
	}
	sm.group.Store(g)
	return sm, nil
}

// Group returns the group sm was last added to.
func (s *blockSM) Group() *Group { return s.group.Load() }

// Size returns the state's size in bytes.
func (s *blockSM) Size() int64 { return int64(len(s.data)) }

// entry builds a proposal entry (ProposalHeaderSize bytes for the group).
func (s *blockSM) entry(kind byte, off int64, n int, p []byte) ([]byte, error) {
	if off < 0 || n < 0 || off%smBlockSize != 0 || n%smBlockSize != 0 || off+int64(n) > s.Size() {
		return nil, fmt.Errorf("test: %d bytes at %d of %d", n, off, s.Size())
	}
	e := make([]byte, ProposalHeaderSize+smOpHeader+len(p))
	h := e[ProposalHeaderSize:]
	h[0] = kind
	binary.LittleEndian.PutUint64(h[8:], uint64(off))
	binary.LittleEndian.PutUint64(h[16:], uint64(n))
	copy(h[smOpHeader:], p)
	return e, nil
}

// WriteAt proposes a write of p at off and waits for it to apply here.
func (s *blockSM) WriteAt(ctx context.Context, p []byte, off int64) error {
	e, err := s.entry(smWrite, off, len(p), p)
	if err != nil {
		return err
	}
	return s.Group().ProposeEntry(ctx, e)
}

// WriteAtAsync proposes a write of p at off; done gets the result.
func (s *blockSM) WriteAtAsync(p []byte, off int64, done func(error)) {
	e, err := s.entry(smWrite, off, len(p), p)
	if err != nil {
		done(err)
		return
	}
	s.Group().ProposeEntryAsync(e, done)
}

// TrimAsync proposes zeroing [off, off+n); done gets the result.
func (s *blockSM) TrimAsync(off, n int64, done func(error)) {
	e, err := s.entry(smZero, off, int(n), nil)
	if err != nil {
		done(err)
		return
	}
	s.Group().ProposeEntryAsync(e, done)
}

// ReadAt waits for a read barrier and reads p at off from the state.
func (s *blockSM) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := s.Group().ReadBarrier(ctx); err != nil {
		return err
	}
	return s.readLocal(p, off)
}

// ReadAtAsync is ReadAt calling done, on the group's loop.
func (s *blockSM) ReadAtAsync(p []byte, off int64, done func(error)) {
	s.Group().ReadBarrierAsync(func(err error) {
		if err == nil {
			err = s.readLocal(p, off)
		}
		done(err)
	})
}

// readLocal reads p at off from this replica's state, with no barrier.
func (s *blockSM) readLocal(p []byte, off int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off < 0 || off+int64(len(p)) > s.Size() {
		return fmt.Errorf("test: read of %d bytes at %d of %d", len(p), off, s.Size())
	}
	copy(p, s.data[off:])
	return nil
}

// bytes returns a copy of this replica's state.
func (s *blockSM) bytes() []byte {
	b := make([]byte, s.Size())
	_ = s.readLocal(b, 0)
	return b
}

// Apply implements StateMachine.
func (s *blockSM) Apply(_ context.Context, index uint64, data []byte) error {
	if len(data) < smOpHeader {
		return fmt.Errorf("%w: test entry of %d bytes", ErrCorrupt, len(data))
	}
	kind, off, n := data[0], int64(binary.LittleEndian.Uint64(data[8:])), int64(binary.LittleEndian.Uint64(data[16:]))
	p := data[smOpHeader:]
	if off < 0 || n < 0 || off+n > s.Size() || (kind == smWrite && int64(len(p)) != n) ||
		(kind == smZero && len(p) != 0) || (kind != smWrite && kind != smZero) {
		return fmt.Errorf("%w: test entry kind %d, %d bytes at %d", ErrCorrupt, kind, n, off)
	}
	s.mu.Lock()
	if kind == smWrite {
		copy(s.data[off:], p)
	} else {
		clear(s.data[off : off+n])
	}
	s.mu.Unlock()
	s.applied.Store(index)
	return nil
}

// AppliedIndex implements StateMachine: what the last Checkpoint (or
// Restore) made durable.
func (s *blockSM) AppliedIndex() uint64 { return s.durable.Load() }

// Checkpoint implements Checkpointer.
func (s *blockSM) Checkpoint(context.Context) (uint64, error) {
	applied := s.applied.Load()
	if applied > s.durable.Load() {
		s.durable.Store(applied)
	}
	return s.durable.Load(), nil
}

// Snapshot implements StateMachine: the state's size (8 bytes), then the
// state.
func (s *blockSM) Snapshot(w io.Writer) error {
	var head [8]byte
	binary.LittleEndian.PutUint64(head[:], uint64(s.Size()))
	if _, err := w.Write(head[:]); err != nil {
		return err
	}
	_, err := w.Write(s.bytes())
	return err
}

// Restore implements StateMachine.
func (s *blockSM) Restore(r io.Reader, index uint64) error {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return fmt.Errorf("test: snapshot header: %w", err)
	}
	if size := int64(binary.LittleEndian.Uint64(head[:])); size != s.Size() {
		return fmt.Errorf("%w: test snapshot of %d bytes, state has %d", ErrCorrupt, size, s.Size())
	}
	b := make([]byte, s.Size())
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("test: snapshot data: %w", err)
	}
	s.mu.Lock()
	copy(s.data, b)
	s.mu.Unlock()
	s.applied.Store(index)
	s.durable.Store(index)
	return nil
}

var (
	_ StateMachine = (*blockSM)(nil)
	_ Checkpointer = (*blockSM)(nil)
)
