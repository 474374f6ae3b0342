package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/clock"
	"basalt/pkg/invariant"
)

// core is the state a group's loop owns: the RawNode (thread-unsafe), the
// requests in flight, and what the loop has applied. Only the loop touches it
// (the Group's goroutine, or Host.Poll in manual mode).
type core struct {
	g      *Group
	h      *Host
	s      *logStorage
	sm     StateMachine
	rn     *raft.RawNode
	self   uint64
	ticker clock.Ticker
	ctx    context.Context

	// conf is the configuration Raft uses, members its voters and
	// learners: only they may send the group messages (inbound.go).
	conf    raftpb.ConfState
	members []uint64
	// logFloor is at most the last index of Raft's log: the persisted last
	// index when Raft last held nothing unpersisted, lowered by every append
	// stepped since (checkStep).
	logFloor uint64

	// heard is the tick at which each peer's last message was stepped
	// (membership.go, recentlyHeard).
	heard     map[uint64]uint64
	ticks     uint64 // ticks since the loop started
	term      uint64
	lead      uint64
	isLeader  bool
	applied   uint64 // Invariant: s.snapIndex <= applied <= commit
	smApplied uint64 // the state machine's durable index at start: not applied again
	// lastSMIndex is the last index given to the state machine (Apply or
	// Restore) since the loop started.
	lastSMIndex uint64

	nextProposalID uint64
	pending        map[uint64]*proposal // by proposal ID, until applied
	confWaiters    []*confWaiter        // configuration changes proposed here (membership.go)
	batch          []*proposal          // proposals waiting to be stepped
	reads          readState
	snapshotsOut   map[uint64]uint64 // follower -> index of the snapshot streaming to it
	catchup        catchupState      // followers catching up: streams, retention (retain.go)
	restored       uint64            // snapshot index restored into sm, awaiting Ready.Snapshot
	fatal          error             // set by work done outside iterate (restore); stops the loop
	early, late    []raftpb.Message  // scratch: messages sent before / after persisting
	// admitted is the write-buffer space admitted for entries stepped in
	// this iteration (space.go); given back once they are persisted.
	admitted int64
	// starved: this iteration held entries back for lack of space; it
	// compacts all it can before it ends (compact.go).
	starved bool
	// quiesce is the group's quiescence (quiesce.go).
	quiesce quiesceState

	stats struct {
		latency                                     time.Duration
		proposals, snapshotsSent, snapshotsReceived uint64
		dropped                                     uint64
	}
}

func newCore(g *Group, sm StateMachine) (*core, error) {
	h := g.host
	cfg := h.cfg
	ctx, cancel := context.WithCancel(h.ctx)
	g.cancel = cancel
	c := &core{
		g: g, h: h, s: g.storage, sm: sm, self: uint64(cfg.NodeID), ctx: ctx,
		nextProposalID: h.incarnation << 40,
		pending:        make(map[uint64]*proposal),
		snapshotsOut:   make(map[uint64]uint64),
		heard:          make(map[uint64]uint64),
		smApplied:      sm.AppliedIndex(),
	}
	c.applied = c.s.snapIndex
	c.s.applied = c.applied
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        c.self,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   c.s,
		Applied:                   c.applied,
		MaxSizePerMsg:             cfg.MaxSizePerMsg,
		MaxCommittedSizePerReady:  4 * cfg.MaxSizePerMsg,
		MaxUncommittedEntriesSize: cfg.MaxUncommittedSize,
		MaxInflightMsgs:           cfg.MaxInflightMsgs,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    raftLogger{h.log.With("group", g.id)},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v: %w", ErrConfig, g.id, err)
	}
	c.rn = rn
	c.setConf(c.s.conf)
	c.logFloor = c.s.lastIndex()
	c.term = c.s.hard.Term
	c.reads.init()
	c.ticker = h.clock.NewTicker(cfg.TickInterval)
	c.publishStatus(false)
	return c, nil
}

// tick advances Raft's clock by one tick.
func (c *core) tick() {
	if c.quiesce.on {
		return // a tick that was due as the ticker stopped
	}
	c.ticks++
	c.rn.Tick()
	c.maybeRenewLease()
	c.quiesceTick()
	c.publishStatus(true)
}

// step hands an inbound message to Raft. Errors (a message from a peer not
// in the configuration, a stale response) are counted, not fatal. An append
// whose entries the write buffer has no room for is dropped, as a lossy
// network would: the leader sends it again after the next heartbeat, by
// which time compaction has made room (space.go).
//
// m is first checked against the group's state (checkStep, inbound.go); a
// refusal is returned, as is the error of a persist checkStep needed, which
// is fatal (c.fatal).
func (c *core) step(m raftpb.Message) error {
	if err := c.checkStep(&m); err != nil {
		return err
	}
	c.onStep(&m) // wakes a quiesced group (quiesce.go)
	c.heard[m.From] = c.ticks
	if c.voteDelayed(m) || c.voteBelowFloor(m) || c.voteUnconfigured(m) { // tombstone.go, membership.go
		c.stats.dropped++
		return nil
	}
	appends := m.Type == raftpb.MsgApp && len(m.Entries) > 0
	if appends {
		cost := entriesCost(m.Entries)
		if n, _ := c.h.space.admitUpTo(func(int) int64 { return cost }, 1); n == 0 {
			c.stats.dropped++
			c.starve()
			return nil
		}
		c.admitted += cost
	}
	if err := c.rn.Step(m); err != nil {
		c.stats.dropped++
	} else {
		c.onStepped(&m)
	}
	if appends { // a conflicting append cuts Raft's log to its own end
		c.logFloor = min(c.logFloor, m.Index+uint64(len(m.Entries)))
	}
	return nil
}

// stepInbound steps a peer's message; a refused one is counted and its
// connection closed.
func (c *core) stepInbound(in inbound) {
	if err := c.step(in.m); err != nil {
		if _, ok := rejectReason(err); ok {
			c.h.refuse(in.src, c.g.id, NodeID(in.m.From), err)
		}
	}
}

// voteDelayed reports whether to ignore a vote request because this node
// started less than an election timeout ago. A node that restarts has
// forgotten when it last heard the leader, and Raft would grant its vote at
// once; that could elect a new leader while the old one still serves reads
// under the lease this node granted before it restarted. Waiting one
// election timeout restores the promise.
func (c *core) voteDelayed(m raftpb.Message) bool {
	if c.h.cfg.DisableLease || c.ticks >= uint64(c.h.cfg.ElectionTicks) {
		return false
	}
	return m.Type == raftpb.MsgVote || m.Type == raftpb.MsgPreVote
}

func (c *core) queueProposal(p *proposal) {
	c.wakeUp(0)
	c.batch = append(c.batch, p)
}

// starve notes that entries were held back for lack of write-buffer space.
func (c *core) starve() {
	c.starved = true
	c.g.starved.Store(true)
}

// releaseAdmitted gives back the space admitted in this iteration: what
// was stepped is persisted now (iterate handles Ready until there is none),
// and counted in the buffer's Used instead.
func (c *core) releaseAdmitted() {
	c.h.space.release(c.admitted)
	c.admitted = 0
}

// iterate drains everything queued for the group, in a fixed order, then
// handles Raft's Ready until there is none. It reports whether it did
// anything. An error means the group can no longer go on (storage or state
// machine failure).
func (c *core) iterate() (bool, error) {
	c.onLivenessWake()
	busy := c.drain()
	defer c.releaseAdmitted()
	if c.fatal != nil {
		return true, c.fatal
	}
	c.stepProposals()
	c.reads.startRound(c)
	for c.rn.HasReady() {
		busy = true
		if err := c.handleReady(); err != nil {
			return true, err
		}
	}
	c.logFloor = c.s.lastIndex()
	c.reads.complete(c.applied)
	c.publishLease()
	c.maybeQuiesce()
	if c.quiesce.on { // an idle group holds no queue buffers
		c.g.inbox.release()
		c.g.proposals.release()
		c.g.reads.release()
	}
	err := c.maybeCompact()
	c.starved = false
	if err != nil {
		return true, err
	}
	if busy {
		c.publishStatus(false)
	}
	return busy, nil
}

// drain takes what the queues hold now, without waiting.
func (c *core) drain() bool {
	busy := c.drainReports()
	for {
		took := c.stepInbox()
		took = c.takeProposals() || took
		took = c.takeReads() || took
		select {
		case f := <-c.g.control:
			c.runControl(f)
		default:
			if !took {
				return busy
			}
		}
		busy = true
	}
}

// stepInbox steps every message the inbox holds, oldest first, and reports
// whether there was one.
func (c *core) stepInbox() bool {
	msgs := c.g.inbox.take()
	if msgs == nil {
		return false
	}
	for i := range msgs {
		c.stepInbound(msgs[i])
	}
	c.g.inbox.done(msgs)
	return true
}

// takeProposals queues every proposal waiting in the group's queue, oldest
// first, and reports whether there was one.
func (c *core) takeProposals() bool {
	ps := c.g.proposals.take()
	if ps == nil {
		return false
	}
	for _, p := range ps {
		c.queueProposal(p)
	}
	c.g.proposals.done(ps)
	return true
}

// takeReads queues every read barrier waiting in the group's queue, oldest
// first, and reports whether there was one.
func (c *core) takeReads() bool {
	rs := c.g.reads.take()
	if rs == nil {
		return false
	}
	for _, r := range rs {
		c.queueRead(r)
	}
	c.g.reads.done(rs)
	return true
}

func (c *core) drainReports() bool {
	g := c.g
	g.reports.Lock()
	unreachable, snapshots := g.reports.unreachable, g.reports.snapshots
	g.reports.unreachable, g.reports.snapshots = nil, nil
	g.reports.Unlock()
	for _, to := range unreachable {
		c.rn.ReportUnreachable(uint64(to))
	}
	for _, r := range snapshots {
		c.finishSnapshot(r)
	}
	return len(unreachable)+len(snapshots) > 0
}

// stepProposals steps the batched proposals into Raft as one message, so
// that they become consecutive entries of one Ready. Only as many as the
// write buffer has room for are stepped (space.go); the rest wait in the
// batch for compaction to free space, as does the whole batch when Raft
// drops it for too many uncommitted bytes: both are back-pressure, not
// failures.
func (c *core) stepProposals() {
	if len(c.batch) == 0 {
		return
	}
	if !c.isLeader || c.rn.BasicStatus().LeadTransferee != 0 {
		err := c.notLeaderErr()
		if c.isLeader {
			err = ErrProposalDropped
		}
		for _, p := range c.batch {
			p.done(err)
		}
		clear(c.batch)
		c.batch = c.batch[:0]
		return
	}
	n, bytes := c.h.space.admitUpTo(func(i int) int64 { return entryCost(len(c.batch[i].data)) }, len(c.batch))
	if n < len(c.batch) {
		c.starve()
	}
	if n == 0 {
		return
	}
	if err := c.propose(c.batch[:n]); err != nil {
		c.h.space.release(bytes)
		if errors.Is(err, raft.ErrProposalDropped) {
			return // too many uncommitted bytes: retried on the next iteration
		}
		for _, p := range c.batch[:n] {
			p.done(err)
		}
	} else {
		c.admitted += bytes
	}
	rest := copy(c.batch, c.batch[n:])
	clear(c.batch[rest:])
	c.batch = c.batch[:rest]
}

// propose steps batch into Raft as one proposal message and registers it
// as pending; on error nothing is registered.
func (c *core) propose(batch []*proposal) error {
	ents := make([]raftpb.Entry, len(batch)) // Raft keeps this slice: never reused
	for i, p := range batch {
		c.nextProposalID++
		binary.LittleEndian.PutUint64(p.data, c.nextProposalID)
		ents[i].Data = p.data
		c.pending[c.nextProposalID] = p
	}
	err := c.rn.Step(raftpb.Message{Type: raftpb.MsgProp, From: c.self, Entries: ents})
	if err == nil {
		// Raft stamps the entries it accepts in place with its term and
		// their index (raft.appendEntry); the proposal remembers them.
		for i, p := range batch {
			p.term, p.index = ents[i].Term, ents[i].Index
			if p.term == 0 || p.index == 0 {
				_ = invariant.Failf("replication: %v: Raft accepted a proposal without stamping its term and index", c.g.id)
			}
		}
		return nil
	}
	for i := range ents {
		delete(c.pending, binary.LittleEndian.Uint64(ents[i].Data))
	}
	if errors.Is(err, raft.ErrProposalDropped) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrProposalDropped, err)
}

func (c *core) notLeaderErr() error {
	if c.lead == 0 {
		return ErrNoLeader
	}
	return ErrNotLeader
}

// handleReady persists, sends and applies one Ready, in the order the Raft
// thesis allows (§10.2.1): messages that do not depend on this node's
// unpersisted state (appends and heartbeats from a leader, vote requests) go
// out first, so that followers persist in parallel with the leader; the
// entries and hard state are persisted; then the responses that vouch for
// them (append and vote responses) go out; then committed entries are
// applied. Raft v3.6 keeps the responses apart for exactly this purpose
// (raft.go send: msgsAfterAppend).
func (c *core) handleReady() error {
	rd := c.rn.Ready()
	if rd.SoftState != nil {
		c.onSoftState(*rd.SoftState)
	}
	if !raft.IsEmptyHardState(rd.HardState) && rd.HardState.Term != c.term {
		c.term = rd.HardState.Term
		c.reads.onNewTerm(c)
	}
	c.early, c.late = c.early[:0], c.late[:0]
	for _, m := range rd.Messages {
		switch m.Type {
		case raftpb.MsgAppResp, raftpb.MsgVoteResp, raftpb.MsgPreVoteResp:
			c.late = append(c.late, m)
		default:
			c.early = append(c.early, m)
		}
	}
	c.send(c.early)
	if err := c.persist(&rd); err != nil {
		return err
	}
	c.send(c.late)
	if err := c.apply(rd.CommittedEntries); err != nil {
		return err
	}
	c.reads.onReadStates(c, rd.ReadStates)
	c.rn.Advance(rd)
	return nil
}

// send hands messages to the transport; snapshots go their own way.
func (c *core) send(msgs []raftpb.Message) {
	n := 0
	for _, m := range msgs {
		c.onSend(&m)
		if m.Type == raftpb.MsgSnap {
			c.sendSnapshot(m)
			continue
		}
		if c.campaignBelowFloor(m) { // tombstone.go
			continue
		}
		msgs[n] = m
		n++
	}
	if n > 0 {
		c.h.transport.Send(c.g.id, msgs[:n])
	}
	clear(msgs)
}

// persist writes the Ready's snapshot, entries and hard state to the log.
// A hard state whose only change is the commit index is not persisted on its
// own (Raft's MustSync is false): the commit index may be lost in a crash and
// is learnt again from the leader; it rides along with the next record.
func (c *core) persist(rd *raft.Ready) error {
	hs := c.s.hard
	if !raft.IsEmptyHardState(rd.HardState) {
		hs = rd.HardState
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		meta := rd.Snapshot.Metadata
		if meta.Index != c.restored {
			return fmt.Errorf("replication: %v: Raft installs snapshot %d, the state machine holds %d",
				c.g.id, meta.Index, c.restored)
		}
		if err := c.s.installSnapshot(c.ctx, hs, meta); err != nil {
			return err
		}
		c.applied, c.restored = meta.Index, 0
		c.setConf(meta.ConfState)
	}
	switch {
	case len(rd.Entries) > 0 || rd.MustSync:
		return c.s.append(c.ctx, hs, rd.Entries)
	default:
		c.s.hard = hs
		return nil
	}
}

// apply applies committed entries to the state machine and completes the
// proposals made here.
func (c *core) apply(ents []raftpb.Entry) error {
	for i := range ents {
		e := &ents[i]
		if e.Index <= c.applied {
			continue
		}
		switch e.Type {
		case raftpb.EntryNormal:
			if err := c.applyNormal(e); err != nil {
				return err
			}
		case raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
			if err := c.applyConfChange(e); err != nil {
				return err
			}
		}
		if err := c.recordIndex(e); err != nil {
			return err
		}
		c.applied = e.Index
	}
	c.s.applied = c.applied
	return nil
}

// recordIndex tells a state machine that records indexes (IndexRecorder)
// of an entry that carried nothing for it: a new leader's empty entry, or a
// configuration change.
func (c *core) recordIndex(e *raftpb.Entry) error {
	r, ok := c.sm.(IndexRecorder)
	if !ok || e.Index <= c.smApplied || e.Index <= c.lastSMIndex || (e.Type == raftpb.EntryNormal && len(e.Data) > 0) {
		return nil
	}
	if err := r.RecordIndex(c.ctx, e.Index); err != nil {
		return fmt.Errorf("replication: %v: recording index %d: %w", c.g.id, e.Index, err)
	}
	c.lastSMIndex = e.Index
	return nil
}

func (c *core) applyNormal(e *raftpb.Entry) error {
	if len(e.Data) == 0 {
		c.confEntryReplaced(e)
		return nil // a new leader's empty entry, or a configuration change Raft refused
	}
	if len(e.Data) < proposalIDSize {
		return corruptf("%v entry %d of %d bytes has no proposal ID", c.g.id, e.Index, len(e.Data))
	}
	if e.Index > c.smApplied {
		data, err := c.s.stableData(e.Index)
		if err != nil {
			return err
		}
		if len(data) != len(e.Data) {
			return corruptf("%v entry %d has %d bytes in the log, %d in Raft", c.g.id, e.Index, len(data), len(e.Data))
		}
		if err := c.sm.Apply(c.ctx, e.Index, data[proposalIDSize:]); err != nil {
			return fmt.Errorf("replication: %v: applying entry %d: %w", c.g.id, e.Index, err)
		}
		c.lastSMIndex = e.Index
	}
	id := binary.LittleEndian.Uint64(e.Data)
	if p := c.pending[id]; p != nil && p.term == e.Term && p.index == e.Index {
		delete(c.pending, id)
		c.stats.proposals++
		sample := c.h.clock.Since(p.start)
		c.stats.latency += (sample - c.stats.latency) / 8
		p.done(nil)
	}
	return nil
}

func (c *core) applyConfChange(e *raftpb.Entry) error {
	var cc raftpb.ConfChangeI
	if e.Type == raftpb.EntryConfChange {
		var v1 raftpb.ConfChange
		if err := v1.Unmarshal(e.Data); err != nil {
			return corruptf("%v entry %d: configuration change: %v", c.g.id, e.Index, err)
		}
		cc = v1
	} else {
		var v2 raftpb.ConfChangeV2
		if err := v2.Unmarshal(e.Data); err != nil {
			return corruptf("%v entry %d: configuration change: %v", c.g.id, e.Index, err)
		}
		cc = v2
	}
	if err := checkConfChange(c.conf, cc.AsV2(), c.s.lastIndex()); err != nil {
		return corruptf("%v entry %d: configuration change %v cannot apply to %v: %v", c.g.id, e.Index, cc, c.conf, err)
	}
	conf := c.rn.ApplyConfChange(cc)
	c.s.recordConf(e.Index, *conf)
	c.setConf(*conf)
	c.h.log.Info("configuration changed", "group", c.g.id, "index", e.Index, "change", raftpb.ConfChangesToString(cc.AsV2().Changes),
		"voters", conf.Voters, "learners", conf.Learners, "outgoing", conf.VotersOutgoing)
	c.onConfApplied(e)
	return nil
}

// onSoftState publishes a leadership change and, when this node stops
// leading, fails what only a leader can finish.
func (c *core) onSoftState(ss raft.SoftState) {
	wasLeader, oldLead := c.isLeader, c.lead
	c.lead, c.isLeader = ss.Lead, ss.RaftState == raft.StateLeader
	c.g.leader.Store(ss.Lead)
	c.g.isLeader.Store(c.isLeader)
	if wasLeader && !c.isLeader {
		c.g.lease.Store(nil)
		c.failPending(ErrNoLeader)
		c.failConfWaiters(ErrNoLeader)
		c.reads.onLostLeadership(c)
	}
	if oldLead != c.lead {
		c.h.log.Info("leader changed", "group", c.g.id, "leader", NodeID(c.lead), "term", c.term)
		c.g.notifyWatchers(NodeID(c.lead))
	}
}

// failPending fails every proposal in flight, in ID order.
func (c *core) failPending(err error) {
	ids := make([]uint64, 0, len(c.pending))
	for id := range c.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		c.pending[id].done(err)
		delete(c.pending, id)
	}
}

// shutdown fails everything pending once the loop has stopped.
func (c *core) shutdown(err error) {
	c.ticker.Stop()
	c.h.live.awake(c.g)
	c.g.lease.Store(nil)
	for _, p := range c.batch {
		p.done(err)
	}
	c.batch = nil
	c.failPending(err)
	c.failConfWaiters(err)
	c.reads.fail(err)
	c.g.leader.Store(0)
	c.g.isLeader.Store(false)
}

// transferLeadership starts a transfer to node to if this node leads
// (Raft would forward the request from a follower to the leader, which
// refuses MsgTransferLeader from peers: inbound.go).
func (c *core) transferLeadership(to NodeID) {
	if c.rn.BasicStatus().RaftState != raft.StateLeader {
		return
	}
	c.reads.leaseUntil = time.Time{}
	c.g.lease.Store(nil) // before the transferee may be told to campaign
	c.rn.TransferLeader(uint64(to))
}
