package volume

import (
	"context"
	"errors"
	"sync/atomic"

	"basalt/pkg/backend"
	"basalt/replication"
)

// Repairs (doc.go, "Reads from another replica"): once a read has been
// served from another replica, the leader proposes a repair operation for
// each run of blocks its own replica still cannot read, carrying the bytes
// read and the index they are the value as of (the base). Every replica
// applies it in log order, and writes it only where its change log proves
// that no entry after the base changed the range; otherwise, or when the
// change log cannot tell, it skips it.

// RepairStats are a Volume's repair counts.
type RepairStats struct {
	Proposed uint64 // repair operations this node proposed
	Written  uint64 // repairs applied here that rewrote their range
	Skipped  uint64 // repairs applied here that changed nothing: the range changed since the base, or no record tells
	Failed   uint64 // repairs whose write to the local replica failed (the group goes on)
}

type repairCounters struct{ proposed, written, skipped, failed atomic.Uint64 }

// RepairStats returns the Volume's repair counts.
func (v *Volume) RepairStats() RepairStats {
	s := &v.peer.stats
	return RepairStats{Proposed: s.proposed.Load(), Written: s.written.Load(), Skipped: s.skipped.Load(),
		Failed: s.failed.Load()}
}

// proposeRepairs proposes the repair of the blocks of [off, off+len(data))
// the local replica still cannot read, with data the range's value as of
// base. It does not wait for them: the host's read is already served.
func (v *Volume) proposeRepairs(ctx context.Context, g *replication.Group, off int64, data []byte, base uint64) {
	for _, r := range v.unreadable(ctx, off, int64(len(data))) {
		for r.off < r.end {
			n := min(r.end-r.off, maxWriteChunk)
			if err := v.checkSpace(g, r.off, n); err != nil {
				v.logRepair("a repair was not proposed", r.off, n, err)
				break
			}
			v.peer.stats.proposed.Add(1)
			at := r.off
			g.ProposeEntryAsync(encodeRepair(at, base, data[at-off:at-off+n]), func(err error) {
				if err != nil {
					v.logRepair("a repair proposal failed", at, n, err)
				}
			})
			r.off += n
		}
	}
}

// unreadable returns the runs of blocks of [off, off+n) the local replica
// answers a media error for, reading them one block at a time (a range of
// one block is not read again).
func (v *Volume) unreadable(ctx context.Context, off, n int64) []extent {
	bs := int64(v.blockSize)
	if n == bs {
		return []extent{{off: off, end: off + n}}
	}
	var runs []extent
	buf := make([]byte, bs)
	for at := off; at < off+n; at += bs {
		if err := v.local.ReadAt(ctx, buf, at); !errors.Is(err, backend.ErrMedia) {
			continue
		}
		if k := len(runs) - 1; k >= 0 && runs[k].end == at {
			runs[k].end += bs
			continue
		}
		runs = append(runs, extent{off: at, end: at + bs})
	}
	return runs
}

// applyRepair applies o, a repair at index, to the local replica. It never
// fails the group: a repair skipped, or one whose write failed, leaves the
// replica as it was, which holds the range's value already wherever it can
// read it (the argument is in doc.go).
func (v *Volume) applyRepair(ctx context.Context, o op, index uint64) {
	if !v.unchangedSince(o.base, extent{off: o.offset, end: o.offset + o.length}) {
		v.peer.stats.skipped.Add(1)
		return
	}
	var err error
	if v.stage != nil {
		err = v.stage.WriteStaged(o.data, o.offset, index)
	} else {
		err = v.local.WriteAt(ctx, o.data, o.offset, 0)
	}
	v.changes.record(index, o.offset, o.length) // whatever of it was written
	if err != nil {
		v.peer.stats.failed.Add(1)
		v.logRepair("a repair could not be written", o.offset, o.length, err)
		return
	}
	v.peer.stats.written.Add(1)
}

// unchangedSince reports whether the change log proves that no entry
// applied here after base changed r; false when it cannot tell (its floor
// is above base, or it is off).
func (v *Volume) unchangedSince(base uint64, r extent) bool {
	changed, ok := v.changes.since(base)
	if !ok {
		return false
	}
	for _, c := range changed {
		if c.off < r.end && r.off < c.end {
			return false
		}
	}
	return true
}

func (v *Volume) logRepair(msg string, off, n int64, err error) {
	if log := v.peer.log.Load(); log != nil {
		log.Warn(msg, "offset", off, "length", n, "err", err)
	}
}
