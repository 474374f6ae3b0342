package replication

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// What peers send is checked before Raft sees it (doc.go, "Inbound
// checks"): Raft trusts its input and panics on messages no correct peer
// sends (a commit index beyond the log, entries that conflict with committed
// ones, a configuration that cannot be restored). A refused message is
// dropped, counted by reason, logged (one line a second at most) and the
// connection it came on is closed.

// RejectReason says why an inbound frame or Raft message was refused.
type RejectReason uint8

const (
	// RejectFrame: a handshake or frame that does not decode.
	RejectFrame RejectReason = iota
	// RejectSender: the message's From is not the node the connection's
	// handshake named, or it is this node, or 0.
	RejectSender
	// RejectDestination: the handshake or the message is for another node.
	RejectDestination
	// RejectGroup: the group does not run here. The message is dropped but
	// the connection stays: a group is created on its members one after
	// another, and the first ones talk before the last one has it.
	RejectGroup
	// RejectMember: the sender is neither a voter nor a learner of the
	// group's configuration.
	RejectMember
	// RejectType: a message type that no peer sends to this implementation
	// (local types such as MsgHup or MsgBeat, MsgProp, MsgReadIndex,
	// MsgTransferLeader, MsgSnap outside a snapshot stream).
	RejectType
	// RejectTerm: a term of 0 or beyond maxRaftValue, or a log term above
	// the message's term.
	RejectTerm
	// RejectIndex: an index or commit beyond maxRaftValue, or a heartbeat
	// committing past the end of this node's log.
	RejectIndex
	// RejectEntry: appended entries that do not follow one another (indices
	// not consecutive from the message's Index, terms falling or above the
	// message's term), an unknown entry type, or entries where none belong.
	RejectEntry
	// RejectSnapshot: snapshot metadata Raft could not install (a term of 0
	// or above the message's, a configuration that does not restore), or a
	// snapshot for a leader in its own term.
	RejectSnapshot
	// RejectAuth: a peer that did not authenticate (TLS, tls.go): no TLS,
	// no certificate, one the cluster's CA did not sign, one naming another
	// cluster, or another node than the one the connection claims or was
	// dialed for. Counted per connection: nothing it carried was read.
	RejectAuth
	// NumRejectReasons is the number of reasons (the length of
	// HostStats.Rejected).
	NumRejectReasons
)

var rejectNames = [NumRejectReasons]string{"frame", "sender", "destination", "group", "member", "type", "term",
	"index", "entry", "snapshot", "auth"}

// String returns the reason's label, as the metrics name it.
func (r RejectReason) String() string {
	if r < NumRejectReasons {
		return rejectNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// ErrRejected is wrapped by the error of every refused message or frame.
var ErrRejected = errors.New("replication: inbound message refused")

// rejectError is a refusal with its reason.
type rejectError struct {
	reason RejectReason
	msg    string
}

func (e *rejectError) Error() string        { return fmt.Sprintf("%v (%v): %s", ErrRejected, e.reason, e.msg) }
func (e *rejectError) Is(target error) bool { return target == ErrRejected }

func refused(reason RejectReason, format string, args ...any) error {
	return &rejectError{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// rejectReason returns the reason of a refusal, and false for any other
// error.
func rejectReason(err error) (RejectReason, bool) {
	var re *rejectError
	if errors.As(err, &re) {
		return re.reason, true
	}
	return 0, false
}

// maxRaftValue bounds every term and index a peer may send: no real log
// comes near it (2^62 entries at ten million a second take 14,000 years),
// and below it no sum of an index and a message's entry count overflows.
const maxRaftValue = 1 << 62

// checkMessage checks what can be checked of m, received from a peer,
// without the group's state: the type, the terms and indices, the entries.
// The sender's membership and the commit index against the log are checked
// on the group's loop (core.checkStep).
func checkMessage(m *raftpb.Message) error {
	switch m.Type {
	case raftpb.MsgApp, raftpb.MsgAppResp, raftpb.MsgVote, raftpb.MsgVoteResp, raftpb.MsgPreVote,
		raftpb.MsgPreVoteResp, raftpb.MsgHeartbeat, raftpb.MsgHeartbeatResp, raftpb.MsgTimeoutNow:
	default:
		// MsgProp and MsgReadIndex: proposals and reads are served by the
		// leader only, nothing forwards them. MsgTransferLeader: transfers
		// start on the leader; Raft forwards one that reaches a follower with
		// its term set and panics. MsgSnap: only in a snapshot stream.
		return refused(RejectType, "%v from a peer", m.Type)
	}
	switch {
	case m.Term == 0 || m.Term > maxRaftValue:
		return refused(RejectTerm, "%v with term %d", m.Type, m.Term)
	case m.LogTerm > m.Term:
		return refused(RejectTerm, "%v of term %d with log term %d", m.Type, m.Term, m.LogTerm)
	case m.Index > maxRaftValue || m.Commit > maxRaftValue || m.RejectHint > maxRaftValue:
		return refused(RejectIndex, "%v with index %d, commit %d, hint %d", m.Type, m.Index, m.Commit, m.RejectHint)
	case m.Snapshot != nil:
		return refused(RejectSnapshot, "%v carrying a snapshot", m.Type)
	case m.Type == raftpb.MsgApp:
		return checkEntries(m)
	case len(m.Entries) > 0:
		return refused(RejectEntry, "%v carrying %d entries", m.Type, len(m.Entries))
	}
	return nil
}

// checkEntries checks that an append's entries follow its previous entry
// (Index, LogTerm) one after another, with terms that never fall and never
// exceed the append's term, and known types. Raft appends what it is given
// from the first index that differs from its log, and slicing its unstable
// log at an index past its end, or overwriting a committed entry, panics.
func checkEntries(m *raftpb.Message) error {
	if uint64(len(m.Entries)) > maxRaftValue-m.Index {
		return refused(RejectIndex, "%d entries after index %d", len(m.Entries), m.Index)
	}
	term := m.LogTerm
	for i := range m.Entries {
		e := &m.Entries[i]
		switch {
		case e.Index != m.Index+1+uint64(i):
			return refused(RejectEntry, "entry %d of an append after %d has index %d", i, m.Index, e.Index)
		case e.Term == 0 || e.Term < term || e.Term > m.Term:
			return refused(RejectEntry, "entry %d has term %d after term %d, in an append of term %d", e.Index, e.Term, term, m.Term)
		case e.Type != raftpb.EntryNormal && e.Type != raftpb.EntryConfChange && e.Type != raftpb.EntryConfChangeV2:
			return refused(RejectEntry, "entry %d has type %d", e.Index, e.Type)
		}
		term = e.Term
	}
	return nil
}

// checkSnapshotMessage checks a MsgSnap from a snapshot stream: the
// message as checkMessage would, and metadata Raft can install (raft.restore
// panics on a configuration that does not restore).
func checkSnapshotMessage(m *raftpb.Message) error {
	switch {
	case m.Type != raftpb.MsgSnap:
		return refused(RejectType, "%v opening a snapshot stream", m.Type)
	case m.Snapshot == nil:
		return refused(RejectSnapshot, "MsgSnap without a snapshot")
	case m.Term == 0 || m.Term > maxRaftValue:
		return refused(RejectTerm, "MsgSnap with term %d", m.Term)
	case len(m.Entries) > 0:
		return refused(RejectEntry, "MsgSnap carrying %d entries", len(m.Entries))
	}
	meta := &m.Snapshot.Metadata
	switch {
	case meta.Index == 0 || meta.Index > maxRaftValue:
		return refused(RejectSnapshot, "snapshot at index %d", meta.Index)
	case meta.Term == 0 || meta.Term > m.Term:
		return refused(RejectSnapshot, "snapshot of term %d in a MsgSnap of term %d", meta.Term, m.Term)
	}
	return checkConfState(meta.ConfState, meta.Index)
}

// checkConfState reports whether cs restores into a configuration that is
// exactly cs, as raft.restore requires (it panics otherwise).
func checkConfState(cs raftpb.ConfState, lastIndex uint64) error {
	if len(cs.Voters) == 0 {
		return refused(RejectSnapshot, "configuration %v has no voter", cs)
	}
	cfg, trk, err := confchange.Restore(confchange.Changer{
		Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: lastIndex,
	}, cs)
	if err != nil {
		return refused(RejectSnapshot, "configuration %v: %v", cs, err)
	}
	restored := tracker.ProgressTracker{Config: cfg, Progress: trk}
	if err := restored.ConfState().Equivalent(cs); err != nil {
		return refused(RejectSnapshot, "configuration %v: %v", cs, err)
	}
	return nil
}

// checkConfChange reports whether Raft can apply cc to the configuration
// cs (raft.applyConfChange panics when it cannot).
func checkConfChange(cs raftpb.ConfState, cc raftpb.ConfChangeV2, lastIndex uint64) error {
	changer := confchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: lastIndex}
	cfg, trk, err := confchange.Restore(changer, cs)
	if err != nil {
		return err
	}
	changer.Tracker = tracker.ProgressTracker{Config: cfg, Progress: trk, MaxInflight: 1}
	switch autoLeave, joint := cc.EnterJoint(); {
	case cc.LeaveJoint():
		_, _, err = changer.LeaveJoint()
	case joint:
		_, _, err = changer.EnterJoint(autoLeave, cc.Changes...)
	default:
		_, _, err = changer.Simple(cc.Changes...)
	}
	return err
}

// members returns the IDs of every voter and learner of cs, incoming and
// outgoing.
func members(cs raftpb.ConfState) []uint64 {
	out := make([]uint64, 0, len(cs.Voters)+len(cs.Learners))
	for _, set := range [][]uint64{cs.Voters, cs.VotersOutgoing, cs.Learners, cs.LearnersNext} {
		for _, id := range set {
			if !containsID(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// checkStep checks m against the group's state just before it is stepped
// (on the loop): the sender belongs to the configuration, and a heartbeat
// commits no further than the end of Raft's log. Raft's log may hold
// entries stepped in this iteration and not yet persisted, possibly a
// shorter suffix than the persisted one (an append that conflicts); when
// logFloor cannot vouch for the commit index, the log is persisted first so
// that the persisted last index is Raft's. A non-refusal error is the loop's
// (a persist that failed): fatal.
func (c *core) checkStep(m *raftpb.Message) error {
	if !containsID(c.members, m.From) {
		return refused(RejectMember, "%v from %v, not a member of %v (members %v)", m.Type, NodeID(m.From), c.g.id, c.members)
	}

	if m.Type != raftpb.MsgHeartbeat || m.Commit <= c.logFloor {
		return nil
	}
	if c.rn.HasReady() {
		if err := c.settle(); err != nil {
			return err
		}
	}
	if last := c.s.lastIndex(); m.Commit > last {
		return refused(RejectIndex, "heartbeat from %v commits %d, this log ends at %d", NodeID(m.From), m.Commit, last)
	}
	return nil
}

// settle handles Raft's Ready until there is none: everything Raft holds is
// persisted, sent and applied, and the persisted log is Raft's log.
func (c *core) settle() error {
	for c.rn.HasReady() {
		if err := c.handleReady(); err != nil {
			c.fatal = err
			return err
		}
	}
	c.logFloor = c.s.lastIndex()
	return nil
}

// setConf records the configuration Raft now uses. A group that joined
// with no configuration yet (Host.JoinGroup) takes messages from the peers
// it was told of until its first snapshot brings one.
func (c *core) setConf(cs raftpb.ConfState) {
	c.conf = cs
	c.members = members(cs)
	// The peers the group was added with are the voters as its owner knows
	// them now (the metadata): a member whose configuration is older than
	// that (it was down or cut off while members were added) must hear the
	// members added since, the leader among them, to catch up.
	for _, p := range c.g.joinPeers {
		if !containsID(c.members, p) {
			c.members = append(c.members, p)
		}
	}
	c.publishQuiescePeers()
	m := membershipOf(cs)
	c.g.status.Lock()
	c.g.status.s.Members = m
	c.g.status.Unlock()
}

// rejections counts and logs what the Host refused.
type rejections struct {
	counts [NumRejectReasons]atomic.Uint64
	logged atomic.Int64  // host clock, Unix ns: when the last refusal was logged
	quiet  atomic.Uint64 // refusals not logged since
}

// rejectLogInterval is the least time between two log lines about refused
// messages: a peer that sends garbage must not flood the log.
const rejectLogInterval = time.Second

// refuse counts a message the Host refused, logs it (rate-limited) and
// refuses its source, closing the connection; a message for a group that
// does not run here is only counted.
func (h *Host) refuse(src Source, group GroupID, from NodeID, err error) {
	reason, _ := rejectReason(err)
	h.countRefusal(reason, group, from, err)
	if src != nil && reason != RejectGroup {
		src.Refuse()
	}
}

// countRefusal counts a refusal and logs it at Warn, at most one line per
// rejectLogInterval (the line says how many were not logged since).
func (h *Host) countRefusal(reason RejectReason, group GroupID, from NodeID, err error) {
	r := &h.rejections
	if reason < NumRejectReasons {
		r.counts[reason].Add(1)
	}
	if reason == RejectGroup {
		return
	}
	now := h.clock.Now().UnixNano()
	last := r.logged.Load()
	if (last != 0 && now-last < int64(rejectLogInterval)) || !r.logged.CompareAndSwap(last, now) {
		r.quiet.Add(1)
		return
	}
	h.log.Warn("raft: refused what a peer sent; its connection is closed", "reason", reason.String(),
		"group", group, "from", from, "err", err, "not_logged_since", r.quiet.Swap(0))
}

// rejected returns the counts of refusals by reason.
func (h *Host) rejected() [NumRejectReasons]uint64 {
	var out [NumRejectReasons]uint64
	for i := range out {
		out[i] = h.rejections.counts[i].Load()
	}
	return out
}

// check is checkMessage plus what the Host knows at delivery: m is for this
// node, and from a node other than this one.
func (hh hostHandler) check(m *raftpb.Message) error {
	self := uint64(hh.h.cfg.NodeID)
	switch {
	case m.To != self:
		return refused(RejectDestination, "%v for %v reached %v", m.Type, NodeID(m.To), NodeID(self))
	case m.From == self || m.From == 0 || m.From == raft.LocalAppendThread || m.From == raft.LocalApplyThread:
		return refused(RejectSender, "%v claiming to come from %v", m.Type, NodeID(m.From))
	}
	return nil
}

// HandleMessage implements Handler: m is checked (check), then queued for
// its group's loop, which checks it against the group's state (checkStep).
func (hh hostHandler) HandleMessage(group GroupID, m raftpb.Message, src Source) {
	h := hh.h
	if err := hh.check(&m); err != nil {
		h.refuse(src, group, NodeID(m.From), err)
		return
	}
	h.live.noteHeard(NodeID(m.From)) // quiesce_live.go
	if group == 0 {
		hh.handleNodeHeartbeat(&m, src)
		return
	}
	g := h.Group(group)
	if g == nil {
		h.refuse(src, group, NodeID(m.From), refused(RejectGroup, "%v for %v, which does not run here", m.Type, group))
		return
	}
	if err := checkMessage(&m); err != nil {
		h.refuse(src, group, NodeID(m.From), err)
		return
	}
	g.deliver(inbound{m: m, src: src})
}

// HandleSnapshot implements Handler: the stream's MsgSnap is checked
// (checkSnapshotMessage) before the group's loop restores it.
func (hh hostHandler) HandleSnapshot(group GroupID, m raftpb.Message, body io.Reader) error {
	h := hh.h
	err := hh.check(&m)
	if err == nil {
		err = checkSnapshotMessage(&m)
	}
	if err != nil {
		h.refuse(nil, group, NodeID(m.From), err)
		return fmt.Errorf("%w: %w", ErrSnapshotRejected, err)
	}
	g := h.Group(group)
	if g == nil {
		return fmt.Errorf("%w: %v is not running here", ErrSnapshotRejected, group)
	}
	err = g.receiveSnapshot(m, body)
	if _, ok := rejectReason(err); ok { // checkStep on the loop
		h.refuse(nil, group, NodeID(m.From), err)
		return fmt.Errorf("%w: %w", ErrSnapshotRejected, err)
	}
	return err
}

// ReportUnreachable implements Handler.
func (hh hostHandler) ReportUnreachable(to NodeID, group GroupID) {
	if g := hh.h.Group(group); g != nil {
		g.reportUnreachable(to)
	}
}

// ReportRejected implements Handler: it counts and logs what the transport
// refused.
func (hh hostHandler) ReportRejected(reason RejectReason, from NodeID, err error) {
	hh.h.countRefusal(reason, 0, from, err)
}

// inbound is a peer's message on its way to the group's loop, with the
// connection it came on.
type inbound struct {
	m   raftpb.Message
	src Source
}
