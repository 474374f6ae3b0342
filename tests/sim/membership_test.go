package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"basalt/pkg/volume"
	"basalt/replication"
)

// Membership changes. Each group starts with the voters in members; the
// other nodes are spares. Now and then the schedule starts a membership
// operation on a group, one at a time per group, made of phases; each phase
// adds at most one node and removes some voters, as a cluster's reconciler
// does it: the new node joins (Host.JoinGroup, hearing from the voters),
// the leader adds it as a learner, waits until its match is near the
// commit index, then promotes it in the same change that removes the
// voters that leave (a joint change when there are several), leaving
// leadership first when it is itself to leave; the removed nodes then drop
// their replica of the group (Host.RemoveGroup). The driver decides each
// step from the configuration that the group's established leader applied
// (membership_check_test.go), never from a change's answer, so a change whose
// outcome is unknown (its leader crashed) is simply looked at again. The
// operations:
//
//   - replace: a voter (live or crashed, often the leader) by a spare;
//   - re-add: remove a voter, then add it back as a new member with an
//     empty log (its store still holds the old replica, which the leader's
//     snapshot must overwrite);
//   - grow and shrink: add a spare as a fourth voter, then remove a voter.
//
// Faults aimed at the operations come on top of the seed's random ones: a
// crash of the leader right after it proposed a change, a power loss of the
// new member before it caught up, a partition of the learner.

// memberState is a node's part in one group, as the simulation arranged it;
// it survives the node's crashes.
type memberState uint8

const (
	// notMember: the node runs no replica of the group (a spare, or a
	// removed member); a log of the group recovered after a crash is
	// dropped.
	notMember memberState = iota
	// bootstrapMember: one of the initial voters; it bootstraps the group
	// with members when its log holds none.
	bootstrapMember
	// joinedMember: it joined the running group (volume.Join); a restart
	// joins again, which rejoins from the log when it holds the group.
	joinedMember
)

// catchUpSlack is how far below the leader's commit index a learner's match
// may be for it to count as caught up.
const catchUpSlack = 8

// memberStats count the membership work of a seed.
type memberStats struct {
	ops, opsDone, phases, proposed, transfers, joins, removals, configs, sweeps, sweepErrors, replicaChecks,
	aimed uint64
}

func (m memberStats) String() string {
	return fmt.Sprintf("membership: %d operations (%d done, %d phases), %d changes proposed, %d configurations, "+
		"%d joins, %d removals, %d transfers, %d aimed faults; %d sweeps (%d failed), %d replica checks",
		m.ops, m.opsDone, m.phases, m.proposed, m.configs, m.joins, m.removals, m.transfers, m.aimed, m.sweeps,
		m.sweepErrors, m.replicaChecks)
}

// membershipRate draws the seed's rate of membership operations per step and
// group (none with -sim.membership=false).
func membershipRate(r *rand.Rand) float64 {
	rate := 0.0003 + r.Float64()*0.0005
	if !*flagMembers {
		return 0
	}
	return rate
}

// groupMembership is the simulation's view of one group's configuration.
type groupMembership struct {
	conf      replication.Membership // the configuration last seen committed
	open      []proposedChange       // changes proposed since, which may still apply
	maxTerm   uint64                 // the highest term any node was seen in
	termStart map[uint64]uint64      // a leader's last index when first seen leading in that term
	op        *memberOp
	sweepDue  bool
	checkDue  map[replication.NodeID]bool // members whose replica is to be checked once caught up
}

// proposedChange is a configuration change proposed in term, and the
// configuration it leads to.
type proposedChange struct {
	term   uint64
	result replication.Membership
}

// memberOp is a membership operation in progress on a group.
type memberOp struct {
	kind      string
	phases    []memberPhase
	at        int
	waitUntil time.Time // no proposal, join or transfer before then
}

// memberPhase adds node add (0: none) and removes the voters remove.
type memberPhase struct {
	add    replication.NodeID
	remove []replication.NodeID
}

func (p memberPhase) String() string {
	var parts []string
	if p.add != 0 {
		parts = append(parts, fmt.Sprintf("add %v", p.add))
	}
	for _, r := range p.remove {
		parts = append(parts, fmt.Sprintf("remove %v", r))
	}
	return strings.Join(parts, ", ")
}

func (s *sim) initMembership() {
	for g := range groupCount {
		s.mem[g] = groupMembership{conf: replication.Membership{Voters: slices.Clone(members)},
			termStart: map[uint64]uint64{}, checkDue: map[replication.NodeID]bool{}}
	}
}

func (s *sim) node(id replication.NodeID) *simNode { return s.nodes[id-1] }

// startGroups runs, on node n's new Host h, the groups n is a member of,
// and drops the recovered log of a group it was removed from.
func (s *sim) startGroups(n *simNode, h *replication.Host) error {
	recovered := h.RecoveredGroups()
	for g := range groupCount {
		id := replication.GroupID(g + 1)
		var v *volume.Volume
		var err error
		switch {
		case n.groups[g] == bootstrapMember && slices.Contains(recovered, id):
			// As a cluster node reopens a volume with the members its
			// metadata lists: the current voters.
			v, err = volume.Add(h, id, s.peersOf(g), n.locals[g])
		case n.groups[g] == bootstrapMember:
			v, err = volume.Add(h, id, members, n.locals[g])
		case n.groups[g] == joinedMember:
			v, err = volume.Join(h, id, s.peersOf(g), n.locals[g])
		default:
			if slices.Contains(recovered, id) {
				s.tracef("%v: drops its recovered log of g%d, which it left", n.id, g+1)
				if err := h.RemoveGroup(id); err != nil {
					return fmt.Errorf("%v: removing the recovered g%d: %w", n.id, g+1, err)
				}
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%v: adding volume %d: %w", n.id, g+1, err)
		}
		n.vols[g] = v
	}
	return nil
}

// peersOf are the nodes a joining member of group g hears from: the voters
// of its configuration last seen committed.
func (s *sim) peersOf(g int) []replication.NodeID {
	c := s.mem[g].conf
	peers := slices.Clone(c.Voters)
	for _, id := range c.Outgoing {
		if !slices.Contains(peers, id) {
			peers = append(peers, id)
		}
	}
	return peers
}

// membersOf returns the up nodes that run a replica of group g.
func (s *sim) membersOf(g int) []*simNode {
	var out []*simNode
	for _, n := range s.nodes {
		if n.up() && n.vols[g] != nil {
			out = append(out, n)
		}
	}
	return out
}

// membership runs once a step: it follows each group's configuration and
// terms, runs the checks due (membership_check_test.go), starts an
// operation now and then when chaos is on, and moves the one in progress.
func (s *sim) membership(chaos bool) {
	s.aiming = chaos
	for g := range groupCount {
		s.noteTerms(g)
		l, st := s.establishedLeader(g)
		if l == nil || s.failure != nil {
			continue
		}
		s.observeConf(g, st)
		s.checksDue(g, l, st)
		m := &s.mem[g]
		if m.op == nil {
			if chaos && s.rand.Float64() < s.opts.membership {
				s.startOp(g, st)
			}
			continue
		}
		if !s.clock.Now().Before(m.op.waitUntil) {
			s.stepOp(g, l, st)
		}
	}
}

// membershipSettled reports whether no operation is in progress (converge
// waits for it, with chaos off: none starts).
func (s *sim) membershipSettled() bool { return s.mem[0].op == nil && s.mem[1].op == nil }

// startOp draws an operation for group g, whose configuration st shows
// three voters and nothing else.
func (s *sim) startOp(g int, st replication.GroupStatus) {
	c := st.Members
	if c.Joint() || len(c.Learners) != 0 || len(c.Voters) != len(members) {
		return
	}
	var spares []replication.NodeID
	for _, n := range s.nodes {
		if n.groups[g] == notMember && !c.IsVoter(n.id) {
			spares = append(spares, n.id)
		}
	}
	voter := c.Voters[s.rand.IntN(len(c.Voters))]
	switch pick := s.rand.IntN(3); {
	case pick == 0 && s.rand.IntN(3) == 0:
		voter = st.Node // the leader leaves
	case pick == 0 && s.rand.IntN(2) == 0:
		for _, id := range c.Voters {
			if !s.node(id).up() {
				voter = id // a crashed voter is replaced
			}
		}
	}
	op := &memberOp{}
	switch k := s.rand.IntN(4); {
	case k <= 1 && len(spares) > 0:
		op.kind, op.phases = "replace", []memberPhase{{add: spares[s.rand.IntN(len(spares))], remove: []replication.NodeID{voter}}}
	case k == 2 || len(spares) == 0:
		op.kind, op.phases = "re-add", []memberPhase{{remove: []replication.NodeID{voter}}, {add: voter}}
	default:
		spare := spares[s.rand.IntN(len(spares))]
		leaving := append(slices.Clone(c.Voters), spare)[s.rand.IntN(len(c.Voters)+1)]
		op.kind, op.phases = "grow-shrink", []memberPhase{{add: spare}, {remove: []replication.NodeID{leaving}}}
	}
	s.mem[g].op = op
	s.stats.membership.ops++
	s.tracef("g%d: membership %s starts from %v: %v", g+1, op.kind, c, op.phases)
}

// stepOp moves group g's operation one step on from the configuration its
// established leader l applied (st).
func (s *sim) stepOp(g int, l *simNode, st replication.GroupStatus) {
	op := s.mem[g].op
	ph := op.phases[op.at]
	c := st.Members
	if c.Joint() {
		return // the leader leaves it by itself
	}
	if ph.add != 0 && !c.IsVoter(ph.add) {
		switch {
		case !c.IsLearner(ph.add):
			if s.join(g, ph.add) {
				s.propose(g, l, st, replication.MemberChange{Op: replication.AddLearner, Node: ph.add})
			}
		case !caughtUp(st, ph.add):
		case slices.Contains(ph.remove, l.id):
			s.leaveLeadership(g, l, st, ph)
		default:
			changes := []replication.MemberChange{{Op: replication.AddVoter, Node: ph.add}}
			for _, r := range ph.remove {
				if c.IsVoter(r) || c.IsLearner(r) {
					changes = append(changes, replication.MemberChange{Op: replication.RemoveMember, Node: r})
				}
			}
			s.propose(g, l, st, changes...)
		}
		return
	}
	var left []replication.MemberChange
	for _, r := range ph.remove {
		if c.IsVoter(r) || c.IsLearner(r) {
			left = append(left, replication.MemberChange{Op: replication.RemoveMember, Node: r})
		}
	}
	switch {
	case len(left) > 0 && slices.Contains(ph.remove, l.id):
		s.leaveLeadership(g, l, st, ph)
	case len(left) > 0:
		s.propose(g, l, st, left...)
	default:
		s.endPhase(g, ph)
	}
}

// endPhase: the phase's configuration is committed; the removed nodes drop
// their replicas, and every replica is checked again.
func (s *sim) endPhase(g int, ph memberPhase) {
	m := &s.mem[g]
	for _, r := range ph.remove {
		if r != ph.add {
			s.dropReplica(g, s.node(r))
		}
	}
	// As a cluster node's reconciler does when the metadata's members
	// change (pkg/cluster, tellPeers): every member hears the current
	// voters, so that one that was cut off while they were added catches up.
	for _, n := range s.membersOf(g) {
		n.vols[g].Group().AddPeers(s.peersOf(g))
	}
	s.stats.membership.phases++
	m.sweepDue = true
	s.tracef("g%d: membership %s: phase %v done", g+1, m.op.kind, ph)
	m.op.at++
	if m.op.at == len(m.op.phases) {
		s.tracef("g%d: membership %s done", g+1, m.op.kind)
		s.stats.membership.opsDone++
		m.op = nil
	}
}

// join starts node id's replica of group g as a new member, unless it runs
// one; it reports whether the node runs it (false: it is down, wait).
func (s *sim) join(g int, id replication.NodeID) bool {
	n := s.node(id)
	if n.vols[g] != nil {
		return true
	}
	if !n.up() || n.failing {
		return false
	}
	v, err := volume.Join(n.host, replication.GroupID(g+1), s.peersOf(g), n.locals[g])
	if err != nil {
		s.failf("%v: joining g%d: %v", id, g+1, err)
		return false
	}
	n.vols[g], n.groups[g] = v, joinedMember
	s.stats.membership.joins++
	s.tracef("%v joins g%d, hearing from %v", id, g+1, s.peersOf(g))
	if s.aiming && s.rand.IntN(4) == 0 { // power loss of the new member before it caught up
		s.aimPowerLoss(n, time.Duration(5+s.rand.IntN(300))*time.Millisecond)
	}
	return true
}

// dropReplica removes node n's replica of group g, which it left: now when
// n is up, else its recovered log is dropped when it restarts.
func (s *sim) dropReplica(g int, n *simNode) {
	n.groups[g] = notMember
	delete(s.mem[g].checkDue, n.id)
	if n.vols[g] == nil {
		return
	}
	s.stats.membership.removals++
	s.tracef("%v drops its replica of g%d", n.id, g+1)
	err := n.host.RemoveGroup(replication.GroupID(g + 1))
	if err != nil && !n.power.off {
		s.failf("%v: removing g%d: %v", n.id, g+1, err)
	}
	n.vols[g] = nil
	for _, op := range slices.Clone(s.inflight) {
		if op.node == n && op.group == g {
			s.finish(op, errRemoved)
		}
	}
	s.sweeps = slices.DeleteFunc(s.sweeps, func(w *sweep) bool { return w.node == n && w.g == g })
}

var errRemoved = errors.New("sim: the replica was removed")

// caughtUp reports whether the leader (st) sees node id's match within
// catchUpSlack of its commit index, replicating.
func caughtUp(st replication.GroupStatus, id replication.NodeID) bool {
	for _, p := range st.Peers {
		if p.Node == id {
			return p.State == "replicate" && p.Match+catchUpSlack >= st.Commit
		}
	}
	return false
}

// leaveLeadership transfers group g's leadership from l, which is to leave,
// to the most caught-up voter that stays.
func (s *sim) leaveLeadership(g int, l *simNode, st replication.GroupStatus, ph memberPhase) {
	var to replication.NodeID
	var best uint64
	for _, p := range st.Peers {
		if p.Node == l.id || !st.Members.IsVoter(p.Node) || slices.Contains(ph.remove, p.Node) || !caughtUp(st, p.Node) {
			continue
		}
		if to == 0 || p.Match > best {
			to, best = p.Node, p.Match
		}
	}
	if to == 0 {
		return
	}
	s.stats.membership.transfers++
	s.tracef("g%d: %v leaves leadership to %v before it leaves", g+1, l.id, to)
	l.vols[g].Group().TransferLeadership(to)
	s.mem[g].op.waitUntil = s.clock.Now().Add(50 * time.Millisecond)
}

// propose runs ChangeMembers on leader l (a changeCall) and records the
// configuration it would lead to; now and then the leader crashes right
// after, or the learner added is cut off.
func (s *sim) propose(g int, l *simNode, st replication.GroupStatus, changes ...replication.MemberChange) {
	m := &s.mem[g]
	m.op.waitUntil = s.clock.Now().Add(100 * time.Millisecond)
	m.open = append(m.open, proposedChange{term: st.Term, result: applyChanges(st.Members, changes)})
	s.stats.membership.proposed++
	s.tracef("g%d: %v proposes %v in term %d", g+1, l.id, changes, st.Term)
	s.changeMembers(l, g, changes)
	if !s.aiming {
		return
	}
	switch r := s.rand.IntN(8); {
	case r == 0:
		s.aimCrash(l, time.Duration(s.rand.IntN(15))*time.Millisecond)
	case r == 1 && changes[0].Op == replication.AddLearner && s.healAt.IsZero():
		s.stats.membership.aimed++
		s.stats.partitions++
		s.net.Isolate(changes[0].Node, others(changes[0].Node)...)
		s.healAt = s.clock.Now().Add(time.Duration(100+s.rand.IntN(800)) * time.Millisecond)
		s.tracef("network: learner %v isolated", changes[0].Node)
	}
}

func others(id replication.NodeID) []replication.NodeID {
	return slices.DeleteFunc(slices.Clone(nodeIDs), func(o replication.NodeID) bool { return o == id })
}

// aimCrash crashes node n after d (at once for 0), as a power loss armed
// to cut its next persists short.
func (s *sim) aimCrash(n *simNode, d time.Duration) {
	if !n.up() || n.failing {
		return
	}
	s.stats.membership.aimed++
	if d == 0 {
		s.crash(n, "crash aimed at a membership change")
		return
	}
	n.failing, n.crashAt = true, s.clock.Now().Add(d)
	s.tracef("%v: crash aimed at a membership change in %v", n.id, d)
}

// aimPowerLoss arms a power loss of node n that cuts one of its next
// persists short, and crashes it after d.
func (s *sim) aimPowerLoss(n *simNode, d time.Duration) {
	if !n.up() || n.failing {
		return
	}
	s.stats.membership.aimed++
	s.stats.powerLosses++
	n.region.FailAfter(n.region.PersistCalls()+s.rand.IntN(8), errPowerLost)
	n.failing, n.crashAt = true, s.clock.Now().Add(d)
	s.tracef("%v: power loss aimed at a membership change in %v", n.id, d)
}

// applyChanges is the configuration changes lead to from c: through a joint
// configuration when there are several (left by itself later).
func applyChanges(c replication.Membership, changes []replication.MemberChange) replication.Membership {
	out := replication.Membership{Voters: slices.Clone(c.Voters), Learners: slices.Clone(c.Learners)}
	for _, ch := range changes {
		out.Voters = slices.DeleteFunc(out.Voters, func(id replication.NodeID) bool { return id == ch.Node })
		out.Learners = slices.DeleteFunc(out.Learners, func(id replication.NodeID) bool { return id == ch.Node })
		switch ch.Op {
		case replication.AddVoter:
			out.Voters = append(out.Voters, ch.Node)
		case replication.AddLearner:
			out.Learners = append(out.Learners, ch.Node)
		}
	}
	if len(changes) > 1 {
		out.Outgoing = slices.Clone(c.Voters)
	}
	return normalize(out)
}

// leaveJoint is joint configuration c once the group left it.
func leaveJoint(c replication.Membership) replication.Membership {
	return normalize(replication.Membership{Voters: c.Voters, Learners: c.Learners})
}

func normalize(c replication.Membership) replication.Membership {
	for _, ids := range []*[]replication.NodeID{&c.Voters, &c.Learners, &c.Outgoing} {
		*ids = slices.Clone(*ids)
		slices.Sort(*ids)
		if len(*ids) == 0 {
			*ids = nil
		}
	}
	return c
}

func sameMembership(a, b replication.Membership) bool {
	a, b = normalize(a), normalize(b)
	return slices.Equal(a.Voters, b.Voters) && slices.Equal(a.Learners, b.Learners) &&
		slices.Equal(a.Outgoing, b.Outgoing)
}

// changeCall is a ChangeMembers running on its own goroutine, since it
// returns only once the change is applied, which the simulation's Polls
// bring about. The simulation never acts on its answer (it would arrive at
// a time the seed does not fix); endChanges checks the answers at the end.
type changeCall struct {
	node    *simNode
	changes []replication.MemberChange
	cancel  context.CancelFunc
	result  chan error
}

// sentCtx counts the calls of Done: ChangeMembers calls it when it starts
// waiting to queue its request and again once the request is queued, so a
// second call says the request is in the group's control queue, where the
// next Poll takes it.
type sentCtx struct {
	context.Context
	dones atomic.Int32
}

func (c *sentCtx) Done() <-chan struct{} {
	c.dones.Add(1)
	return c.Context.Done()
}

// changeMembers starts ChangeMembers on node l's group g and returns once
// its request is queued (or it returned), so that the Poll that runs it is
// the seed's.
func (s *sim) changeMembers(l *simNode, g int, changes []replication.MemberChange) {
	ctx, cancel := context.WithCancel(context.Background())
	sc := &sentCtx{Context: ctx}
	call := &changeCall{node: l, changes: changes, cancel: cancel, result: make(chan error, 1)}
	grp := l.vols[g].Group()
	go func() { call.result <- grp.ChangeMembers(sc, changes...) }()
	for i := 0; sc.dones.Load() < 2 && len(call.result) == 0; i++ {
		if i == 1e7 {
			s.failf("g%d: ChangeMembers on %v never queued its request", g+1, l.id)
			break
		}
		runtime.Gosched()
	}
	s.calls = append(s.calls, call)
}

// crashedMembership ends what waited on crashed node n: its changes' calls
// (their Host is abandoned) and its sweeps.
func (s *sim) crashedMembership(n *simNode) {
	for _, c := range s.calls {
		if c.node == n {
			c.cancel()
		}
	}
	s.sweeps = slices.DeleteFunc(s.sweeps, func(w *sweep) bool { return w.node == n })
}

// endChanges ends the seed's ChangeMembers calls and checks their answers:
// success, or one of the refusals and unknown outcomes ChangeMembers
// documents.
func (s *sim) endChanges() {
	for _, c := range s.calls {
		c.cancel()
	}
	for _, c := range s.calls {
		err := <-c.result
		switch {
		case err == nil, errors.Is(err, context.Canceled), errors.Is(err, replication.ErrNotLeader),
			errors.Is(err, replication.ErrNoLeader), errors.Is(err, replication.ErrChangeInProgress),
			errors.Is(err, replication.ErrUnsafeChange), errors.Is(err, replication.ErrProposalDropped),
			errors.Is(err, replication.ErrStopped):
		default:
			s.failf("%v: ChangeMembers(%v) returned %v", c.node.id, c.changes, err)
		}
	}
	s.calls = nil
}
