package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Membership change (doc.go, "Membership change"). A group's configuration
// changes by entries in its log: Raft's ConfChangeV2, one change at a time
// as a simple change, several at once through joint consensus (the group
// enters a configuration where both the old and the new voters must agree,
// then leaves it by itself). A node joins a running group as a learner: it
// receives the log (or a snapshot) and does not vote; once it has caught up
// it is promoted, usually in the same joint change that removes the voter it
// replaces, so the group never has fewer voters than its replication factor.

// MemberOp is one kind of configuration change.
type MemberOp uint8

const (
	// AddLearner adds a node that receives the log but does not vote (or
	// demotes a voter to a learner).
	AddLearner MemberOp = iota + 1
	// AddVoter adds a voter, or promotes a learner.
	AddVoter
	// RemoveMember removes a voter or a learner.
	RemoveMember
)

func (op MemberOp) String() string {
	switch op {
	case AddLearner:
		return "add-learner"
	case AddVoter:
		return "add-voter"
	case RemoveMember:
		return "remove"
	}
	return fmt.Sprintf("member-op(%d)", uint8(op))
}

// MemberChange is one change of a group's configuration.
type MemberChange struct {
	Op   MemberOp
	Node NodeID
}

func (mc MemberChange) String() string { return mc.Op.String() + " " + mc.Node.String() }

// Membership is a group's configuration. Outgoing is set while the group is
// in a joint configuration: the voters it is leaving, which must agree too
// until the group leaves it.
type Membership struct {
	Voters, Learners, Outgoing []NodeID
}

// Joint reports whether the configuration is joint (a change in progress).
func (m Membership) Joint() bool { return len(m.Outgoing) > 0 }

// IsVoter reports whether n votes in the incoming configuration.
func (m Membership) IsVoter(n NodeID) bool { return slices.Contains(m.Voters, n) }

// IsLearner reports whether n is a learner.
func (m Membership) IsLearner(n NodeID) bool { return slices.Contains(m.Learners, n) }

func membershipOf(cs raftpb.ConfState) Membership {
	ids := func(in []uint64) []NodeID {
		out := make([]NodeID, 0, len(in))
		for _, id := range in {
			out = append(out, NodeID(id))
		}
		slices.Sort(out)
		return out
	}
	return Membership{Voters: ids(cs.Voters), Learners: ids(append(slices.Clone(cs.Learners), cs.LearnersNext...)),
		Outgoing: ids(cs.VotersOutgoing)}
}

// Errors of ChangeMembers.
var (
	// ErrChangeInProgress: the group is already changing its configuration
	// (a change not yet applied, or a joint configuration not yet left).
	ErrChangeInProgress = errors.New("replication: a configuration change is already in progress")
	// ErrUnsafeChange: the change would leave the group without a majority
	// of live voters, or without any voter.
	ErrUnsafeChange = errors.New("replication: the change would leave the group without a live majority")
)

// JoinGroup adds group id to this node as a new member of a running group:
// it starts with an empty log and no configuration, and does nothing until
// the group's leader, having added this node (ChangeMembers, AddLearner),
// sends it the log or a snapshot. Until then it takes messages only from
// peers, the group's voters. A group recovered from the log rejoins as
// AddGroup does.
func (h *Host) JoinGroup(id GroupID, peers []NodeID, sm StateMachine) (*Group, error) {
	return h.addGroup(id, peers, sm, true)
}

// Members returns the group's configuration as this node last applied it.
func (g *Group) Members() Membership {
	g.status.Lock()
	defer g.status.Unlock()
	return g.status.s.Members
}

// ChangeMembers proposes changes to the group's configuration and returns
// once the change is applied on this node and, for a joint change (more than
// one change), once the group has left the joint configuration. It must be
// called on the leader (ErrNotLeader otherwise). It refuses, without
// proposing, a change while another is in progress (ErrChangeInProgress) and
// one after which the incoming voters would not hold a majority of members
// that answered the leader within the last election timeout
// (ErrUnsafeChange): a learner must have caught up before it is promoted.
// If leadership is lost before the change is applied it fails with
// ErrNoLeader and the change may or may not take effect: read Members.
func (g *Group) ChangeMembers(ctx context.Context, changes ...MemberChange) error {
	if len(changes) == 0 {
		return fmt.Errorf("%w: no change", ErrConfig)
	}
	cc := raftpb.ConfChangeV2{Changes: make([]raftpb.ConfChangeSingle, 0, len(changes))}
	for _, mc := range changes {
		var t raftpb.ConfChangeType
		switch mc.Op {
		case AddLearner:
			t = raftpb.ConfChangeAddLearnerNode
		case AddVoter:
			t = raftpb.ConfChangeAddNode
		case RemoveMember:
			t = raftpb.ConfChangeRemoveNode
		default:
			return fmt.Errorf("%w: %v", ErrConfig, mc)
		}
		if mc.Node == 0 {
			return fmt.Errorf("%w: %v", ErrConfig, mc)
		}
		cc.Changes = append(cc.Changes, raftpb.ConfChangeSingle{Type: t, NodeID: uint64(mc.Node)})
	}
	if len(changes) > 1 {
		cc.Transition = raftpb.ConfChangeTransitionJointImplicit
	}
	result := make(chan error, 1)
	done := func(err error) { result <- err }
	select {
	case g.control <- func(c *core) { c.proposeConfChange(cc, done) }:
	case <-g.stopping:
		return g.stopErr()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-result:
		return err
	case <-g.stopping:
		return g.stopErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// confWaiter is a configuration change proposed here, until it (and, for a
// joint change, the leaving of the joint configuration) is applied.
type confWaiter struct {
	term, index uint64
	joint       bool // applied; waits for the group to leave the joint configuration
	done        func(error)
}

// proposeConfChange runs on the loop: it checks cc against the group's state
// and steps it into Raft, which stamps the entry with its term and index.
func (c *core) proposeConfChange(cc raftpb.ConfChangeV2, done func(error)) {
	if c.rn.BasicStatus().RaftState != raft.StateLeader {
		done(c.notLeaderErr())
		return
	}
	if len(c.confWaiters) > 0 || len(c.conf.VotersOutgoing) > 0 || c.unappliedConfChange() {
		done(ErrChangeInProgress)
		return
	}
	if err := c.checkSafeChange(cc); err != nil {
		done(err)
		return
	}
	if err := checkConfChange(c.conf, cc, c.s.lastIndex()); err != nil {
		done(fmt.Errorf("%w: %v on %v: %w", ErrConfig, cc, c.conf, err))
		return
	}
	data, err := cc.Marshal()
	if err != nil {
		done(fmt.Errorf("%w: %w", ErrConfig, err))
		return
	}
	ents := []raftpb.Entry{{Type: raftpb.EntryConfChangeV2, Data: data}}
	if err := c.rn.Step(raftpb.Message{Type: raftpb.MsgProp, From: c.self, Entries: ents}); err != nil {
		done(fmt.Errorf("%w: %w", ErrProposalDropped, err))
		return
	}
	// Raft turns a change it refuses into an empty normal entry, in place.
	if ents[0].Type != raftpb.EntryConfChangeV2 {
		done(ErrChangeInProgress)
		return
	}
	c.h.log.Info("configuration change proposed", "group", c.g.id, "change", cc.String(), "index", ents[0].Index)
	c.confWaiters = append(c.confWaiters, &confWaiter{term: ents[0].Term, index: ents[0].Index, done: done})
}

// unappliedConfChange reports whether Raft's log holds a configuration change
// after the applied index (Raft accepts one at a time).
func (c *core) unappliedConfChange() bool {
	last := c.s.lastIndex()
	if last <= c.applied {
		return false
	}
	ents, err := c.s.Entries(c.applied+1, last+1, 1<<30)
	if err != nil {
		return true // cannot tell: refuse rather than risk it
	}
	for i := range ents {
		if ents[i].Type != raftpb.EntryNormal {
			return true
		}
	}
	return false
}

// checkSafeChange refuses a change after which the incoming voters would not
// include a majority of members known live (this node, and the peers that
// answered within the last election timeout).
func (c *core) checkSafeChange(cc raftpb.ConfChangeV2) error {
	voters := slices.Clone(c.conf.Voters)
	for _, ch := range cc.Changes {
		switch ch.Type {
		case raftpb.ConfChangeAddNode:
			if !slices.Contains(voters, ch.NodeID) {
				voters = append(voters, ch.NodeID)
			}
		case raftpb.ConfChangeRemoveNode, raftpb.ConfChangeAddLearnerNode:
			voters = slices.DeleteFunc(voters, func(id uint64) bool { return id == ch.NodeID })
		}
	}
	if len(voters) == 0 {
		return fmt.Errorf("%w: no voter would remain", ErrUnsafeChange)
	}
	if sameSet(voters, c.conf.Voters) {
		return nil // learners only: the quorum is unchanged
	}
	live := 0
	for _, id := range voters {
		if id == c.self || c.recentlyHeard(id) {
			live++
		}
	}
	if live < len(voters)/2+1 {
		return fmt.Errorf("%w: %d of the %d voters after it answered recently", ErrUnsafeChange, live, len(voters))
	}
	return nil
}

// voteUnconfigured reports whether m asks for a vote of a member that has no
// configuration yet (it joined, or rejoined with an empty log): such a
// member knows nothing of the group's log, and its vote could elect a
// candidate that lacks committed entries, a committed configuration among
// them. It votes only once it has caught up, and so has a configuration.
// The request is dropped (not refused: the connection carries other groups).
func (c *core) voteUnconfigured(m raftpb.Message) bool {
	return len(c.conf.Voters) == 0 && (m.Type == raftpb.MsgVote || m.Type == raftpb.MsgPreVote)
}

// AddPeers adds peers to the nodes this member takes messages from beside
// its configuration: its owner's view of the group's current members (the
// metadata), which may be newer than the configuration this member has
// applied (it was down or cut off while members were added), so that it
// hears the new members, a new leader among them, and catches up.
func (g *Group) AddPeers(peers []NodeID) {
	g.exec(func(c *core) {
		changed := false
		for _, p := range peers {
			if p != g.host.cfg.NodeID && !containsID(g.joinPeers, uint64(p)) {
				g.joinPeers = append(g.joinPeers, uint64(p))
				changed = true
			}
		}
		if changed {
			c.setConf(c.conf)
		}
	})
}

// recentlyHeard reports whether a message from peer id was stepped within
// the last election timeout (in a quiesced group: whether its node was
// heard from). Raft's own Progress.RecentActive is cleared
// for every peer at each quorum check and so reads false for a while after
// it, whatever the peer does.
func (c *core) recentlyHeard(id uint64) bool {
	// The node must have been heard from (node heartbeats, quiesce_live.go):
	// a group's ticks stand still while it is quiesced, so its own record
	// says nothing of the time since.
	if !c.h.live.heardWithin(NodeID(id), c.h.cfg.electionTimeout()) {
		return false
	}
	if c.quiesce.on {
		return true // a quiesced group exchanges nothing: its members are as live as their nodes
	}
	t, ok := c.heard[id]
	return ok && c.ticks-t <= uint64(c.h.cfg.ElectionTicks)
}

// onConfApplied completes the waiters of the change applied at e, and those
// waiting for the joint configuration to be left.
func (c *core) onConfApplied(e *raftpb.Entry) {
	joint := len(c.conf.VotersOutgoing) > 0
	kept := c.confWaiters[:0]
	for _, w := range c.confWaiters {
		switch {
		case w.joint && !joint:
			w.done(nil)
		case w.index == e.Index && w.term == e.Term && joint:
			w.joint = true
			kept = append(kept, w)
		case w.index == e.Index && w.term == e.Term:
			w.done(nil)
		case w.index <= e.Index && !w.joint:
			w.done(fmt.Errorf("%w: entry %d is another change", ErrProposalDropped, w.index))
		default:
			kept = append(kept, w)
		}
	}
	c.confWaiters = kept
}

// confEntryReplaced fails a waiter whose entry was replaced by another (a new
// leader overwrote it) once that index is applied.
func (c *core) confEntryReplaced(e *raftpb.Entry) {
	if len(c.confWaiters) == 0 {
		return
	}
	kept := c.confWaiters[:0]
	for _, w := range c.confWaiters {
		if !w.joint && w.index == e.Index {
			w.done(fmt.Errorf("%w: entry %d is not the change proposed", ErrProposalDropped, w.index))
			continue
		}
		kept = append(kept, w)
	}
	c.confWaiters = kept
}

// failConfWaiters fails every waiting change (leadership lost, shutdown).
func (c *core) failConfWaiters(err error) {
	for _, w := range c.confWaiters {
		w.done(err)
	}
	c.confWaiters = nil
}

func sameSet(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
