package replication

import (
	"encoding/binary"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
)

// readState tracks read barriers on the leader (§2.3 of the design notes in
// doc.go, "Reads"). A read is served at a read index: the commit index at a
// moment this node was certainly the leader. Under a lease the current commit
// index is such an index; otherwise the loop asks Raft (ReadIndex, safe mode)
// for a quorum-confirmed one, for every read queued since the last round at
// once. Either way the read completes when the applied index reaches it.
type readState struct {
	queue   []*readRequest        // waiting for the next round
	rounds  map[uint64]*readRound // ReadIndex rounds in flight, by context
	waiting []readWait            // read index known, waiting for apply
	nextID  uint64
	// leaseUntil: this node's leadership in leaseTerm was confirmed by a
	// quorum at a time t, and leaseUntil = t + Config.leaseDuration().
	leaseUntil time.Time
	leaseTerm  uint64
	lastRead   time.Time // when a read was last asked for (lease renewal)
}

type readRound struct {
	start   time.Time
	term    uint64
	waiters []*readRequest
}

type readWait struct {
	index uint64
	req   *readRequest
}

func (r *readState) init() { r.rounds = make(map[uint64]*readRound) }

// queueRead takes one read barrier.
func (c *core) queueRead(req *readRequest) {
	if !c.isLeader {
		req.done(c.notLeaderErr())
		return
	}
	c.wakeUp(0) // quiesce.go: the lease lapsed when the group quiesced
	now := c.h.clock.Now()
	c.reads.lastRead = now
	if index, ok := c.leaseReadIndex(now); ok {
		c.reads.wait(c.applied, index, req)
		return
	}
	c.reads.queue = append(c.reads.queue, req)
}

// leaseReadIndex returns the commit index when this node holds a lease and
// has committed an entry in its term (before that, its commit index may lag
// the previous leader's).
func (c *core) leaseReadIndex(now time.Time) (uint64, bool) {
	r := &c.reads
	if c.h.cfg.DisableLease || r.leaseTerm != c.term || !now.Before(r.leaseUntil) {
		return 0, false
	}
	bs := c.rn.BasicStatus()
	if bs.LeadTransferee != 0 || bs.Term != c.term {
		return 0, false
	}
	if term, err := c.s.Term(bs.Commit); err != nil || term != c.term {
		return 0, false
	}
	return bs.Commit, true
}

// leaseGrant is a lease the loop publishes for reads on other goroutines:
// until then (host clock) this node leads, and index, a commit index it
// had once it had committed an entry of its term, covers every write any
// leader acknowledged before the grant was published.
type leaseGrant struct {
	until time.Time
	index uint64
}

// publishLease publishes the loop's lease, with the current commit index,
// while leaseReadIndex would grant reads one, and the applied index. The
// lease is withdrawn at once where leadership may go (a new term, lost
// leadership, a transfer started, the loop stopping); otherwise it lapses
// at until.
func (c *core) publishLease() {
	c.g.applied.Store(c.applied)
	index, ok := c.leaseReadIndex(c.h.clock.Now())
	if !ok {
		if c.g.lease.Load() != nil {
			c.g.lease.Store(nil)
		}
		return
	}
	if l := c.g.lease.Load(); l == nil || l.index != index || !l.until.Equal(c.reads.leaseUntil) {
		c.g.lease.Store(&leaseGrant{until: c.reads.leaseUntil, index: index})
	}
}

// leaseRead passes a read barrier on the caller's goroutine, without the
// loop, when the published lease still runs and the entries it covers are
// applied here: the same reasoning as queueRead's lease path, where the
// read index is the commit index under the lease. A write this leader
// acknowledged later was applied before it was acknowledged, so it is in
// the local replica too. Anything else goes through the loop.
func (g *Group) leaseRead() bool {
	l := g.lease.Load()
	if l == nil {
		return false
	}
	now := g.host.clock.Now()
	if !now.Before(l.until) || g.applied.Load() < l.index {
		return false
	}
	// Renewal needs lastRead only to about a tick: reads at full rate do
	// not all write the one shared word.
	if ns := now.UnixNano(); ns-g.lastRead.Load() > int64(time.Millisecond) {
		g.lastRead.Store(ns)
	}
	return true
}

// startRound asks Raft for a read index for every queued read.
func (r *readState) startRound(c *core) {
	if len(r.queue) == 0 {
		return
	}
	r.newRound(c, r.queue)
	r.queue = nil
}

// The round is asked of Raft only while Raft leads: this loop may not have
// seen yet that a message stepped in this iteration ended its leadership,
// and a follower would forward the request to the leader, which refuses
// MsgReadIndex from peers (inbound.go). The next Ready's soft state then
// fails the round (onLostLeadership).
func (r *readState) newRound(c *core, waiters []*readRequest) {
	r.nextID++
	r.rounds[r.nextID] = &readRound{start: c.h.clock.Now(), term: c.term, waiters: waiters}
	if c.rn.BasicStatus().RaftState == raft.StateLeader {
		c.rn.ReadIndex(binary.LittleEndian.AppendUint64(nil, r.nextID))
	}
}

// maybeRenewLease starts an empty round when reads are being served and the
// lease ends within half its length, so that a steady read load never waits
// for a round trip.
func (c *core) maybeRenewLease() {
	r := &c.reads
	lease := c.h.cfg.leaseDuration()
	if c.h.cfg.DisableLease || !c.isLeader || lease == 0 || len(r.rounds) > 0 {
		return
	}
	now := c.h.clock.Now()
	last := r.lastRead
	if t := time.Unix(0, c.g.lastRead.Load()); t.After(last) {
		last = t // a read served by the published lease (leaseRead)
	}
	if now.Sub(last) > lease || r.leaseUntil.Sub(now) > lease/2 {
		return
	}
	r.newRound(c, nil)
}

// onReadStates completes the rounds Raft answered.
func (r *readState) onReadStates(c *core, states []raft.ReadState) {
	for _, rs := range states {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		id := binary.LittleEndian.Uint64(rs.RequestCtx)
		round := r.rounds[id]
		if round == nil {
			continue
		}
		delete(r.rounds, id)
		if round.term == c.term && c.isLeader {
			until := round.start.Add(c.h.cfg.leaseDuration())
			if r.leaseTerm != c.term || until.After(r.leaseUntil) {
				r.leaseUntil, r.leaseTerm = until, c.term
			}
		}
		for _, req := range round.waiters {
			r.wait(c.applied, rs.Index, req)
		}
	}
}

func (r *readState) wait(applied, index uint64, req *readRequest) {
	if applied >= index {
		req.done(nil)
		return
	}
	r.waiting = append(r.waiting, readWait{index: index, req: req})
}

// complete finishes the reads whose index is applied.
func (r *readState) complete(applied uint64) {
	if len(r.waiting) == 0 {
		return
	}
	r.waiting = slices.DeleteFunc(r.waiting, func(w readWait) bool {
		if w.index <= applied {
			w.req.done(nil)
			return true
		}
		return false
	})
}

// onNewTerm drops the lease: it was for another term.
func (r *readState) onNewTerm(c *core) {
	c.g.lease.Store(nil)
	r.leaseUntil, r.leaseTerm = time.Time{}, c.term
}

// onLostLeadership fails the reads that have no read index yet. Reads that
// have one stay: the index was confirmed while this node led, so serving them
// once applied is still linearizable.
func (r *readState) onLostLeadership(c *core) {
	err := c.notLeaderErr()
	for _, req := range r.queue {
		req.done(err)
	}
	r.queue = nil
	r.failRounds(err)
	r.leaseUntil = time.Time{}
}

// failRounds fails the waiters of every round in flight, in round order.
func (r *readState) failRounds(err error) {
	ids := make([]uint64, 0, len(r.rounds))
	for id := range r.rounds {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		for _, req := range r.rounds[id].waiters {
			req.done(err)
		}
		delete(r.rounds, id)
	}
}

// fail fails every read (the group stopped).
func (r *readState) fail(err error) {
	for _, w := range r.waiting {
		w.req.done(err)
	}
	r.waiting = nil
	for _, req := range r.queue {
		req.done(err)
	}
	r.queue = nil
	r.failRounds(err)
}
