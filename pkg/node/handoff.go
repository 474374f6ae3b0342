package node

import (
	"context"
	"slices"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/cluster"
	"basalt/replication"
)

// A planned stop hands off leadership first. A node that stops while it
// leads a volume leaves that volume without a leader until the others
// notice (an election timeout and an election: the pause a host sees on a
// crash). Handed off first, with the node still up, the pause is one
// leadership transfer: the chosen voter, brought up to the leader's last
// entry, campaigns at once, and the ANA state follows it.

const (
	// handoffPoll is how often HandOff looks at its groups' leaders.
	handoffPoll = 5 * time.Millisecond
	// handoffRetry is how long HandOff waits on a transfer before it asks
	// again (Raft gives a transfer up after an election timeout).
	handoffRetry = 600 * time.Millisecond
)

// HandOff hands every leadership this cluster node holds, of its volumes'
// groups and of the metadata group, to a caught-up voter
// (cluster.HandoffTarget, preferring where the leader balance would put
// each volume without this node), and waits until it leads none of them,
// for at most bound or until ctx ends, or until for handoffRetry none of
// them had a voter to go to. It returns the groups it still
// leads then (logged), nil on a node without a cluster. The node keeps
// serving meanwhile: hosts follow the ANA state to the new leaders.
func (n *Node) HandOff(ctx context.Context, bound time.Duration) []cluster.GroupID {
	if n.cl == nil || n.cl.cluster == nil || n.cl.host == nil {
		return nil
	}
	cp, clk := n.cl, n.cl.host.Clock()
	start := clk.Now()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	s, self := cp.cluster.State(), cp.cluster.Self().ID
	prefs := cluster.HandoffPreferences(s, self)
	groups := cp.ledGroups(s, self)
	asked := map[cluster.GroupID]time.Time{}
	moved, hope := 0, start // hope: when a transfer was last under way
	for {
		for id, g := range groups {
			if !g.IsLeader() {
				delete(groups, id)
				moved++
				continue
			}
			if t, ok := asked[id]; ok && clk.Since(t) < handoffRetry {
				hope = clk.Now()
				continue
			}
			if to := cluster.HandoffTarget(s, self, id, g.Status(), prefs[id]); to != 0 {
				g.TransferLeadership(to)
				asked[id], hope = clk.Now(), clk.Now()
			}
		}
		// With no voter to take any of them (the others are down or far
		// behind) for a while, waiting longer only delays the stop.
		if len(groups) == 0 || clk.Since(hope) > handoffRetry || !sleepCtx(ctx, clk.NewTimer(handoffPoll)) {
			break
		}
	}
	left := slices.Sorted(func(yield func(cluster.GroupID) bool) {
		for id := range groups {
			if !yield(id) {
				return
			}
		}
	})
	took := clk.Since(start).Round(time.Millisecond)
	if len(left) > 0 {
		n.log.Warn("leadership handoff incomplete: stopping anyway", "handed_off", moved, "still_leading", left,
			"took", took)
	} else if moved > 0 {
		n.log.Info("leadership handed off", "groups", moved, "took", took)
	}
	return left
}

// ledGroups returns the groups this node leads: the metadata group and
// its volumes' groups.
func (cp *clusterParts) ledGroups(s *cluster.State, self cluster.NodeID) map[cluster.GroupID]cluster.Group {
	out := map[cluster.GroupID]cluster.Group{}
	if g := cp.cluster.MetadataGroup(); g.IsLeader() {
		out[cluster.MetadataGroup] = g
	}
	for _, v := range s.Volumes {
		if !v.HasReplica(self) {
			continue
		}
		if g := cp.host.Group(replication.GroupID(v.ID)); g != nil && g.IsLeader() {
			out[v.ID] = newRaftGroup(g)
		}
	}
	return out
}

// sleepCtx waits for t or ctx, and reports whether t fired.
func sleepCtx(ctx context.Context, t clock.Timer) bool {
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
