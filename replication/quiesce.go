package replication

import (
	"bytes"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Quiescence (doc.go, "Quiescence"): a group with nothing to do stops
// ticking Raft on every member, so that an idle volume costs neither
// heartbeats nor timer wake-ups. The leader decides; its followers follow a
// quiesce heartbeat from it; anything that needs Raft wakes the group; the
// Host's node heartbeats (quiesce_live.go) stand in for the per-group ones
// a quiesced follower no longer gets, so that it still notices its leader's
// node die.

// quiesceIdleTicks is how many consecutive ticks a leader's group must have
// been idle (canQuiesce) before it quiesces.
const quiesceIdleTicks = 3

// quiesceContext marks a leader's quiesce heartbeat, and the followers'
// responses to it (Raft echoes a heartbeat's Context). It is never 8 bytes
// long, the length of a read index round's context (reads.go), so Raft's
// read-only tracking never mistakes it for one.
var quiesceContext = []byte("quiesce")

// wakeContext marks a follower's heartbeat response that wakes its
// quiesced leader (unquiesce).
var wakeContext = []byte("wake")

// quiesceState is a group's quiescence, owned by its loop.
type quiesceState struct {
	on    bool      // quiesced: Raft is not ticked and the ticker is stopped
	since time.Time // when it quiesced
	idle  int       // consecutive idle ticks (leader)
	// offerFrom and offerTerm name the quiesce heartbeat stepped in this
	// iteration (a follower quiesces after it, if its log agrees).
	offerFrom, offerTerm uint64
	// sent: this iteration sent something other than an answer to a
	// quiesce heartbeat, so Raft has work in progress.
	sent bool
}

// isQuiesceHeartbeat reports whether m is a leader's quiesce heartbeat.
func isQuiesceHeartbeat(m *raftpb.Message) bool {
	return m.Type == raftpb.MsgHeartbeat && bytes.Equal(m.Context, quiesceContext)
}

// idleChatter reports whether m, from a peer, leaves a quiesced group
// asleep: a heartbeat or heartbeat response of the current term that
// carries no read round (Context empty) or is a quiesce heartbeat or its
// answer. Those without a context are Raft's from before the group
// quiesced, still in flight. Everything else wakes the group, the wake-up
// a follower sends its leader included.
func (c *core) idleChatter(m *raftpb.Message) bool {
	return m.Term == c.term && isChatter(m, raftpb.MsgHeartbeat, raftpb.MsgHeartbeatResp)
}

// isChatter reports whether m is of one of the types given, with no
// context or the quiesce marker.
func isChatter(m *raftpb.Message, types ...raftpb.MessageType) bool {
	return slices.Contains(types, m.Type) && (len(m.Context) == 0 || bytes.Equal(m.Context, quiesceContext))
}

// mayQuiesce reports whether the configuration lets this group quiesce.
func (c *core) mayQuiesce() bool {
	return !c.h.cfg.DisableQuiesce && !slices.Contains(c.h.cfg.AlwaysAwake, c.g.id)
}

// quiesceTick counts a tick for the leader's idle count.
func (c *core) quiesceTick() {
	if c.isLeader && c.canQuiesce() {
		c.quiesce.idle++
	} else {
		c.quiesce.idle = 0
	}
}

// canQuiesce reports whether this leader has nothing in flight: no
// proposal, read, configuration change, transfer or snapshot; no read
// served for quiesceIdleTicks ticks (a lease read would otherwise lose its
// lease); every entry committed and applied; and every follower in
// StateReplicate, recently active and matching the
// log's last index, its node heard from recently (quiesce_live.go).
func (c *core) canQuiesce() bool {
	if !c.mayQuiesce() || c.quiesce.on || !c.isLeader || c.restored != 0 || c.fatal != nil {
		return false
	}
	if len(c.batch)+len(c.pending)+len(c.confWaiters)+len(c.snapshotsOut)+len(c.catchup.streams) > 0 ||
		len(c.reads.queue)+len(c.reads.rounds)+len(c.reads.waiting) > 0 ||
		len(c.conf.VotersOutgoing)+len(c.conf.LearnersNext) > 0 {
		return false
	}
	if c.readRecently() {
		return false
	}
	bs := c.rn.BasicStatus()
	last := c.s.lastIndex()
	if bs.RaftState != raft.StateLeader || bs.LeadTransferee != 0 || bs.Commit != last || c.applied != last {
		return false
	}
	ok := true
	c.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == c.self {
			return
		}
		if pr.Match != last || !pr.RecentActive || pr.State != tracker.StateReplicate ||
			!c.h.live.heardWithin(NodeID(id), c.h.cfg.electionTimeout()) {
			ok = false
		}
	})
	return ok
}

// readRecently reports whether a read was asked for within the idle window.
func (c *core) readRecently() bool {
	window := time.Duration(quiesceIdleTicks) * c.h.cfg.TickInterval
	now := c.h.clock.Now()
	last := c.reads.lastRead
	if t := time.Unix(0, c.g.lastRead.Load()); t.After(last) {
		last = t
	}
	return !last.IsZero() && now.Sub(last) <= window
}

// maybeQuiesce ends an iteration: a leader idle long enough quiesces the
// group; a follower that stepped its leader's quiesce heartbeat follows if
// its log agrees; a quiesced group whose Raft sent anything wakes up.
func (c *core) maybeQuiesce() {
	q := &c.quiesce
	from, term := q.offerFrom, q.offerTerm
	sent := q.sent
	q.offerFrom, q.offerTerm, q.sent = 0, 0, false
	switch {
	case q.on && sent:
		c.unquiesce(0)
	case q.on:
	case c.isLeader && q.idle >= quiesceIdleTicks && c.canQuiesce():
		c.quiesceLeader()
	case from != 0 && c.followerMayQuiesce(from, term):
		c.enterQuiesce()
	}
}

// followerMayQuiesce reports whether this follower may quiesce after its
// leader's quiesce heartbeat: Raft follows from in term, has committed its
// whole log (so the leader holds every entry it holds), and has applied it.
func (c *core) followerMayQuiesce(from, term uint64) bool {
	if !c.mayQuiesce() || c.restored != 0 || c.fatal != nil || len(c.batch) > 0 || c.rn.HasReady() {
		return false
	}
	bs := c.rn.BasicStatus()
	last := c.s.lastIndex()
	return bs.RaftState == raft.StateFollower && bs.Lead == from && bs.Term == term && c.lead == from &&
		bs.Commit == last && c.applied == last
}

// quiesceLeader tells every follower to quiesce (a heartbeat marked with
// quiesceContext, with the commit index, which every follower matches) and
// quiesces. The read lease lapses: a read on a quiesced leader wakes it and
// confirms its leadership by a ReadIndex round.
func (c *core) quiesceLeader() {
	bs := c.rn.BasicStatus()
	var msgs []raftpb.Message
	c.rn.WithProgress(func(id uint64, _ raft.ProgressType, _ tracker.Progress) {
		if id != c.self {
			msgs = append(msgs, raftpb.Message{Type: raftpb.MsgHeartbeat, From: c.self, To: id, Term: bs.Term,
				Commit: bs.Commit, Context: quiesceContext})
		}
	})
	c.reads.leaseUntil = time.Time{}
	c.g.lease.Store(nil)
	if len(msgs) > 0 {
		c.h.transport.Send(c.g.id, msgs)
	}
	c.enterQuiesce()
}

// enterQuiesce stops ticking and registers the group with the Host's
// liveness, which wakes it if the leader's node (for a follower), or a
// quorum's nodes (for the leader), fall silent.
func (c *core) enterQuiesce() {
	q := &c.quiesce
	q.on, q.idle, q.since = true, 0, c.h.clock.Now()
	c.ticker.Stop()
	c.h.live.quiesced(c.g, c.isLeader, NodeID(c.lead))
	c.h.log.Debug("group quiesced", "group", c.g.id, "leader", c.isLeader, "term", c.term, "index", c.applied)
	c.publishStatus(false)
}

// wakeUp ends quiescence for a request or message from peer from (0: a
// local reason).
func (c *core) wakeUp(from uint64) {
	if c.quiesce.on {
		c.unquiesce(from)
	}
}

// unquiesce starts ticking again. The ticks the group slept count toward
// c.ticks (which measures time since the loop started), and a peer heard in
// the group before counts as heard now if its node still is (c.heard: a
// quiesced group steps nothing, the node heartbeats stood in). A follower sets
// Raft's election clock to the ticks since it last heard from its leader's
// node (rounded up, as ticks that fall between count), at most an election
// timeout: the timer a follower that kept ticking would have, or less,
// since every message of the leader's restarts that timer, and every
// message of its node is no later. So a follower whose
// leader's node died campaigns, and grants votes, as soon as one that kept
// ticking would, and never sooner. Unless it was woken by its leader, it
// wakes the leader too (a heartbeat response, which Raft's leader takes in
// any state), since a follower that ticks while its leader sleeps would
// campaign.
func (c *core) unquiesce(from uint64) {
	q := &c.quiesce
	tick := c.h.cfg.TickInterval
	q.on, q.idle = false, 0
	c.ticks += uint64(c.h.clock.Since(q.since) / tick)
	c.ticker = c.h.clock.NewTicker(tick)
	c.h.live.awake(c.g)
	c.h.log.Debug("group woke", "group", c.g.id, "leader", c.isLeader, "from", NodeID(from))
	for id := range c.heard {
		if c.h.live.heardWithin(NodeID(id), c.h.cfg.electionTimeout()) {
			c.heard[id] = c.ticks
		}
	}
	defer c.publishStatus(false)
	if c.isLeader || c.lead == 0 || c.lead == c.self {
		return
	}
	silent := (c.h.live.silence(NodeID(c.lead)) + tick - 1) / tick // a ticking follower's count, at most
	for range min(silent, time.Duration(c.h.cfg.ElectionTicks)) {
		c.rn.Tick()
	}
	if from != c.lead {
		c.h.transport.Send(c.g.id, []raftpb.Message{{Type: raftpb.MsgHeartbeatResp, From: c.self, To: c.lead,
			Term: c.term, Context: wakeContext}})
	}
}

// onStep notes an inbound message about to be stepped: anything but idle
// chatter wakes the group.
func (c *core) onStep(m *raftpb.Message) {
	if c.quiesce.on && !c.idleChatter(m) {
		c.unquiesce(m.From)
	}
}

// onStepped notes a message Raft took: a quiesce heartbeat is an offer to
// quiesce, decided at the end of the iteration (maybeQuiesce).
func (c *core) onStepped(m *raftpb.Message) {
	if isQuiesceHeartbeat(m) {
		c.quiesce.offerFrom, c.quiesce.offerTerm = m.From, m.Term
	}
}

// onSend notes what the loop sends: anything but a heartbeat response
// without a read round means Raft is at work.
func (c *core) onSend(m *raftpb.Message) {
	if !isChatter(m, raftpb.MsgHeartbeatResp) {
		c.quiesce.sent = true
	}
}

// onLivenessWake handles the Host's liveness wake-up (quiesce_live.go):
// the leader's node, or a quorum's, fell silent.
func (c *core) onLivenessWake() {
	if c.g.q.wake.Swap(false) {
		c.wakeUp(0)
	}
}

// runControl runs a control request on the loop; it wakes the group, since
// every request (a configuration change, a transfer, a snapshot) needs Raft.
func (c *core) runControl(f func(*core)) {
	c.wakeUp(0)
	f(c)
}
