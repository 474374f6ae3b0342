package replication

import (
	"sync/atomic"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// catchupState is what a leader's loop tracks of followers that catch up:
// the snapshot streams in flight (their progress, written by the transport's
// goroutine) and the retention target it last computed (doc.go, "Log
// compaction"). Its zero value is ready; only the loop touches it, but for
// the counters inside a streamProgress.
type catchupState struct {
	streams map[uint64]*streamProgress // follower -> the stream to it
	// bytesSent counts the snapshot bytes streamed from here, over
	// finished streams (successful or not).
	bytesSent uint64
	retain    struct {
		valid          bool
		at             uint64 // the applied index it was computed at
		floor, target  uint64 // the lowest index it could keep, and the target
		budget, margin uint64
	}
}

// streamProgress is one snapshot stream's progress: sent counts the bytes
// written so far, total the bytes the state machine said it would write (0:
// unknown), delta whether it is a delta.
type streamProgress struct {
	sent, total atomic.Int64
	delta       atomic.Bool
}

// startStream records a stream to follower to and returns its progress.
func (cs *catchupState) startStream(to uint64) *streamProgress {
	if cs.streams == nil {
		cs.streams = make(map[uint64]*streamProgress)
	}
	p := &streamProgress{}
	cs.streams[to] = p
	return p
}

// endStream forgets the stream to follower to, counting its bytes.
func (cs *catchupState) endStream(to uint64) {
	if p := cs.streams[to]; p != nil {
		cs.bytesSent += uint64(p.sent.Load())
		delete(cs.streams, to)
	}
}

// retainBytes is the byte budget of the log a leader keeps for lagging
// followers: Config.RetainBytes, by default a quarter of the write buffer;
// 0 when retention is off.
func (c *core) retainBytes() uint64 {
	switch rb := c.h.cfg.RetainBytes; {
	case rb < 0:
		return 0
	case rb > 0:
		return uint64(rb)
	}
	return uint64(c.h.space.size / 4)
}

// retainTarget lowers a routine compaction target so that a leader's log
// keeps, for the slowest follower, the entries from its match index on, as
// long as the entries from the new target to the applied index take at
// most retainBytes in the write buffer; past that it keeps what fits. On a
// follower, or with no follower behind target, target stands. The walk
// over the entries is redone every compactStep applied entries (or when
// the slowest follower or the log's start moved), so it costs the loop
// little while a follower stays behind.
func (c *core) retainTarget(target uint64) uint64 {
	budget := c.retainBytes()
	if budget == 0 || !c.isLeader {
		return target
	}
	slowest := target
	c.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id != c.self {
			slowest = min(slowest, pr.Match)
		}
	})
	if slowest >= target {
		return target
	}
	floor := max(slowest, c.s.snapIndex)
	r := &c.catchup.retain
	if r.valid && r.floor == floor && r.budget == budget && c.applied < r.at+c.compactStep() {
		return min(target, r.target)
	}
	kept, bytes := c.applied, uint64(0)
	for kept > floor {
		e := c.s.ents[kept-c.s.snapIndex-1]
		cost := uint64(entryCost(int(e.size)))
		if bytes+cost > budget {
			break
		}
		bytes += cost
		kept--
	}
	r.valid, r.at, r.floor, r.target, r.budget = true, c.applied, floor, kept, budget
	return min(target, kept)
}

// catchingUpBehind is how many entries a follower may lag the leader's last
// index and still count as keeping up: the compaction margin, which the
// pipelining of a healthy follower stays within.
func (c *core) catchingUpBehind() uint64 { return c.h.cfg.CompactionMargin }

// peerStatus is the leader's view of member id (status.go): Raft's
// progress, how far it lags, and the snapshot streaming to it.
func (c *core) peerStatus(id uint64, pr tracker.Progress, last uint64) PeerStatus {
	p := PeerStatus{Node: NodeID(id), Match: pr.Match, Next: pr.Next, State: progressState(pr.State),
		RecentActive: pr.RecentActive || c.recentlyHeard(id)}
	if last > pr.Match {
		p.Behind = last - pr.Match
	}
	if sp := c.catchup.streams[id]; sp != nil {
		p.Snapshot = &SnapshotProgress{Sent: sp.sent.Load(), Total: sp.total.Load(), Delta: sp.delta.Load()}
	}
	p.CatchingUp = id != c.self && (p.Snapshot != nil || pr.State == tracker.StateSnapshot ||
		p.Behind > c.catchingUpBehind())
	return p
}

// degraded reports whether a leader's group runs with a member out of
// step: one catches up (a snapshot, or far behind in the log). RecentActive
// is not used: Raft clears it for every peer at each quorum check.
func degraded(self NodeID, peers []PeerStatus) bool {
	for _, p := range peers {
		if p.Node != self && p.CatchingUp {
			return true
		}
	}
	return false
}

// SnapshotProgress is a snapshot stream's progress, as the leader sees it.
type SnapshotProgress struct {
	// Sent is the bytes streamed so far; Total the bytes the stream will
	// carry, when the state machine said (0: unknown).
	Sent, Total int64
	// Delta reports a delta snapshot (DeltaSnapshotter).
	Delta bool
}
