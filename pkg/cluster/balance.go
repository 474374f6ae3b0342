package cluster

import (
	"maps"
	"slices"
	"time"
)

// Leader balance. Every node computes, from the metadata alone, the node
// each volume prefers as its leader (PreferredLeaders), so that every node
// reaches the same answer without talking. On each reconcile pass the
// leader of a volume that prefers another node hands the leadership over
// once that node has caught up (reconciler.balance); a leader whose node
// is in maintenance or draining hands every volume over to a caught-up
// serving voter. Transfers are rate-limited: a few per pass, never the same
// group twice within minTransferInterval, and never a group this node
// gained less than holdAfterGain ago (so that a node shutting down, which
// hands its leaderships off while still active in the metadata, is not
// given them straight back).
const (
	// maxTransfersPerPass bounds the transfers one reconcile pass starts.
	maxTransfersPerPass = 3
	// minTransferInterval is the least time between two transfers of one
	// group started by this node.
	minTransferInterval = 10 * time.Second
	// leaveRetryInterval is that time for a node that leads nothing by
	// its state (maintenance, draining): a transfer that did not happen
	// (the target fell behind, the transfer timed out) is retried sooner.
	leaveRetryInterval = 2 * time.Second
	// holdAfterGain is how long this node keeps a leadership it gained
	// before it balances it away.
	holdAfterGain = 10 * time.Second
	// CaughtUpSlack is how many entries a member's match index may lag
	// the leader's last index and still count as caught up. The leader's
	// view of its members is sampled once per Raft tick while its last
	// index moves with every proposal, so under load an exact match would
	// never be seen; Raft itself brings the transferee up to the last
	// index before it hands over, holding new proposals meanwhile.
	CaughtUpSlack = 64
)

// PreferredLeaders assigns each volume a preferred leader among its voters
// whose node serves (Node.Serves: not in maintenance, draining or out). It
// is a function of s alone, so every node computes the same. Volumes are
// taken in group-ID order and each goes to its candidate with the fewest
// volumes so far, ties rotated by group ID; then, while a chain of volumes
// can each move to another of its candidates so that a node gives up one
// volume to a node with two or more fewer, the chain moves. The result
// spreads the volumes as evenly as their voters allow: with every volume
// on every serving node, each node prefers within one of an even share. A
// volume with no serving voter is left out.
func PreferredLeaders(s *State) map[GroupID]NodeID {
	a := newAssignment(s)
	for a.improve() {
	}
	out := make(map[GroupID]NodeID, len(a.vols))
	for i, v := range a.vols {
		if a.pref[i] != 0 {
			out[v.ID] = a.pref[i]
		}
	}
	return out
}

// assignment is PreferredLeaders' work: the volumes in group-ID order,
// each one's candidates and preferred node, and each node's count.
type assignment struct {
	vols  []*Volume
	cands [][]NodeID
	pref  []NodeID
	count map[NodeID]int
}

// newAssignment makes the greedy first assignment.
func newAssignment(s *State) *assignment {
	vols := slices.SortedFunc(maps.Values(s.Volumes), func(a, b *Volume) int { return cmpID(a.ID, b.ID) })
	a := &assignment{vols: vols, cands: make([][]NodeID, len(vols)), pref: make([]NodeID, len(vols)),
		count: map[NodeID]int{}}
	for i, v := range vols {
		a.cands[i] = servingVoters(s, v)
		if len(a.cands[i]) > 0 {
			a.pref[i] = fewest(a.cands[i], a.count, int(v.ID%GroupID(len(a.cands[i]))))
			a.count[a.pref[i]]++
		}
	}
	return a
}

// improve applies one chain of moves that takes a volume from a node with
// the most volumes (the lowest ID among them first) to one with at least
// two fewer, and reports whether it found one. Each chain lowers the sum
// of the squared counts, so repeated calls end.
func (a *assignment) improve() bool {
	nodes := slices.Collect(maps.Keys(a.count))
	slices.SortFunc(nodes, func(x, y NodeID) int {
		if a.count[x] != a.count[y] {
			return a.count[y] - a.count[x]
		}
		return cmpID(x, y)
	})
	for _, u := range nodes {
		if a.shift(u) {
			return true
		}
	}
	return false
}

// shift searches breadth-first, from node u, for a chain of volumes each
// movable to the node the next one prefers, ending at a node with at
// least two fewer volumes than u, and moves them.
func (a *assignment) shift(u NodeID) bool {
	via := map[NodeID]int{u: -1} // the volume by which a node was reached
	for queue := []NodeID{u}; len(queue) > 0; queue = queue[1:] {
		for i, at := range a.pref {
			if at != queue[0] {
				continue
			}
			for _, w := range a.cands[i] {
				if _, seen := via[w]; seen {
					continue
				}
				via[w] = i
				if a.count[w]+2 <= a.count[u] {
					for n := w; n != u; {
						j := via[n]
						n, a.pref[j] = a.pref[j], n
					}
					a.count[u]--
					a.count[w]++
					return true
				}
				queue = append(queue, w)
			}
		}
	}
	return false
}

func cmpID[T ~uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// servingVoters returns v's voters whose node is known and serves, in ID
// order.
func servingVoters(s *State, v *Volume) []NodeID {
	var out []NodeID
	for _, id := range v.Replicas {
		if n := s.Nodes[id]; n != nil && n.Serves() {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, cmpID)
	return slices.Compact(out)
}

// fewest returns the node of cands with the lowest count, looking from
// index start round: the first such node wins a tie.
func fewest(cands []NodeID, count map[NodeID]int, start int) NodeID {
	best := cands[start]
	for k := 1; k < len(cands); k++ {
		if c := cands[(start+k)%len(cands)]; count[c] < count[best] {
			best = c
		}
	}
	return best
}

// HandoffPreferences is PreferredLeaders as if node self did not serve:
// where each volume's leadership should go when self stops leading.
func HandoffPreferences(s *State, self NodeID) map[GroupID]NodeID {
	if n := s.Nodes[self]; n == nil || !n.Serves() {
		return PreferredLeaders(s)
	}
	c := s.clone()
	c.Nodes[self].State = NodeMaintenance
	return PreferredLeaders(c)
}

// CaughtUp reports whether, by the leader's status st, member n answered
// recently and its log is within CaughtUpSlack entries of the leader's.
func CaughtUp(st GroupStatus, n NodeID) bool {
	match, ok := st.Progress[n]
	return ok && st.RecentActive[n] && match+CaughtUpSlack >= st.LastIndex
}

// HandoffTarget chooses the node that group id, led by self with status
// st, hands its leadership to when self stops leading: prefer if it is a
// caught-up voter, else the caught-up voter on a serving node that is
// furthest along, else any caught-up voter; 0 if there is none. The voters
// are the volume's Replicas, or every member for the metadata group.
func HandoffTarget(s *State, self NodeID, id GroupID, st GroupStatus, prefer NodeID) NodeID {
	v := s.VolumeByID(id)
	isVoter := func(n NodeID) bool { return n != self && (v == nil && id == MetadataGroup || v != nil && v.IsVoter(n)) }
	if prefer != 0 && isVoter(prefer) && CaughtUp(st, prefer) {
		return prefer
	}
	var best, bestServing NodeID
	for _, n := range slices.Sorted(maps.Keys(st.Progress)) {
		if !isVoter(n) || !CaughtUp(st, n) {
			continue
		}
		if best == 0 || st.Progress[n] > st.Progress[best] {
			best = n
		}
		if node := s.Nodes[n]; node != nil && node.Serves() &&
			(bestServing == 0 || st.Progress[n] > st.Progress[bestServing]) {
			bestServing = n
		}
	}
	if bestServing != 0 {
		return bestServing
	}
	return best
}

// balancer is the reconciler's memory of leadership for the balance.
type balancer struct {
	// since is when this node was first seen leading each group, since
	// it last did not.
	since map[GroupID]time.Time
	// last is when this node last started a transfer of each group.
	last map[GroupID]time.Time
}

// balance runs at the end of each reconcile pass: each local volume this node leads moves to its preferred
// leader when that node has caught up, or, when this node is in
// maintenance or draining, to any caught-up serving voter; at most
// maxTransfersPerPass transfers are started. It acts on this node's
// metadata as applied, even before it is known to have caught up: a
// transfer chosen from stale metadata moves a leadership to another voter
// or, to a node no longer a member, is ignored by Raft.
func (r *reconciler) balance(s *State) {
	b := &r.bal
	if b.since == nil {
		b.since, b.last = map[GroupID]time.Time{}, map[GroupID]time.Time{}
	}
	now, self := r.c.clock.Now(), r.c.cfg.Self.ID
	for id := range b.since {
		if lv := r.vols[id]; lv == nil || !lv.group.IsLeader() {
			delete(b.since, id)
		}
	}
	for id := range b.last {
		if r.vols[id] == nil {
			delete(b.last, id)
		}
	}
	leaving := s.Nodes[self] != nil && !s.Nodes[self].Serves()
	pref := PreferredLeaders(s)
	started := 0
	for _, id := range slices.Sorted(maps.Keys(r.vols)) {
		lv := r.vols[id]
		if !lv.group.IsLeader() {
			continue
		}
		if _, ok := b.since[id]; !ok {
			b.since[id] = now
		}
		if started >= maxTransfersPerPass {
			continue
		}
		if to := b.target(lv.group, s, self, id, pref[id], leaving, now); to != 0 {
			r.c.log.Info("transferring leadership", "volume", lv.spec.Load().Name, "group", id, "to", to,
				"leaving", leaving)
			lv.group.TransferLeadership(to)
			b.last[id] = now
			started++
		}
	}
}

// target returns where group id, which this node leads, should go now (0:
// stay).
func (b *balancer) target(g Group, s *State, self NodeID, id GroupID, prefer NodeID, leaving bool, now time.Time) NodeID {
	interval := minTransferInterval
	if leaving {
		interval = leaveRetryInterval
	}
	if last, ok := b.last[id]; ok && now.Sub(last) < interval {
		return 0
	}
	if leaving {
		return HandoffTarget(s, self, id, g.Status(), prefer)
	}
	if prefer == 0 || prefer == self || now.Sub(b.since[id]) < holdAfterGain {
		return 0
	}
	if st := g.Status(); CaughtUp(st, prefer) {
		return prefer
	}
	return 0
}
