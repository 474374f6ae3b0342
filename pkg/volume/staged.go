package volume

import (
	"context"
	"fmt"

	"basalt/pkg/backend"
)

// Stager is a local replica that stages writes by reference: it keeps the
// bytes Apply hands it where they lie in the group's log region instead of
// copying them, and reports how far its staged writes have reached its
// drives. A pkg/store volume on a store opened with
// store.Options.StageByReference is one (doc.go, "Staged once").
type Stager interface {
	backend.Backend
	// StagesByReference reports whether WriteStaged and TrimStaged may be
	// used (the store was opened to stage by reference).
	StagesByReference() bool
	// WriteStaged stages p at off without copying it; p stays valid and
	// unchanged until StagedFloor passes token.
	WriteStaged(p []byte, off int64, token uint64) error
	// TrimStaged unmaps [off, off+n) in the same staged sequence.
	TrimStaged(off, n int64, token uint64) error
	// StagedFloor returns the token of the oldest staged write not yet on
	// the drives, ok false when none is.
	StagedFloor() (token uint64, ok bool)
}

// stagerOf returns local as a Stager if it stages by reference, else nil.
func stagerOf(local backend.Backend) Stager {
	if s, ok := local.(Stager); ok && s.StagesByReference() {
		return s
	}
	return nil
}

// applyStaged applies o, the operation of entry index, to a replica that
// stages by reference: o.data aliases the log region, which the group keeps
// until the log is compacted past index, and compaction never passes
// AppliedIndex, which stays below the staging floor.
func (v *Volume) applyStaged(o op, index uint64) error {
	if o.kind == opWrite {
		return v.stage.WriteStaged(o.data, o.offset, index)
	}
	return v.stage.TrimStaged(o.offset, o.length, index) // trim and write zeroes alike: unmapped blocks read zeros
}

// stagedDurable is AppliedIndex on a replica that stages by reference:
// every applied entry below the oldest one still staged is on the drives
// (or superseded there by a later write), so the log may be compacted up to
// the entry before it; with nothing staged, up to the applied index.
func (v *Volume) stagedDurable() uint64 {
	applied := v.applied.Load()
	if floor, ok := v.stage.StagedFloor(); ok && floor <= applied {
		return floor - 1
	}
	return applied
}

// ReleaseLog implements replication.LogRetainer: before its group drops
// the log (the group fails and is fenced, or is removed), the replica
// destages everything it staged from it. A replica that fails to has
// failed: it serves nothing more, so it never reads the log again.
func (v *Volume) ReleaseLog(ctx context.Context) error {
	if v.stage == nil {
		return nil
	}
	if err := v.local.Flush(ctx); err != nil {
		return fmt.Errorf("volume: destaging what the replica staged from the log: %w", err)
	}
	if _, ok := v.stage.StagedFloor(); ok {
		return fmt.Errorf("volume: the replica still references the log after a flush")
	}
	return nil
}
