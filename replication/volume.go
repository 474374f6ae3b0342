package replication

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"basalt/pkg/backend"
)

// ErrReplicaTooSmall: Volume.Grow to a size the local replica does not
// hold yet.
var ErrReplicaTooSmall = errors.New("replication: the local replica is smaller than the volume")

// maxWriteChunk bounds the data of one write proposal; larger writes are
// proposed in pieces (NVMe promises no atomicity beyond a block anyway).
const maxWriteChunk = 1 << 20

// Volume is a replicated block device: a Group plus this node's replica, a
// local backend.Backend. It implements backend.Backend for the target and
// StateMachine for the group.
//
// Writes (WriteAt, Trim, WriteZeroes) are proposed as operations (op.go) and
// return once committed on a majority of the group and applied to the local
// replica; a read waits for a read barrier (leadership confirmed, every
// earlier commit applied) and then reads the local replica. On a node that
// does not lead the group, I/O fails with an error wrapping
// backend.ErrInaccessible (ErrNotLeader), or backend.ErrTransition while no
// leader is known (ErrNoLeader): the target reports the matching ANA state
// and the host uses another path. Flush is a read barrier: an acknowledged
// write is already durable in the write buffers of a majority.
type Volume struct {
	group     atomic.Pointer[Group]
	local     backend.Backend
	size      atomic.Int64 // bytes; only grows (Grow), never past local's size
	blockSize int
	applied   atomic.Uint64 // highest index applied to local
	durable   atomic.Uint64 // highest index whose effect local made durable (Flush)
	closed    atomic.Bool
}

var (
	_ backend.Backend = (*Volume)(nil)
	_ StateMachine    = (*Volume)(nil)
	_ Checkpointer    = (*Volume)(nil)
)

// NewVolume makes local the replica of g's volume and starts g. g must have
// been added with a nil state machine (AddGroup(id, members, nil)); else
// NewVolume panics. With g nil it returns a Volume to pass to AddGroup as the
// state machine, which binds it. Host.AddVolume does all of it in one call.
func NewVolume(g *Group, local backend.Backend) *Volume {
	v := &Volume{local: local, blockSize: local.BlockSize()}
	v.size.Store(local.Size())
	if g != nil {
		if err := g.attach(v); err != nil {
			panic(fmt.Sprintf("replication: NewVolume: %v", err))
		}
	}
	return v
}

// AddVolume joins (or bootstraps) group id as a volume whose replica on this
// node is local.
func (h *Host) AddVolume(id GroupID, members []NodeID, local backend.Backend) (*Volume, error) {
	v := NewVolume(nil, local)
	if _, err := h.AddGroup(id, members, v); err != nil {
		return nil, err
	}
	return v, nil
}

func (v *Volume) bind(g *Group) { v.group.Store(g) }

// g returns the volume's group, or ErrStopped for a Volume never bound to
// one.
func (v *Volume) g() (*Group, error) {
	if g := v.group.Load(); g != nil {
		return g, nil
	}
	return nil, ErrStopped
}

// Group returns the volume's group.
func (v *Volume) Group() *Group { return v.group.Load() }

// Local returns the local replica.
func (v *Volume) Local() backend.Backend { return v.local }

// Size implements backend.Backend: the volume's current size, which Grow
// may raise at any time (never lower).
func (v *Volume) Size() int64 { return v.size.Load() }

// Grow makes the volume size bytes, which the local replica must already
// hold: the caller grows the replica first. A size at or below the current
// one changes nothing (volumes never shrink). A size beyond the local
// replica's is an error wrapping ErrReplicaTooSmall, and one that is not a
// multiple of the block size an error wrapping backend.ErrMisaligned. It
// is safe to call while I/O is in flight: operations checked before it
// see the old size, those after it the new one.
//
// Growing is local: each node grows its Volume when its replica has grown,
// and no write to the new blocks may be proposed before every replica has
// (the cluster's two-phase resize sees to it): Apply refuses an entry past
// the size with ErrCorrupt, which stops the group on that node.
func (v *Volume) Grow(size int64) error {
	if size%int64(v.blockSize) != 0 {
		return fmt.Errorf("replication: growing to %d bytes in %d-byte blocks: %w", size, v.blockSize,
			backend.ErrMisaligned)
	}
	if local := v.local.Size(); size > local {
		return fmt.Errorf("%w: growing to %d bytes, the local replica has %d", ErrReplicaTooSmall, size, local)
	}
	for {
		cur := v.size.Load()
		if size <= cur || v.size.CompareAndSwap(cur, size) {
			return nil
		}
	}
}

// BlockSize implements backend.Backend.
func (v *Volume) BlockSize() int { return v.blockSize }

// ReadAt implements backend.Backend.
func (v *Volume) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := v.check(off, int64(len(p))); err != nil {
		return err
	}
	g, err := v.g()
	if err != nil {
		return err
	}
	if err := g.ReadBarrier(ctx); err != nil {
		return err
	}
	return v.local.ReadAt(ctx, p, off)
}

// WriteAt implements backend.Backend. WriteFUA needs nothing more: the write
// is durable on a majority when WriteAt returns.
func (v *Volume) WriteAt(ctx context.Context, p []byte, off int64, _ backend.WriteFlags) error {
	if err := v.check(off, int64(len(p))); err != nil {
		return err
	}
	g, err := v.g()
	if err != nil {
		return err
	}
	if err := v.checkSpace(g, off, int64(len(p))); err != nil {
		return err
	}
	for len(p) > 0 {
		n := min(len(p), maxWriteChunk)
		if err := g.proposeEntry(ctx, encodeOp(opWrite, off, int64(n), p[:n])); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// Flush implements backend.Backend: a read barrier, which fails where this
// node does not lead.
func (v *Volume) Flush(ctx context.Context) error {
	if v.closed.Load() {
		return backend.ErrClosed
	}
	g, err := v.g()
	if err != nil {
		return err
	}
	return g.ReadBarrier(ctx)
}

// Trim implements backend.Backend.
func (v *Volume) Trim(ctx context.Context, off, n int64) error {
	return v.propose(ctx, opTrim, off, n)
}

// WriteZeroes implements backend.Backend.
func (v *Volume) WriteZeroes(ctx context.Context, off, n int64) error {
	return v.propose(ctx, opWriteZeroes, off, n)
}

// propose proposes a data-less operation on [off, off+n).
func (v *Volume) propose(ctx context.Context, kind opKind, off, n int64) error {
	if err := v.check(off, n); err != nil {
		return err
	}
	g, err := v.g()
	if err != nil {
		return err
	}
	return g.proposeEntry(ctx, encodeOp(kind, off, n, nil))
}

// Close implements backend.Backend: later calls fail with backend.ErrClosed.
// It neither closes the local replica (its owner does) nor leaves the group
// (Host.RemoveGroup does).
func (v *Volume) Close() error {
	if v.closed.Swap(true) {
		return backend.ErrClosed
	}
	return nil
}

// AsyncWrites implements backend.AsyncWriter.
func (v *Volume) AsyncWrites() bool { return true }

// WriteAtAsync implements backend.AsyncWriter: it proposes a write of p
// (copied into the proposal before it returns) at off and calls done with
// the result on the group's loop. The target uses it so that a write waits
// for its commit without holding a goroutine; simulations, to drive I/O
// from the goroutine that polls. Writes larger than 1 MiB are refused
// (ErrTooLarge); the target's transfers are smaller (MDTS).
func (v *Volume) WriteAtAsync(p []byte, off int64, _ backend.WriteFlags, done func(error)) {
	if err := v.check(off, int64(len(p))); err != nil {
		done(err)
		return
	}
	if len(p) > maxWriteChunk {
		done(fmt.Errorf("%w: asynchronous write of %d bytes", ErrTooLarge, len(p)))
		return
	}
	g, err := v.g()
	if err == nil {
		err = v.checkSpace(g, off, int64(len(p)))
	}
	if err != nil {
		done(err)
		return
	}
	g.proposeEntryAsync(encodeOp(opWrite, off, int64(len(p)), p), done)
}

// TrimAsync is Trim, calling done on the group's loop.
func (v *Volume) TrimAsync(off, n int64, done func(error)) {
	g, err := v.g()
	if err == nil {
		err = v.check(off, n)
	}
	if err != nil {
		done(err)
		return
	}
	g.proposeEntryAsync(encodeOp(opTrim, off, n, nil), done)
}

// ReadAtAsync waits for a read barrier, then reads p at off from the local
// replica and calls done, both on the group's loop.
func (v *Volume) ReadAtAsync(p []byte, off int64, done func(error)) {
	g, err := v.g()
	if err == nil {
		err = v.check(off, int64(len(p)))
	}
	if err != nil {
		done(err)
		return
	}
	g.ReadBarrierAsync(func(err error) {
		if err == nil {
			err = v.local.ReadAt(context.Background(), p, off)
		}
		done(err)
	})
}

// checkSpace refuses, before it is proposed, a write the local replica
// could not take (backend.SpaceChecker), keeping free as headroom the bytes
// that may be in flight: at most the write buffer's admission limit
// (space.go). A replica that still fills up when the entry applies stops
// the group on that node, so the check leaves that room. Other replicas
// hold the same blocks, so the leader's answer stands for them.
func (v *Volume) checkSpace(g *Group, off, n int64) error {
	sc, ok := v.local.(backend.SpaceChecker)
	if !ok {
		return nil
	}
	return sc.CheckSpace(off, n, g.host.space.limit)
}

// check validates a range the way backends do.
func (v *Volume) check(off, n int64) error {
	bs, size := int64(v.blockSize), v.size.Load()
	switch {
	case v.closed.Load():
		return backend.ErrClosed
	case off%bs != 0 || n%bs != 0:
		return fmt.Errorf("replication: offset %d length %d: %w", off, n, backend.ErrMisaligned)
	case off < 0 || n < 0 || off > size || n > size-off:
		return fmt.Errorf("replication: offset %d length %d size %d: %w", off, n, size, backend.ErrOutOfRange)
	}
	return nil
}

// Apply implements StateMachine: it executes the operation on the local
// replica. Block operations are idempotent, so applying an entry again after
// a crash is harmless.
func (v *Volume) Apply(ctx context.Context, index uint64, data []byte) error {
	o, err := decodeOp(data)
	if err != nil {
		return err
	}
	if size := v.size.Load(); o.offset%int64(v.blockSize) != 0 || o.length%int64(v.blockSize) != 0 ||
		o.offset > size || o.length > size-o.offset {
		return fmt.Errorf("%w: %v at %d of %d bytes does not fit the volume", ErrCorrupt, o.kind, o.offset, o.length)
	}
	switch o.kind {
	case opWrite:
		err = v.local.WriteAt(ctx, o.data, o.offset, 0)
	case opTrim:
		err = v.local.Trim(ctx, o.offset, o.length)
	case opWriteZeroes:
		err = v.local.WriteZeroes(ctx, o.offset, o.length)
	}
	if err != nil {
		return fmt.Errorf("replication: applying a %v at %d: %w", o.kind, o.offset, err)
	}
	v.applied.Store(index)
	return nil
}

// AppliedIndex implements StateMachine: the index up to which the local
// replica has made the applied operations durable (at its last Flush).
func (v *Volume) AppliedIndex() uint64 { return v.durable.Load() }

// Checkpoint implements Checkpointer: it flushes the local replica, so that
// every operation applied so far is durable. It runs on the group's loop,
// like Apply.
func (v *Volume) Checkpoint(ctx context.Context) (uint64, error) {
	applied := v.applied.Load()
	if applied <= v.durable.Load() {
		return v.durable.Load(), nil
	}
	if err := v.local.Flush(ctx); err != nil {
		return v.durable.Load(), fmt.Errorf("replication: flushing the local replica: %w", err)
	}
	v.durable.Store(applied)
	return applied, nil
}
