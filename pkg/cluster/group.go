package cluster

import (
	"context"

	"basalt/pkg/backend"
)

// Group is what the cluster uses of a Raft group (replication.Group).
type Group interface {
	// Propose replicates data and returns once it is committed and
	// applied on this node; on a follower it fails with an error
	// wrapping ErrNotLeader.
	Propose(ctx context.Context, data []byte) error
	// ReadBarrier returns once this node's state machine reflects every
	// entry committed before the call (a linearizable read point).
	ReadBarrier(ctx context.Context) error
	// Leader returns the current leader, 0 if unknown.
	Leader() NodeID
	// IsLeader reports whether this node leads the group.
	IsLeader() bool
	// Watch returns a channel that receives the leader (0: none) after
	// every change. It is closed when the group stops.
	Watch() <-chan NodeID
	// Status describes the group for status pages and metrics.
	Status() GroupStatus
	// TransferLeadership asks this node, if it leads the group, to hand
	// the leadership to node to. It returns at once and does nothing on a
	// follower; Watch tells when the leadership moved. While a transfer
	// is pending the leader accepts no proposals (they wait or fail as
	// during an election), and it gives up after an election timeout.
	TransferLeadership(to NodeID)
}

// GroupStatus is a Raft group's state as this node sees it.
type GroupStatus struct {
	Leader  NodeID `json:"leader"`
	Role    string `json:"role"` // leader, follower, candidate, pre-candidate
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	// LastIndex is the last entry in this node's log.
	LastIndex uint64 `json:"last_index"`
	// Progress is the leader's view of each member's match index (empty
	// on followers).
	Progress map[NodeID]uint64 `json:"progress,omitempty"`
	// RecentActive is the leader's view of which members answered within
	// the last election timeout (empty on followers). Progress and
	// RecentActive are sampled once per Raft tick, LastIndex more often.
	RecentActive map[NodeID]bool `json:"recent_active,omitempty"`
	// CatchingUp is the leader's view of each member being brought up to
	// date (a snapshot streaming to it, or far behind in the log).
	CatchingUp map[NodeID]CatchUp `json:"catching_up,omitempty"`
	// CommitLatency is a moving average, in seconds, of proposals made
	// here from Propose to applied.
	CommitLatency float64 `json:"commit_latency"`
	// Err says why the group stopped on this node, if it did.
	Err string `json:"error,omitempty"`
	// Failed is set when the group failed on this node (Err says why) and
	// was fenced: it serves nothing here until the volume is opened again.
	Failed bool `json:"failed,omitempty"`
}

// CatchUp is how far a member that is being brought up to date has come.
type CatchUp struct {
	// Behind is how many entries it lags the leader's last index.
	Behind uint64 `json:"behind"`
	// SnapshotSent and SnapshotTotal are the bytes of the snapshot
	// streaming to it (Total 0: unknown); Delta: it carries only what
	// changed since the member's applied index.
	SnapshotSent  int64 `json:"snapshot_sent,omitempty"`
	SnapshotTotal int64 `json:"snapshot_total,omitempty"`
	Delta         bool  `json:"delta,omitempty"`
}

// ReplicationStatus is the replication layer's own counters on this node.
type ReplicationStatus struct {
	// Rejected counts, by reason, the frames and messages from peers that
	// the node refused (replication.RejectReason names the reasons).
	Rejected map[string]uint64 `json:"rejected"`
}

// ReplicationReporter is implemented by a Replicator that reports its
// counters (Local includes them).
type ReplicationReporter interface {
	ReplicationStatus() ReplicationStatus
}

// Replicator starts and stops this node's Raft groups (the replication
// layer, adapted in pkg/node; a fake in tests).
type Replicator interface {
	// StartMetadata starts the metadata group with every node as member.
	StartMetadata(members []NodeID, m *Machine) (Group, error)
	// OpenVolume starts volume group id on the local replica and returns
	// the group and the replicated backend hosts write to (it answers
	// backend.ErrInaccessible on a node that does not lead the group).
	OpenVolume(id GroupID, members []NodeID, local backend.Backend) (Group, backend.Backend, error)
	// CloseVolume stops volume group id on this node; with deleteLog it
	// also deletes the group's log (the volume left this node), otherwise
	// the log stays for the next start (the node is shutting down, after
	// its Raft host was closed). It does not close the local replica,
	// which the caller owns.
	CloseVolume(id GroupID, deleteLog bool) error
	// DropDormant deletes the logs of groups found at start that were not
	// opened again and that keep rejects (volumes deleted while this node
	// was down).
	DropDormant(keep func(GroupID) bool) error
}
