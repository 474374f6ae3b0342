package volume

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/qos"
	"basalt/replication"
)

// maxWriteChunk bounds the data of one write proposal; larger writes are
// proposed in pieces (NVMe promises no atomicity beyond a block anyway).
const maxWriteChunk = 1 << 20

// Volume is a replicated block device: a replication.Group plus this node's
// replica, a local backend.Backend. It implements backend.Backend for the
// target and replication.StateMachine for the group.
//
// Writes (WriteAt, Trim, WriteZeroes) are proposed as operations (op.go) and
// return once committed on a majority of the group and applied to the local
// replica; a read waits for a read barrier (leadership confirmed, every
// earlier commit applied) and then reads the local replica. On a node that
// does not lead the group, I/O fails with an error wrapping
// backend.ErrInaccessible (replication.ErrNotLeader), or
// backend.ErrTransition while no leader is known (replication.ErrNoLeader;
// errors.go): the target reports the matching ANA state and the host uses
// another path. Flush is a read barrier: an acknowledged write is already
// durable in the write buffers of a majority.
//
// It counts its I/O (Counters), for the metrics to read.
type Volume struct {
	group     atomic.Pointer[replication.Group]
	local     backend.Backend
	clock     clock.Clock
	size      atomic.Int64 // bytes; only grows (Grow), never past local's size
	blockSize int
	applied   atomic.Uint64 // highest index applied to local
	durable   atomic.Uint64 // highest index whose effect local made durable (Flush)
	closed    atomic.Bool
	counters  Counters
	stage     Stager                 // local, when it stages by reference (staged.go); else nil
	changes   *changeLog             // what applied entries changed, for delta snapshots (changes.go)
	identity  atomic.Pointer[[]byte] // SnapshotIdentity (delta.go)
	peer      peerState              // reads from other replicas, repairs (peer.go, repair.go)
	throttle  *qos.Throttle          // the volume's limits, enforced where it leads (qos.go)
	snapMu    sync.Mutex             // orders snapshot operations' checks and proposals (snapops.go)
}

var (
	_ backend.Backend          = (*Volume)(nil)
	_ backend.AsyncWriter      = (*Volume)(nil)
	_ replication.StateMachine = (*Volume)(nil)
	_ replication.Checkpointer = (*Volume)(nil)
	_ Instrumented             = (*Volume)(nil)
	_ replication.LogRetainer  = (*Volume)(nil)
)

// New makes local the replica of g's volume and starts g. g must have been
// added with a nil state machine (Host.AddGroup(id, members, nil)); else,
// or if the group does not start (replication.Group.Attach), New returns
// the error and g stays without a state machine.
func New(g *replication.Group, local backend.Backend) (*Volume, error) {
	v := newVolume(local, g.Host().Clock())
	v.SetSnapshotIdentity(defaultIdentity(g.ID()))
	v.group.Store(g)
	if err := g.Attach(v); err != nil {
		return nil, fmt.Errorf("volume: starting %v: %w", g.ID(), err)
	}
	return v, nil
}

// Add joins (or bootstraps) group id on h as a volume whose replica on this
// node is local: Host.AddGroup with the Volume as the state machine. On
// error the group is not added.
func Add(h *replication.Host, id replication.GroupID, members []replication.NodeID, local backend.Backend) (*Volume, error) {
	v := newVolume(local, h.Clock())
	v.SetSnapshotIdentity(defaultIdentity(id))
	g, err := h.AddGroup(id, members, v)
	if err != nil {
		return nil, err
	}
	// Nothing can reach v before Add returns but the group's loop, whose
	// calls (Apply, Snapshot, Restore, Checkpoint) do not use the group.
	v.group.Store(g)
	return v, nil
}

// newVolume returns a Volume over local bound to no group: its I/O fails
// with replication.ErrStopped until it is.
func newVolume(local backend.Backend, clk clock.Clock) *Volume {
	v := &Volume{local: local, clock: clk, blockSize: local.BlockSize(), stage: stagerOf(local), changes: newChangeLog()}
	v.size.Store(local.Size())
	v.throttle = qos.NewThrottle(clk, &v.counters.qos, 0)
	return v
}

// g returns the volume's group, or replication.ErrStopped for a Volume
// never bound to one.
func (v *Volume) g() (*replication.Group, error) {
	if g := v.group.Load(); g != nil {
		return g, nil
	}
	return nil, replication.ErrStopped
}

// Group returns the volume's group.
func (v *Volume) Group() *replication.Group { return v.group.Load() }

// Local returns the local replica.
func (v *Volume) Local() backend.Backend { return v.local }

// Counters returns the volume's I/O counters (Instrumented).
func (v *Volume) Counters() *Counters { return &v.counters }

// Size implements backend.Backend: the volume's current size, which Grow
// may raise at any time (never lower).
func (v *Volume) Size() int64 { return v.size.Load() }

// BlockSize implements backend.Backend.
func (v *Volume) BlockSize() int { return v.blockSize }

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
		return fmt.Errorf("volume: growing to %d bytes in %d-byte blocks: %w", size, v.blockSize,
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

// ReadAt implements backend.Backend.
func (v *Volume) ReadAt(ctx context.Context, p []byte, off int64) error {
	start := v.clock.Now()
	err := mapErr(v.readAt(ctx, p, off))
	v.counters.record(OpRead, len(p), v.clock.Now().Sub(start), err)
	return err
}

func (v *Volume) readAt(ctx context.Context, p []byte, off int64) error {
	if err := v.check(off, int64(len(p))); err != nil {
		return err
	}
	g, err := v.g()
	if err != nil {
		return err
	}
	if err := v.throttleWait(ctx, g, qos.Read, len(p)); err != nil {
		return err
	}
	if err := g.ReadBarrier(ctx); err != nil {
		return err
	}
	err = v.local.ReadAt(ctx, p, off)
	if v.fallsBack(err) {
		return v.readFromPeer(ctx, p, off, err) // peer.go
	}
	return err
}

// WriteAt implements backend.Backend. WriteFUA needs nothing more: the write
// is durable on a majority when WriteAt returns.
func (v *Volume) WriteAt(ctx context.Context, p []byte, off int64, _ backend.WriteFlags) error {
	start := v.clock.Now()
	err := mapErr(v.writeAt(ctx, p, off))
	v.counters.record(OpWrite, len(p), v.clock.Now().Sub(start), err)
	return err
}

func (v *Volume) writeAt(ctx context.Context, p []byte, off int64) error {
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
	if err := v.throttleWait(ctx, g, qos.Write, len(p)); err != nil {
		return err
	}
	for len(p) > 0 {
		n := min(len(p), maxWriteChunk)
		if err := g.ProposeEntry(ctx, encodeOp(opWrite, off, int64(n), p[:n])); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// Flush implements backend.Backend: a read barrier, which fails where this
// node does not lead.
func (v *Volume) Flush(ctx context.Context) error {
	start := v.clock.Now()
	err := mapErr(v.flush(ctx))
	v.counters.record(OpFlush, 0, v.clock.Now().Sub(start), err)
	return err
}

func (v *Volume) flush(ctx context.Context) error {
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
	return v.propose(ctx, OpTrim, opTrim, off, n)
}

// WriteZeroes implements backend.Backend.
func (v *Volume) WriteZeroes(ctx context.Context, off, n int64) error {
	return v.propose(ctx, OpWriteZeroes, opWriteZeroes, off, n)
}

// propose proposes a data-less operation on [off, off+n), counted as op.
func (v *Volume) propose(ctx context.Context, op Op, kind opKind, off, n int64) error {
	start := v.clock.Now()
	err := v.check(off, n)
	if err == nil {
		var g *replication.Group
		if g, err = v.g(); err == nil {
			err = v.throttleWait(ctx, g, qos.Write, 0)
		}
		if err == nil {
			err = g.ProposeEntry(ctx, encodeOp(kind, off, n, nil))
		}
	}
	err = mapErr(err)
	v.counters.record(op, 0, v.clock.Now().Sub(start), err)
	return err
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

// checkSpace refuses, before it is proposed, a write the local replica
// could not take (backend.SpaceChecker), keeping free as headroom the bytes
// that may be in flight: at most the write buffer's admission limit
// (replication.Host.AdmissionLimit). A replica that still fills up when the
// entry applies stops the group on that node, so the check leaves that
// room. Other replicas hold the same blocks, so the leader's answer stands
// for them.
//
// Only the leader answers: on any other node the proposal is refused with
// the ANA error that sends the host to another path, which a full or
// failed local replica must not hide behind a space or media error.
func (v *Volume) checkSpace(g *replication.Group, off, n int64) error {
	sc, ok := v.local.(backend.SpaceChecker)
	if !ok || !g.IsLeader() {
		return nil
	}
	return sc.CheckSpace(off, n, g.Host().AdmissionLimit())
}

// check validates a range the way backends do.
func (v *Volume) check(off, n int64) error {
	bs, size := int64(v.blockSize), v.size.Load()
	switch {
	case v.closed.Load():
		return backend.ErrClosed
	case off%bs != 0 || n%bs != 0:
		return fmt.Errorf("volume: offset %d length %d: %w", off, n, backend.ErrMisaligned)
	case off < 0 || n < 0 || off > size || n > size-off:
		return fmt.Errorf("volume: offset %d length %d size %d: %w", off, n, size, backend.ErrOutOfRange)
	}
	return nil
}

// Apply implements replication.StateMachine: it executes the operation on
// the local replica. Block operations are idempotent, so applying an entry
// again after a crash is harmless. A repair is written only where nothing
// changed its range since its base, and never fails (repair.go).
func (v *Volume) Apply(ctx context.Context, index uint64, data []byte) error {
	o, err := decodeOp(data)
	if err != nil {
		return err
	}
	if o.kind.named() {
		return v.applyNamed(ctx, o, index) // snapops.go
	}
	if size := v.size.Load(); o.offset%int64(v.blockSize) != 0 || o.length%int64(v.blockSize) != 0 ||
		o.offset > size || o.length > size-o.offset {
		return fmt.Errorf("%w: %v at %d of %d bytes does not fit the volume", ErrCorrupt, o.kind, o.offset, o.length)
	}
	v.peer.applying.Store(index)
	if o.kind == opRepair {
		v.applyRepair(ctx, o, index) // repair.go: it never stops the group
		v.applied.Store(index)
		return nil
	}
	switch {
	case v.stage != nil:
		err = v.applyStaged(o, index)
	case o.kind == opWrite:
		err = v.local.WriteAt(ctx, o.data, o.offset, 0)
	case o.kind == opTrim:
		err = v.local.Trim(ctx, o.offset, o.length)
	case o.kind == opWriteZeroes:
		err = v.local.WriteZeroes(ctx, o.offset, o.length)
	}
	if err != nil {
		return fmt.Errorf("volume: applying a %v at %d: %w", o.kind, o.offset, err)
	}
	v.changes.record(index, o.offset, o.length)
	v.applied.Store(index)
	return nil
}

// AppliedIndex implements replication.StateMachine: the index up to which
// the local replica has made the applied operations durable: at its last
// Flush, or, on a replica that stages by reference, as its stripes reach
// the drives (stagedDurable), so that the log is compacted as they do.
func (v *Volume) AppliedIndex() uint64 {
	if v.stage != nil {
		return max(v.durable.Load(), v.stagedDurable())
	}
	return v.durable.Load()
}

// Checkpoint implements replication.Checkpointer: it flushes the local
// replica, so that every operation applied so far is durable. It runs on
// the group's loop, like Apply.
func (v *Volume) Checkpoint(ctx context.Context) (uint64, error) {
	applied := v.applied.Load()
	if durable := v.AppliedIndex(); applied <= durable {
		return durable, nil
	}
	if err := v.local.Flush(ctx); err != nil {
		return v.AppliedIndex(), fmt.Errorf("volume: flushing the local replica: %w", err)
	}
	v.durable.Store(applied)
	return applied, nil
}
