package node

import (
	"context"
	"slices"

	"basalt/pkg/cluster"
	"basalt/replication"
)

// Members implements cluster.MemberGroup.
func (rg raftGroup) Members() cluster.Membership {
	m := rg.g.Members()
	return cluster.Membership{Voters: toClusterIDs(m.Voters), Learners: toClusterIDs(m.Learners),
		Outgoing: toClusterIDs(m.Outgoing)}
}

// AddPeers implements cluster.MemberGroup.
func (rg raftGroup) AddPeers(peers []cluster.NodeID) { rg.g.AddPeers(toReplIDs(peers)) }

// ChangeMembers implements cluster.MemberGroup.
func (rg raftGroup) ChangeMembers(ctx context.Context, changes ...cluster.MemberChange) error {
	out := make([]replication.MemberChange, len(changes))
	for i, c := range changes {
		var op replication.MemberOp
		switch c.Op {
		case cluster.AddLearner:
			op = replication.AddLearner
		case cluster.AddVoter:
			op = replication.AddVoter
		case cluster.RemoveMember:
			op = replication.RemoveMember
		}
		out[i] = replication.MemberChange{Op: op, Node: replication.NodeID(c.Node)}
	}
	return mapErr(rg.g.ChangeMembers(ctx, out...))
}

func toClusterIDs(ids []replication.NodeID) []cluster.NodeID {
	out := make([]cluster.NodeID, 0, len(ids))
	for _, id := range ids {
		out = append(out, cluster.NodeID(id))
	}
	return out
}

// joins reports whether this host is not among members: it then joins the
// group as a new member instead of bootstrapping it.
func (r raftReplicator) joins(members []cluster.NodeID) bool {
	return !slices.Contains(members, cluster.NodeID(r.h.NodeID()))
}

// The metadata's state machine keeps its persisted index equal to its
// group's, over entries that carry no command.
var _ replication.IndexRecorder = (*cluster.Machine)(nil)
