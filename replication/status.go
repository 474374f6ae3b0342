package replication

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// Role is a node's part in a group.
type Role string

const (
	RoleFollower  Role = "follower"
	RoleCandidate Role = "candidate" // including pre-candidate
	RoleLeader    Role = "leader"
)

// GroupStatus describes a group as seen by this node.
type GroupStatus struct {
	Group   GroupID
	Node    NodeID
	Role    Role
	Leader  NodeID // 0: none known
	Term    uint64
	Commit  uint64 // highest index known committed
	Applied uint64 // highest index applied to the state machine
	// FirstIndex and LastIndex bound the log kept in the write buffer; the
	// entries before FirstIndex were compacted.
	FirstIndex, LastIndex uint64
	// Members is the configuration this node applied last.
	Members Membership
	// Peers is the leader's view of each member's replication (empty on a
	// follower).
	Peers []PeerStatus
	// CommitLatency is a moving average (1/8 weight per sample) of the time
	// from Propose to applied on this node, over proposals made here.
	CommitLatency time.Duration
	// Proposals counts proposals completed here; SnapshotsSent and
	// SnapshotsReceived count snapshots streamed to and restored from peers.
	Proposals, SnapshotsSent, SnapshotsReceived uint64
	// SnapshotBytesSent counts the bytes of the snapshots streamed from
	// here, finished or in flight.
	SnapshotBytesSent uint64
	// Degraded reports, on the leader, that some member is catching up
	// (PeerStatus.CatchingUp). Always false on a follower, which cannot
	// tell. Sampled once per tick, with Peers.
	Degraded bool
	// Quiesced reports that the group is quiesced here: Raft is not ticked
	// until something wakes it (doc.go, "Quiescence").
	Quiesced bool
	// LeaseUntil is when this leader's read lease ends (zero: none held).
	LeaseUntil time.Time
	// Err is why the group stopped, if it did.
	Err error
}

// PeerStatus is the leader's view of one member.
type PeerStatus struct {
	Node NodeID
	// Match is the highest index known replicated on the member; Next the
	// next one the leader will send.
	Match, Next uint64
	// State is "probe", "replicate" or "snapshot".
	State string
	// RecentActive reports whether the member answered within the last
	// election timeout.
	RecentActive bool
	// Behind is how many entries the member lags the leader's last index.
	Behind uint64
	// CatchingUp reports that the member is being brought up to date: a
	// snapshot streams to it, or it lags by more than CompactionMargin
	// entries.
	CatchingUp bool
	// Snapshot is the snapshot streaming to the member, nil when none.
	Snapshot *SnapshotProgress
}

// publishStatus copies the loop's state for Status. With progress it also
// copies the leader's view of its peers, which costs an allocation per peer:
// the loop asks for it once per tick.
func (c *core) publishStatus(progress bool) {
	bs := c.rn.BasicStatus()
	g := c.g
	g.status.Lock()
	defer g.status.Unlock()
	s := &g.status.s
	s.Group, s.Node = g.id, NodeID(c.self)
	s.Role, s.Leader, s.Term = roleOf(bs.RaftState), NodeID(bs.Lead), bs.Term
	s.Commit, s.Applied = bs.Commit, c.applied
	s.FirstIndex, s.LastIndex = c.s.snapIndex+1, c.s.lastIndex()
	s.CommitLatency = c.stats.latency
	s.Proposals, s.SnapshotsSent, s.SnapshotsReceived = c.stats.proposals, c.stats.snapshotsSent, c.stats.snapshotsReceived
	s.LeaseUntil = c.reads.leaseUntil
	s.Quiesced = c.quiesce.on
	s.SnapshotBytesSent = c.catchup.bytesSent
	for _, sp := range c.catchup.streams {
		s.SnapshotBytesSent += uint64(sp.sent.Load())
	}
	if !progress {
		return
	}
	s.Peers, s.Degraded = s.Peers[:0], false
	if bs.RaftState != raft.StateLeader {
		return
	}
	last := c.s.lastIndex()
	c.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		s.Peers = append(s.Peers, c.peerStatus(id, pr, last))
	})
	s.Degraded = degraded(s.Node, s.Peers)
}

func progressState(s tracker.StateType) string {
	switch s {
	case tracker.StateReplicate:
		return "replicate"
	case tracker.StateSnapshot:
		return "snapshot"
	default:
		return "probe"
	}
}
