package volume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/backend"
	"basalt/replication"
)

// Peer reads: a block the local replica cannot read back (backend.ErrMedia:
// more of its stripe lost than the store's parity covers) is read from
// another replica of the volume instead, and written back through the group
// (repair.go). See doc.go, "Reads from another replica".

// PeerReader reads n bytes at off of group's volume from the replica on
// another node, reading that node's local replica directly (never through
// the group), once that replica has applied at least minIndex. It returns
// the bytes and hi, that replica's Volume.ReflectsAtMost after the read: the
// bytes reflect no entry after hi. The node's wiring sets one (trying the
// group's other voters in turn); it must be safe for concurrent use.
type PeerReader func(ctx context.Context, group replication.GroupID, off int64, n int, minIndex uint64) (
	data []byte, hi uint64, err error)

// ErrReplicaBehind: ReadReplica's local replica had not applied the index
// asked for when its context ended.
var ErrReplicaBehind = errors.New("volume: the local replica has not applied the index asked for")

// Bounds of the fallback to another replica.
const (
	// maxPeerReads bounds the reads of one Volume served from other
	// replicas at once; a read beyond it answers its media error.
	maxPeerReads = 64
	// catchUpWait bounds how long the leader waits, after a peer read, for
	// its own replica to reach what the bytes reflect (ReadAt).
	catchUpWait = time.Second
	// appliedPoll is how often a wait for an applied index looks again.
	appliedPoll = time.Millisecond
	// maxLogged bounds the ranges whose repair has been logged; the set
	// starts again when full.
	maxLogged = 4096
)

// peerState is a Volume's fallback to other replicas and its repairs.
type peerState struct {
	reader   atomic.Pointer[PeerReader]
	log      atomic.Pointer[slog.Logger]
	inflight atomic.Int64
	// applying is the highest index whose operation Apply has started (or
	// a Restore's index): the local replica reflects no entry after it.
	applying atomic.Uint64
	stats    repairCounters
	mu       sync.Mutex
	logged   map[extent]struct{} // ranges whose peer read was logged
}

// SetPeerReader makes the Volume read from other replicas, with r, what its
// own replica cannot read (backend.ErrMedia), and log such reads and the
// repairs to log. nil r turns the fallback off. Safe at any time.
func (v *Volume) SetPeerReader(r PeerReader, log *slog.Logger) {
	if log != nil {
		v.peer.log.Store(log)
	}
	if r == nil {
		v.peer.reader.Store(nil)
		return
	}
	v.peer.reader.Store(&r)
}

// PeerRepairs returns how many reads were served from another replica
// because the local one answered a media error.
func (c *Counters) PeerRepairs() uint64 { return c.peerRepairs.Load() }

// AppliedThrough returns an index the local replica reflects every entry up
// to: the last operation applied here, or the group's published applied
// index (after a restart, what the replica held on its drives), whichever
// is higher.
func (v *Volume) AppliedThrough() uint64 {
	applied := v.applied.Load()
	if g := v.group.Load(); g != nil {
		applied = max(applied, g.Status().Applied)
	}
	return applied
}

// ReflectsAtMost returns an index the local replica reflects no entry
// after (read after the data it bounds): the last operation Apply started,
// or AppliedThrough when higher. A replica restored from a snapshot may
// hold, until it applies past them, blocks of entries after the snapshot's
// index, which its sender had applied.
func (v *Volume) ReflectsAtMost() uint64 { return max(v.peer.applying.Load(), v.AppliedThrough()) }

// ReadReplica reads p at off from the local replica, never through the
// group: what another node's leader asks for when its own replica cannot
// read the range. It waits until the replica has applied minIndex
// (AppliedThrough) or ctx ends (ErrReplicaBehind), then reads and returns
// ReflectsAtMost: p reflects every entry up to minIndex and none after the
// index returned. A range the replica cannot read either is its media
// error; one outside the volume, a range error.
func (v *Volume) ReadReplica(ctx context.Context, p []byte, off int64, minIndex uint64) (uint64, error) {
	if err := v.check(off, int64(len(p))); err != nil {
		return 0, err
	}
	if !v.waitApplied(ctx, minIndex, 0) {
		return 0, fmt.Errorf("%w: index %d asked for, %d applied", ErrReplicaBehind, minIndex, v.AppliedThrough())
	}
	if err := v.local.ReadAt(ctx, p, off); err != nil {
		return 0, err
	}
	return v.ReflectsAtMost(), nil
}

// waitApplied waits until AppliedThrough reaches index; false when ctx
// ended first, or limit passed on the Volume's clock (0: no limit).
func (v *Volume) waitApplied(ctx context.Context, index uint64, limit time.Duration) bool {
	if v.AppliedThrough() >= index {
		return true
	}
	t := v.clock.NewTicker(appliedPoll)
	defer t.Stop()
	var expired <-chan time.Time
	if limit > 0 {
		timer := v.clock.NewTimer(limit)
		defer timer.Stop()
		expired = timer.C()
	}
	for v.AppliedThrough() < index {
		select {
		case <-ctx.Done():
			return false
		case <-expired:
			return false
		case <-t.C():
		}
	}
	return true
}

// fallsBack reports whether a local read that returned err is read from
// another replica instead.
func (v *Volume) fallsBack(err error) bool {
	return errors.Is(err, backend.ErrMedia) && v.peer.reader.Load() != nil
}

// readFromPeer serves the read of p at off, which the local replica
// answered with localErr (a media error), from another replica, and
// proposes the repair of the blocks the local replica cannot read
// (repair.go). The other replica must have applied AppliedThrough as it is
// now, which the read barrier has taken past every write acknowledged
// before the read; and before returning the bytes the local replica must
// reach what they reflect (the peer's ReflectsAtMost), so that no later
// read served here sees an older value. Any failure answers localErr,
// with the reason.
func (v *Volume) readFromPeer(ctx context.Context, p []byte, off int64, localErr error) error {
	rp, g := v.peer.reader.Load(), v.group.Load()
	if rp == nil || g == nil {
		return localErr
	}
	if v.peer.inflight.Add(1) > maxPeerReads {
		v.peer.inflight.Add(-1)
		return fmt.Errorf("%w (%d reads from other replicas in flight already)", localErr, maxPeerReads)
	}
	defer v.peer.inflight.Add(-1)
	base := v.AppliedThrough()
	data, hi, err := (*rp)(ctx, g.ID(), off, len(p), base)
	if err == nil && len(data) != len(p) {
		err = fmt.Errorf("a replica returned %d bytes for %d", len(data), len(p))
	}
	if err == nil && !v.waitApplied(ctx, hi, catchUpWait) {
		err = fmt.Errorf("this replica did not reach index %d, which the bytes read reflect", hi)
	}
	if err != nil {
		return fmt.Errorf("%w; not read from another replica either: %v", localErr, err)
	}
	copy(p, data)
	v.counters.peerRepairs.Add(1)
	v.logPeerRead(off, len(p), base, localErr)
	v.proposeRepairs(ctx, g, off, data, base)
	return nil
}

// logPeerRead logs, once per range, that it was read from another replica.
func (v *Volume) logPeerRead(off int64, n int, base uint64, localErr error) {
	log := v.peer.log.Load()
	if log == nil {
		return
	}
	r := extent{off: off, end: off + int64(n)}
	v.peer.mu.Lock()
	if v.peer.logged == nil || len(v.peer.logged) >= maxLogged {
		v.peer.logged = make(map[extent]struct{})
	}
	_, seen := v.peer.logged[r]
	v.peer.logged[r] = struct{}{}
	v.peer.mu.Unlock()
	if !seen {
		log.Warn("blocks the local replica cannot read were read from another replica",
			"offset", off, "length", n, "base_index", base, "local_err", localErr)
	}
}

// readPeer is the end of ReadAtAsync when the local read failed with a
// media error and another replica is tried: it runs on its own goroutine,
// not the group's loop, since it waits for another node.
func (c *completion) readPeer(localErr error) {
	c.complete(c.vol.readFromPeer(context.Background(), c.read, c.off, localErr))
}
