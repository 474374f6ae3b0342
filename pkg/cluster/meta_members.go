package cluster

import (
	"context"
	"slices"
	"time"
)

// The metadata group's membership follows State.Nodes: the metadata leader
// adds a node that joined (OpJoinNode) as a learner, promotes it once it has
// caught up, and removes a node the administrator removed (State.Removed).
// Nodes listed in the configuration of the initial members but not
// registered yet are left alone: they are voters from the bootstrap.

// metaMembers takes one step toward that membership; it runs on the
// metadata leader, from the healer's pass.
func (h *healer) metaMembers(ctx context.Context, s *State) {
	mg, ok := h.c.meta.(MemberGroup)
	if !ok {
		return
	}
	m := mg.Members()
	if len(m.Outgoing) > 0 || len(m.Voters) == 0 {
		return
	}
	change, what := metaStep(s, m, h.c.meta.Status(), h.c.cfg.Self.ID)
	if len(change) == 0 {
		return
	}
	h.c.log.Info("changing the metadata group's members", "change", what, "voters", m.Voters, "learners", m.Learners)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := mg.ChangeMembers(cctx, change...); err != nil {
		h.c.log.Warn("metadata membership change not applied; retrying", "change", what, "err", err)
	}
}

// metaStep returns the next change of the metadata group: remove a removed
// node, add a registered node that is no member as a learner, or promote a
// learner that caught up. The leader (self) never removes itself.
func metaStep(s *State, m Membership, st GroupStatus, self NodeID) ([]MemberChange, string) {
	for _, id := range s.Removed {
		if id != self && (slices.Contains(m.Voters, id) || slices.Contains(m.Learners, id)) {
			return []MemberChange{{RemoveMember, id}}, "remove " + id.String()
		}
	}
	for _, n := range s.NodeList() {
		if !slices.Contains(m.Voters, n.ID) && !slices.Contains(m.Learners, n.ID) {
			return []MemberChange{{AddLearner, n.ID}}, "add learner " + n.ID.String()
		}
	}
	for _, id := range m.Learners {
		if st.RecentActive[id] && st.Progress[id] > 0 && withinSlack(st, id) {
			return []MemberChange{{AddVoter, id}}, "promote " + id.String()
		}
	}
	return nil, ""
}

// maxMoves bounds the volumes the rebalancer moves at once across the
// cluster, so that rebalancing a new node never competes with client I/O
// for more than a few streams.
const maxMoves = 2

// rebalance moves one replica from the serving node holding the most to the
// one holding the fewest, when they differ by more than one and fewer than
// maxMoves moves are in progress: a node that joined fills up, one at a
// time. Healing (replace) comes first: rebalance runs only when no volume
// lacks a healthy home.
func (h *healer) rebalance(ctx context.Context, s *State) {
	moving := 0
	for _, v := range s.Volumes {
		if len(v.Want) > 0 || len(v.Learners) > 0 {
			moving++
		}
	}
	if moving >= maxMoves {
		return
	}
	v, from, to := rebalanceMove(s)
	if v == nil {
		return
	}
	want := slices.DeleteFunc(slices.Clone(v.Replicas), func(id NodeID) bool { return id == from })
	want = sortedIDs(append(want, to))
	h.c.log.Info("rebalancing a replica", "volume", v.Name, "from", from, "to", to)
	_ = h.submit(ctx, Command{Op: OpMoveReplicas, Volume: v.Name, ID: v.ID, Nodes: want})
}

// rebalanceMove picks the volume to move and its source and target, or nil.
func rebalanceMove(s *State) (*Volume, NodeID, NodeID) {
	loads := s.loads()
	var most, least *nodeLoad
	for _, n := range s.NodeList() {
		if !n.Serves() {
			continue
		}
		l := loads[n.ID]
		if most == nil || l.replicas > most.replicas {
			most = l
		}
		if least == nil || l.replicas < least.replicas {
			least = l
		}
	}
	if most == nil || most.replicas-least.replicas <= 1 {
		return nil, 0, 0
	}
	for _, v := range s.VolumeList() {
		if len(v.Want) == 0 && len(v.Learners) == 0 && v.IsVoter(most.n.ID) && !v.HasReplica(least.n.ID) {
			return v, most.n.ID, least.n.ID
		}
	}
	return nil, 0, 0
}
