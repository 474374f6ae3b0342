package volume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"basalt/pkg/backend"
	"basalt/replication"
)

// Snapshots of a replicated volume (doc.go, "Operations"): taking one,
// deleting one and rolling back to one are operations in the volume's Raft
// log, like writes, so every replica takes the snapshot at the same index:
// with every entry before it and none after. The entry's data is the
// snapshot's name.

// MaxSnapshotName is the longest snapshot name, in bytes.
const MaxSnapshotName = 255

var (
	// ErrSnapshotExists: a snapshot of that name exists.
	ErrSnapshotExists = errors.New("volume: snapshot exists")
	// ErrNoSnapshot: no snapshot of that name.
	ErrNoSnapshot = errors.New("volume: no such snapshot")
	// ErrNoSnapshots: the local replica takes no snapshots.
	ErrNoSnapshots = errors.New("volume: the replica takes no snapshots")
	// ErrSnapshotName: the name is not a valid snapshot name.
	ErrSnapshotName = errors.New("volume: invalid snapshot name")
)

// Snapshotter is a local replica that takes snapshots of itself (a
// pkg/store volume). Its operations are idempotent, as applying an entry
// twice after a crash must be harmless: creating a snapshot that exists and
// deleting one that does not succeed and do nothing.
type Snapshotter interface {
	// CreateSnapshot takes a crash-consistent snapshot holding every write
	// completed before the call, durable (with those writes) when it
	// returns.
	CreateSnapshot(ctx context.Context, name string) error
	// DeleteSnapshot deletes the snapshot; its space returns in the
	// background.
	DeleteSnapshot(name string) error
	// RollbackTo makes the replica read as the snapshot does, durable when
	// it returns.
	RollbackTo(ctx context.Context, name string) error
	// SnapshotNames lists the snapshots, in the order taken.
	SnapshotNames() []string
}

// snapshotterOf returns local, or what it wraps, as a Snapshotter, or nil.
func snapshotterOf(local backend.Backend) Snapshotter {
	for local != nil {
		if s, ok := local.(Snapshotter); ok {
			return s
		}
		u, ok := local.(interface{ Unwrap() backend.Backend })
		if !ok {
			return nil
		}
		local = u.Unwrap()
	}
	return nil
}

func (k opKind) named() bool { return k == opSnapshot || k == opDeleteSnapshot || k == opRollback }

// encodeNamed returns a proposal entry for a snapshot operation: the op
// header with offset 0 and length the name's, then the name.
func encodeNamed(kind opKind, name string) []byte {
	return encodeOp(kind, 0, int64(len(name)), []byte(name))
}

// checkNamed validates a decoded snapshot operation.
func checkNamed(o op) error {
	if o.offset != 0 || o.length != int64(len(o.data)) || checkSnapshotName(string(o.data)) != nil {
		return fmt.Errorf("%w: %v of %d bytes at %d naming %q", ErrCorrupt, o.kind, o.length, o.offset, o.data)
	}
	return nil
}

// checkSnapshotName refuses an empty or overlong name, or one with '@' or
// '/' (the store's and the API's separators).
func checkSnapshotName(name string) error {
	if name == "" || len(name) > MaxSnapshotName || strings.ContainsAny(name, "@/") {
		return fmt.Errorf("%w %q: want 1 to %d bytes without '@' or '/'", ErrSnapshotName, name, MaxSnapshotName)
	}
	return nil
}

// CreateSnapshot takes a snapshot of the volume on every replica, at the
// same index of the log. Only the leader proposes; the name must be new.
func (v *Volume) CreateSnapshot(ctx context.Context, name string) error {
	return v.proposeNamed(ctx, opSnapshot, name)
}

// DeleteSnapshot deletes the named snapshot on every replica.
func (v *Volume) DeleteSnapshot(ctx context.Context, name string) error {
	return v.proposeNamed(ctx, opDeleteSnapshot, name)
}

// Rollback makes every replica read as the named snapshot does: writes
// ordered before it in the log are undone, writes after it apply on top.
func (v *Volume) Rollback(ctx context.Context, name string) error {
	return v.proposeNamed(ctx, opRollback, name)
}

// Snapshots lists the local replica's snapshots, in the order taken.
func (v *Volume) Snapshots() ([]string, error) {
	sn := snapshotterOf(v.local)
	if sn == nil {
		return nil, ErrNoSnapshots
	}
	return sn.SnapshotNames(), nil
}

// proposeNamed checks a snapshot operation against the local replica (the
// leader's, which has applied what it committed) and proposes it. v.snapMu
// orders the check and the proposal against the volume's other snapshot
// operations, so two that conflict are not both accepted.
func (v *Volume) proposeNamed(ctx context.Context, kind opKind, name string) error {
	if err := checkSnapshotName(name); err != nil {
		return err
	}
	sn := snapshotterOf(v.local)
	if sn == nil {
		return ErrNoSnapshots
	}
	g, err := v.g()
	if err != nil {
		return mapErr(err)
	}
	if !g.IsLeader() {
		return mapErr(replication.ErrNotLeader)
	}
	v.snapMu.Lock()
	defer v.snapMu.Unlock()
	exists := slices.Contains(sn.SnapshotNames(), name)
	switch {
	case kind == opSnapshot && exists:
		return fmt.Errorf("%w: %q", ErrSnapshotExists, name)
	case kind != opSnapshot && !exists:
		return fmt.Errorf("%w: %q", ErrNoSnapshot, name)
	}
	return mapErr(g.ProposeEntry(ctx, encodeNamed(kind, name)))
}

// applyNamed applies a snapshot operation at index. A snapshot or a
// rollback leaves everything applied so far durable (the replica destages
// first), so the durable index moves to index: the log may be compacted
// past it and the operation is not applied again. A deletion the replica
// refuses (a clone of the snapshot lives on this node) is logged and
// skipped: it only keeps space, never changes what the volume reads.
func (v *Volume) applyNamed(ctx context.Context, o op, index uint64) error {
	v.peer.applying.Store(index)
	sn := snapshotterOf(v.local)
	if sn == nil {
		return fmt.Errorf("volume: applying a %v: %w", o.kind, ErrNoSnapshots)
	}
	name := string(o.data)
	var err error
	switch o.kind {
	case opSnapshot:
		err = sn.CreateSnapshot(ctx, name)
	case opRollback:
		if err = sn.RollbackTo(ctx, name); err == nil {
			v.changes.record(index, 0, v.size.Load())
		}
	default:
		if derr := sn.DeleteSnapshot(name); derr != nil {
			if log := v.peer.log.Load(); log != nil {
				log.Warn("snapshot not deleted on this replica", "snapshot", name, "index", index, "err", derr)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("volume: applying a %v of %q: %w", o.kind, name, err)
	}
	if o.kind != opDeleteSnapshot {
		v.durable.Store(max(v.durable.Load(), index))
	}
	v.applied.Store(index)
	return nil
}

// warnRestoredSnapshots says, when a replica that takes snapshots is
// restored from a stream, which snapshots it keeps: the stream carries the
// volume's blocks, not its snapshots, so snapshots taken or deleted in the
// entries the stream stands for are not reflected on this replica (its own
// snapshots stay as they were, each exact for the index it was taken at).
func (v *Volume) warnRestoredSnapshots(index uint64) {
	sn := snapshotterOf(v.local)
	log := v.peer.log.Load()
	if sn == nil || log == nil {
		return
	}
	log.Warn("replica restored from a snapshot stream: its snapshots are kept as they were, "+
		"snapshots created or deleted on the leader before this index are not reflected here",
		"index", index, "snapshots", strings.Join(sn.SnapshotNames(), ","))
}
