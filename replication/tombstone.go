package replication

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/cache"
)

// A fenced group drops its log on this node (fence.go), but Raft's safety
// rests on what that log held. A node must never vote twice in a term, so
// it must remember the term it reached and the vote it cast in it; and a
// node must never help elect a candidate whose log lacks entries it
// acknowledged, since a majority of acknowledgements commits them. So the
// fence leaves a tombstone (doc.go, "Log records", kindTombstone): the
// group's last hard state term and vote, and its floor, the last entry of
// the log it dropped.
//
// When the group is added again, it starts from the tombstone: a group with
// no log here is bootstrapped in the tombstone's term with its vote, and
// until its own log reaches the floor (catching up from the leader, by
// appends or a snapshot) it refuses every vote and pre-vote for a candidate
// whose log is behind the floor (core.voteBelowFloor): Raft would compare
// the candidate with the short log it has now, not the one it
// acknowledged. For the same reason it sends no vote requests of its own,
// since it would count its own vote (core.campaignBelowFloor). (A group of
// one member wins its election without asking anyone: it starts over from
// the empty log, there being no other copy of the one it dropped.) Once its
// log has reached the floor, Raft's own check is as strict, and the
// tombstone is dropped. RemoveGroup drops it too.
//
// A tombstone is a pin on the write buffer, as the identity record is
// (identity.go): the releaser frees up to just below it and, when it is in
// the way of freeing more, first copies it to the head (keepTombstones).
// Copies are ordered with nothing: recovery merges every tombstone record
// of a group since its last removal record (tombstoneState.merge), and only
// the fence's own record drops the group's earlier records.

// logPoint is a position in a Raft log: an entry's index and term.
type logPoint struct{ index, term uint64 }

// atLeast reports whether a log ending at p is at least as up to date as one
// ending at q (Raft §5.4.1: the later last term, or the same and at least as
// long).
func (p logPoint) atLeast(q logPoint) bool {
	return p.term > q.term || p.term == q.term && p.index >= q.index
}

// tombstoneState is what a tombstone keeps of a dropped log.
type tombstoneState struct {
	term, vote uint64   // the last hard state's (vote: 0 for none)
	floor      logPoint // the log's last entry
}

// merge returns what a and a later record b say together: the higher term
// with its vote (in the same term, whichever vote was cast), and the more
// up-to-date floor.
func (a tombstoneState) merge(b tombstoneState) tombstoneState {
	switch {
	case b.term > a.term:
		a.term, a.vote = b.term, b.vote
	case b.term == a.term && b.vote != 0:
		a.vote = b.vote
	}
	if !a.floor.atLeast(b.floor) {
		a.floor = b.floor
	}
	return a
}

// tombstone is one group's tombstone in memory. state never changes once
// the tombstone is in the set (a new fence replaces the tombstone); seq and
// removing are guarded by the set's mutex.
type tombstone struct {
	group GroupID
	state tombstoneState
	// seq is a record that carries state (after recovery, the group's
	// oldest tombstone record): the tombstone's pin.
	seq cache.Seq
	// removing: RemoveGroup is dropping the tombstone. It still pins the
	// buffer until its removal record is durable, and is copied no more: a
	// copy after the removal record would bring it back.
	removing bool
	// passed: the group's log has reached the floor; the tombstone is no
	// longer needed (set on the group's loop, read by the releaser).
	passed atomic.Bool
}

// tombstones are the Host's, by group.
type tombstones struct {
	mu sync.Mutex
	m  map[GroupID]*tombstone
}

// init takes the recovered tombstones. A group whose recovered log already
// reaches its floor needs none; another one's log takes it (attach).
func (t *tombstones) init(rec map[GroupID]*tombstone, logs map[GroupID]*logStorage) {
	t.m = make(map[GroupID]*tombstone, len(rec))
	for id, ts := range rec {
		if s := logs[id]; s != nil && !s.attachTombstone(ts) {
			continue
		}
		t.m[id] = ts
	}
}

func (t *tombstones) get(id GroupID) *tombstone {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// Tombstones lists the groups that failed and were fenced on this node and
// whose tombstones stand: added again, each starts from its term and vote;
// RemoveGroup drops a tombstone (call it for a volume deleted while this
// node was away).
func (h *Host) Tombstones() []GroupID {
	h.tombs.mu.Lock()
	defer h.tombs.mu.Unlock()
	ids := make([]GroupID, 0, len(h.tombs.m))
	for id, ts := range h.tombs.m {
		if !ts.passed.Load() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// writeTombstone persists the tombstone of s's group, which is being
// fenced: one kindTombstone record that drops the group's log. s's log is
// still pinned: the record lies above its pin until the tombstone, holding
// the record's seq, takes over. A group without a term (never
// bootstrapped) gets a plain removal record.
func (h *Host) writeTombstone(s *logStorage) error {
	var b recordBuilder
	if s.hard.Term == 0 {
		_, err := s.write(h.ctx, kindRemove, b.removeRecord(s.group))
		return err
	}
	state := s.tombstoneState()
	if old := h.tombs.get(s.group); old != nil {
		state = old.state.merge(state)
	}
	seq, err := s.write(h.ctx, kindTombstone, b.tombstoneRecord(s.group, state, true))
	if err != nil {
		return err
	}
	h.tombs.mu.Lock()
	defer h.tombs.mu.Unlock()
	h.tombs.m[s.group] = &tombstone{group: s.group, state: state, seq: seq}
	return nil
}

// startRemoval marks group id's tombstone, if it has one, as being removed
// (RemoveGroup). finish ends it: with removed, the removal record is
// durable and the tombstone goes; otherwise it stays as it was.
func (t *tombstones) startRemoval(id GroupID) (finish func(removed bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.m[id]
	if ts == nil {
		return func(bool) {}
	}
	ts.removing = true
	return func(removed bool) {
		t.mu.Lock()
		defer t.mu.Unlock()
		ts.removing = false
		if removed && t.m[id] == ts {
			delete(t.m, id)
		}
	}
}

// keepTombstones returns the pin up to which the releaser may free, given
// low, what the groups' and the identity's pins allow: low, or the oldest
// tombstone record below it. Tombstones whose groups' logs reached their
// floors are dropped first. When something other than tombstone and
// identity records lies between the oldest tombstone and low, every
// tombstone below low is copied to the head (if the buffer has room, as
// for the identity record) and low is returned; otherwise copying would
// only move them, and the oldest one's seq is returned.
func (h *Host) keepTombstones(low uint64) uint64 {
	t := &h.tombs
	t.mu.Lock()
	defer t.mu.Unlock()
	var below []*tombstone
	for id, ts := range t.m {
		switch {
		case ts.passed.Load() && !ts.removing:
			delete(t.m, id)
		case uint64(ts.seq) < low:
			below = append(below, ts)
		}
	}
	if len(below) == 0 {
		return low
	}
	slices.SortFunc(below, func(a, b *tombstone) int { return cmpID(a.seq, b.seq) })
	first, kept := uint64(below[0].seq), uint64(len(below))
	if p := h.ident.pin.Load(); p > first && p < low {
		kept++
	}
	if low-first <= kept {
		return first
	}
	for _, ts := range below {
		if ts.removing || !h.copyTombstone(ts) {
			return uint64(ts.seq)
		}
	}
	return low
}

// copyTombstone appends a copy of ts, if the buffer has room for it, and
// moves its pin there. The set's mutex is held.
func (h *Host) copyTombstone(ts *tombstone) bool {
	if st := h.buf.Stats(); st.Size-st.Used < 2*(tombstoneRecordSize+recordSlack) {
		return false
	}
	var b recordBuilder
	seq, err := h.buf.Append(h.ctx, kindTombstone, b.tombstoneRecord(ts.group, ts.state, false)...)
	if err != nil {
		if h.ctx.Err() == nil {
			h.log.Warn("copying a tombstone failed", "group", ts.group, "err", err)
		}
		return false
	}
	ts.seq = seq
	return true
}

// tombstoneState is what a fence of s's group must keep: its term and
// vote, and the more up to date of its log's end and the floor it still
// has to reach.
func (s *logStorage) tombstoneState() tombstoneState {
	st := tombstoneState{term: s.hard.Term, vote: s.hard.Vote, floor: s.last()}
	if s.tomb != nil && !st.floor.atLeast(s.floor) {
		st.floor = s.floor
	}
	return st
}

// last is where the log ends.
func (s *logStorage) last() logPoint {
	term, _ := s.Term(s.lastIndex())
	return logPoint{index: s.lastIndex(), term: term}
}

// attachTombstone makes the log start from ts: its term and vote unless
// the log has a later term (a new log bootstraps in ts's term), and its
// floor until the log reaches it. It reports whether the log still has to.
func (s *logStorage) attachTombstone(ts *tombstone) bool {
	if s.hard.Term < ts.state.term {
		s.hard.Term, s.hard.Vote = ts.state.term, ts.state.vote
	}
	s.tomb, s.floor = ts, ts.state.floor
	return !s.passFloor()
}

// passFloor drops the log's tombstone once the log has reached its floor,
// and reports whether it has (or never had one). It runs after every
// durable write that extends the log.
func (s *logStorage) passFloor() bool {
	if s.tomb == nil {
		return true
	}
	if !s.last().atLeast(s.floor) {
		return false
	}
	s.tomb.passed.Store(true)
	s.tomb = nil
	return true
}

// voteBelowFloor reports whether m asks for a vote (or a pre-vote) this
// node must not give: its group's log has not reached the floor of the log
// it dropped when it was fenced, and the candidate's log is behind that
// floor. Raft would grant it, comparing the candidate with the short log
// the group has now.
func (c *core) voteBelowFloor(m raftpb.Message) bool {
	if c.s.tomb == nil || m.Type != raftpb.MsgVote && m.Type != raftpb.MsgPreVote {
		return false
	}
	if (logPoint{index: m.Index, term: m.LogTerm}).atLeast(c.s.floor) {
		return false
	}
	c.h.log.Debug("vote refused: the candidate's log is behind the log this node dropped",
		"group", c.g.id, "candidate", NodeID(m.From), "log", fmt.Sprintf("(%d, %d)", m.LogTerm, m.Index),
		"floor", fmt.Sprintf("(%d, %d)", c.s.floor.term, c.s.floor.index))
	return true
}

// campaignBelowFloor reports whether m is this node's own vote or pre-vote
// request while its log has not reached the floor: it must not win an
// election, since it votes for itself, a candidate behind the floor.
// Dropped, the request leaves it a pre-candidate with no votes but its own,
// which the leader's next message makes a follower again.
func (c *core) campaignBelowFloor(m raftpb.Message) bool {
	return c.s.tomb != nil && m.From == c.self && (m.Type == raftpb.MsgVote || m.Type == raftpb.MsgPreVote)
}
