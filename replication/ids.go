package replication

import (
	"errors"
	"strconv"
)

// NodeID names a node for all time: it is never reused, and it is not an
// address (a node keeps its ID when it moves). 0 means "none".
type NodeID uint64

// String returns "n" and the number, as logs show it.
func (n NodeID) String() string { return "n" + strconv.FormatUint(uint64(n), 10) }

// GroupID names a Raft group: one per volume, plus the cluster's metadata
// group. 0 is not a valid group.
type GroupID uint64

// String returns "g" and the number, as logs show it.
func (g GroupID) String() string { return "g" + strconv.FormatUint(uint64(g), 10) }

// Errors. They name what happened in Raft terms only; pkg/volume wraps
// those a volume returns to the target with a backend error class (the
// not-leader ones with backend.ErrInaccessible or backend.ErrTransition), so
// that the target maps them to an ANA state without knowing Raft.
var (
	// ErrNotLeader: this node does not lead the group; the host should use the
	// leader's path (ANA Inaccessible).
	ErrNotLeader = errors.New("replication: not the leader")
	// ErrNoLeader: the group has no leader now (an election is running), or
	// this node lost leadership while the request was in flight, so its outcome
	// is unknown; retry soon, on whichever path becomes optimized (ANA
	// Transition).
	ErrNoLeader = errors.New("replication: no leader, election in progress")
	// ErrStopped: the group was removed, the host closed, or the group failed
	// (a storage or state-machine error); this node will not serve it.
	ErrStopped = errors.New("replication: group stopped")
	// ErrOrphanReplica: a group whose only voter is this node has a state
	// machine ahead of its log (the log was dropped when it failed).
	ErrOrphanReplica = errors.New("replication: replica ahead of its log, with no peer to catch up from")
	// ErrProposalDropped: the leader refused the proposal (too much
	// uncommitted data, or a leadership transfer in progress); retry.
	ErrProposalDropped = errors.New("replication: proposal dropped")
	// ErrTooLarge: the proposal exceeds Config.MaxProposalSize.
	ErrTooLarge = errors.New("replication: proposal too large")
	// ErrGroupExists: AddGroup for a group this host already runs.
	ErrGroupExists = errors.New("replication: group already added")
	// ErrUnknownGroup: the host runs no such group.
	ErrUnknownGroup = errors.New("replication: unknown group")
	// ErrClosed: the host was closed.
	ErrClosed = errors.New("replication: host closed")
	// ErrCorrupt: the log region holds records that cannot be interpreted as
	// a Raft log (a gap, a record that does not decode, a hard state that
	// contradicts the log).
	ErrCorrupt = errors.New("replication: log corrupt")
	// ErrConfig: the Config is invalid.
	ErrConfig = errors.New("replication: invalid config")
	// ErrSnapshotRejected: a snapshot stream was refused or cut short.
	ErrSnapshotRejected = errors.New("replication: snapshot rejected")
)
