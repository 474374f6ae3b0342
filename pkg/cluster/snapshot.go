package cluster

import (
	"context"
	"errors"
	"fmt"

	"basalt/pkg/backend"
	"basalt/pkg/volume"
)

// Snapshots of a volume (docs/ARCHITECTURE.md, "Snapshots and clones"):
// taking, deleting and rolling back to one are operations in the volume's
// own Raft log (volume.Volume.CreateSnapshot etc.), proposed by the node
// that leads the volume's group; the API finds that node (pkg/api,
// snapshots.go) and asks it through LocalSnapshot.

// Errors of a snapshot operation beyond the common classes.
var (
	// ErrNoReplicaHere: this node holds no replica of the volume (the API
	// asks another).
	ErrNoReplicaHere = errors.New("cluster: no replica of that volume on this node")
	// ErrNotVolumeLeader: this node holds a replica but does not lead the
	// volume's group (the API asks another).
	ErrNotVolumeLeader = errors.New("cluster: this node does not lead the volume's group")
	// ErrRefused: the operation is refused in the volume's present state
	// (a host is connected).
	ErrRefused = errors.New("cluster: refused")
)

// SnapshotOp names a snapshot operation.
type SnapshotOp string

// Snapshot operations.
const (
	SnapshotList     SnapshotOp = "list"
	SnapshotCreate   SnapshotOp = "create"
	SnapshotDelete   SnapshotOp = "delete"
	SnapshotRollback SnapshotOp = "rollback"
)

// SnapshotRequest is one snapshot operation on a volume.
type SnapshotRequest struct {
	Op   SnapshotOp `json:"op"`
	Name string     `json:"name,omitempty"` // the snapshot (not for list)
}

// SnapshotStatus is one snapshot as the volume's leader's replica holds it.
type SnapshotStatus struct {
	Name string `json:"name"`
	// Order is the snapshot's place among the volume's, 1 the oldest.
	Order int `json:"order"`
	// PinnedBytes is the space only this snapshot holds (what deleting it
	// returns), as the leader's replica counts it; 0 when the replica does
	// not report it.
	PinnedBytes int64 `json:"pinned_bytes"`
}

// snapshotter is a replicated volume that takes snapshots (volume.Volume).
type snapshotter interface {
	CreateSnapshot(ctx context.Context, name string) error
	DeleteSnapshot(ctx context.Context, name string) error
	Rollback(ctx context.Context, name string) error
	Snapshots() ([]string, error)
}

// SnapshotSpaceReporter is a local replica that reports the space each of
// its snapshots pins (a pkg/store volume).
type SnapshotSpaceReporter interface {
	SnapshotPinnedBytes() map[string]int64
}

// LocalSnapshot runs req on this node's replica of volume id, which must
// lead the volume's group, and returns the volume's snapshots after it.
// Errors wrap ErrNoReplicaHere or ErrNotVolumeLeader (ask another node),
// ErrNotFound (no such snapshot), ErrExists (the name is taken), ErrInvalid
// (a bad name or op) or ErrUnsupported.
func (c *Cluster) LocalSnapshot(ctx context.Context, id GroupID, req SnapshotRequest) ([]SnapshotStatus, error) {
	c.rec.mu.Lock()
	lv := c.rec.mu.live[id]
	c.rec.mu.Unlock()
	if lv == nil {
		return nil, fmt.Errorf("%w: group %d", ErrNoReplicaHere, id)
	}
	v := lv.spec.Load()
	sn, ok := lv.repl.(snapshotter)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: snapshots of volume %q", ErrUnsupported, v.Name)
	case !lv.group.IsLeader():
		return nil, fmt.Errorf("%w: volume %q (leader: node %d)", ErrNotVolumeLeader, v.Name, lv.group.Leader())
	}
	if err := snapshotOp(ctx, sn, req); err != nil {
		return nil, fmt.Errorf("volume %q: %s %q: %w", v.Name, req.Op, req.Name, snapshotErr(err))
	}
	names, err := sn.Snapshots()
	if err != nil {
		return nil, fmt.Errorf("volume %q: %w", v.Name, snapshotErr(err))
	}
	var pinned map[string]int64
	if r, ok := lv.replica.(SnapshotSpaceReporter); ok {
		pinned = r.SnapshotPinnedBytes()
	}
	out := make([]SnapshotStatus, len(names))
	for i, n := range names {
		out[i] = SnapshotStatus{Name: n, Order: i + 1, PinnedBytes: pinned[n]}
	}
	return out, nil
}

func snapshotOp(ctx context.Context, sn snapshotter, req SnapshotRequest) error {
	switch req.Op {
	case SnapshotList:
		return nil
	case SnapshotCreate:
		return sn.CreateSnapshot(ctx, req.Name)
	case SnapshotDelete:
		return sn.DeleteSnapshot(ctx, req.Name)
	case SnapshotRollback:
		return sn.Rollback(ctx, req.Name)
	}
	return fmt.Errorf("%w: snapshot op %q: want list, create, delete or rollback", ErrInvalid, req.Op)
}

// snapshotErr adds the cluster class to a replicated volume's error.
func snapshotErr(err error) error {
	switch {
	case errors.Is(err, volume.ErrSnapshotExists):
		return fmt.Errorf("%w: %w", ErrExists, err)
	case errors.Is(err, volume.ErrNoSnapshot):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, volume.ErrNoSnapshots):
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	case errors.Is(err, volume.ErrSnapshotName):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, backend.ErrInaccessible): // it lost the leadership, or stopped
		return fmt.Errorf("%w: %w", ErrNotVolumeLeader, err)
	}
	return err
}
