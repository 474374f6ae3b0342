package clustertest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"basalt/pkg/backend"
	rvolume "basalt/pkg/volume"
)

// Snapshots of a fake volume: the group records their names, in the order
// taken, for every replica at once (the real volume takes them in its Raft
// log, pkg/volume); a rollback changes no data. Only the group's leader
// takes them, as the real volume's proposals.

// CreateSnapshot records name (cluster's snapshotter).
func (v *volume) CreateSnapshot(_ context.Context, name string) error {
	return v.snapshotOp(name, func(g *group, exists bool) error {
		if exists {
			return fmt.Errorf("%w: %q", rvolume.ErrSnapshotExists, name)
		}
		g.snaps = append(g.snaps, name)
		return nil
	})
}

// DeleteSnapshot forgets name.
func (v *volume) DeleteSnapshot(_ context.Context, name string) error {
	return v.snapshotOp(name, func(g *group, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: %q", rvolume.ErrNoSnapshot, name)
		}
		g.snaps = slices.DeleteFunc(g.snaps, func(s string) bool { return s == name })
		return nil
	})
}

// Rollback checks that name exists.
func (v *volume) Rollback(_ context.Context, name string) error {
	return v.snapshotOp(name, func(_ *group, exists bool) error {
		if !exists {
			return fmt.Errorf("%w: %q", rvolume.ErrNoSnapshot, name)
		}
		return nil
	})
}

// Snapshots lists the names, in the order taken.
func (v *volume) Snapshots() ([]string, error) {
	v.h.n.mu.Lock()
	defer v.h.n.mu.Unlock()
	return slices.Clone(v.h.g.snaps), nil
}

func (v *volume) snapshotOp(name string, op func(g *group, exists bool) error) error {
	if name == "" || strings.ContainsAny(name, "@/") {
		return fmt.Errorf("%w %q", rvolume.ErrSnapshotName, name)
	}
	v.h.n.mu.Lock()
	defer v.h.n.mu.Unlock()
	if v.h.g.leader != v.h.self {
		return fmt.Errorf("clustertest: not the leader: %w", backend.ErrInaccessible)
	}
	return op(v.h.g, slices.Contains(v.h.g.snaps, name))
}
