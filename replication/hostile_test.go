package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/clock"
	"basalt/pkg/pmem"
)

// hostileCluster is a tcpCluster with fast ticks and a second volume group,
// a bystander that forged frames never name: what peers send to one group
// must not stop another.
type hostileCluster struct {
	*tcpCluster
	target, bystander GroupID
	next              GroupID // the next group ID rebuild uses
}

const (
	hostileTarget    GroupID = 1
	hostileBystander GroupID = 2
)

func newHostileCluster(t testing.TB) *hostileCluster {
	c := &hostileCluster{
		tcpCluster: newTCPCluster(t, 8<<20, func(cfg *Config) {
			cfg.TickInterval = 5 * time.Millisecond
		}),
		target: hostileTarget, bystander: hostileBystander, next: 3,
	}
	if err := c.addGroup(c.bystander); err != nil {
		t.Fatal(err)
	}
	return c
}

// addGroup adds volume group id on every host.
func (c *hostileCluster) addGroup(id GroupID) error {
	for _, h := range c.hosts {
		if _, err := addBlockSM(h, id, []NodeID{1, 2, 3}, newBlockSM(tcpVolumeSize)); err != nil {
			return err
		}
	}
	return nil
}

// rebuild replaces the target group by a new one on every host: forged
// messages from a member may legitimately break a group (see
// FuzzHostFrames).
func (c *hostileCluster) rebuild() error {
	for _, h := range c.hosts {
		if err := h.RemoveGroup(c.target); err != nil {
			return err
		}
	}
	c.target = c.next
	c.next++
	return c.addGroup(c.target)
}

// serve writes block i through group id's leader, retrying while
// leadership moves, and reads it back; it fails after limit.
func (c *hostileCluster) serve(id GroupID, i int64, limit time.Duration) error {
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		for _, h := range c.hosts {
			g := h.Group(id)
			if g == nil || !g.IsLeader() {
				continue
			}
			v := volumeOf(g)
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := v.WriteAt(wctx, block(i), (i%64)*4096)
			if err == nil {
				got := make([]byte, 4096)
				err = v.ReadAt(wctx, got, (i%64)*4096)
				if err == nil && !bytes.Equal(got, block(i)) {
					err = fmt.Errorf("block %d read back %q", i, got[:8])
				}
			}
			cancel()
			if err == nil {
				return nil
			}
			last = err
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("group %v did not serve within %v: %v", id, limit, last)
}

// volumeOf returns the blockSM that is g's state machine.
func volumeOf(g *Group) *blockSM { return g.c.sm.(*blockSM) }

// follower returns a node that does not lead group id, once it has a
// leader.
func (c *hostileCluster) follower(id GroupID) (follower, leader NodeID) {
	c.t.Helper()
	if err := c.serve(id, 0, 10*time.Second); err != nil {
		c.t.Fatal(err)
	}
	for n, h := range c.hosts {
		if l := h.Group(id).Leader(); l != 0 && l != n {
			return n, l
		}
	}
	c.t.Fatalf("group %v: no follower knows a leader", id)
	return 0, 0
}

// forge dials host to's Raft port and sends a message stream handshake
// claiming to come from node from.
func forge(t testing.TB, h *Host, from, to NodeID) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", h.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(handshake{kind: streamMessages, from: from, to: to}.encode()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// sendMessages writes msgs of group as message frames, encoded as the
// transport encodes them.
func sendMessages(conn net.Conn, group GroupID, msgs ...raftpb.Message) error {
	var b frameBatch
	for i := range msgs {
		if err := b.add(group, &msgs[i]); err != nil {
			return err
		}
	}
	return b.writeTo(conn)
}

// closedByPeer reports whether the peer closed conn within 5 s.
func closedByPeer(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := conn.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// waitRejected waits until h has refused n more of reason than before.
func waitRejected(t testing.TB, h *Host, reason RejectReason, before [NumRejectReasons]uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.Stats().Rejected[reason] <= before[reason] {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal for %v counted: %v", reason, h.Stats().Rejected)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestForgedHeartbeatBeyondTheLogIsRefused sends the heartbeat that used to
// end the process (Raft panicked: tocommit(1099511627776) is out of range
// [lastIndex(2)]), from a node outside the group and from a member: each is
// refused, counted under its reason, its connection closed, and both groups
// keep serving.
func TestForgedHeartbeatBeyondTheLogIsRefused(t *testing.T) {
	c := newHostileCluster(t)
	target, leader := c.follower(c.target)
	for i, tc := range []struct {
		name   string
		from   NodeID
		reason RejectReason
	}{
		{"non-member", 7, RejectMember},
		{"member", leader, RejectIndex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := c.hosts[target]
			before := h.Stats().Rejected
			conn := forge(t, h, tc.from, target)
			defer conn.Close()
			m := raftpb.Message{Type: raftpb.MsgHeartbeat, From: uint64(tc.from), To: uint64(target),
				Term: 1 << 40, Commit: 1 << 40}
			if err := sendMessages(conn, c.target, m); err != nil {
				t.Fatal(err)
			}
			waitRejected(t, h, tc.reason, before)
			if !closedByPeer(conn) {
				t.Error("the connection that carried the heartbeat is still open")
			}
			for _, id := range []GroupID{c.target, c.bystander} {
				if err := c.serve(id, int64(i+1), 10*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			if term := h.Group(c.target).Status().Term; term >= 1<<40 {
				t.Errorf("the forged term reached Raft: term %d", term)
			}
		})
	}
}

// TestForgedFramesAreRefused sends, one connection each, frames and
// messages no correct peer sends, from an unknown node and from a member:
// each is refused under its reason and closes its connection; the groups
// keep serving.
func TestForgedFramesAreRefused(t *testing.T) {
	c := newHostileCluster(t)
	target, leader := c.follower(c.target)
	to := uint64(target)
	term := c.hosts[target].Group(c.target).Status().Term
	last := c.hosts[target].Group(c.target).Status().LastIndex
	app := func(from NodeID, index uint64, ents ...raftpb.Entry) raftpb.Message {
		return raftpb.Message{Type: raftpb.MsgApp, From: uint64(from), To: to, Term: term + 5, Index: index,
			LogTerm: term, Commit: index, Entries: ents}
	}
	ent := func(index, term uint64) raftpb.Entry { return raftpb.Entry{Index: index, Term: term} }
	for i, tc := range []struct {
		name      string
		handshake NodeID // the node the connection claims
		msg       raftpb.Message
		raw       []byte // sent instead of msg when set
		reason    RejectReason
	}{
		{"append from a non-member", 7, app(7, last, ent(last+1, term+5)), nil, RejectMember},
		{"vote request from a non-member", 7, raftpb.Message{Type: raftpb.MsgVote, From: 7, To: to, Term: term + 9,
			Index: last + 100, LogTerm: term + 9}, nil, RejectMember},
		{"append with a gap", leader, app(leader, last, ent(last+2, term+5)), nil, RejectEntry},
		{"append over committed entries", leader, app(leader, last, ent(1, term+5)), nil, RejectEntry},
		{"append whose entries outrun its term", leader, app(leader, last, ent(last+1, term+6)), nil, RejectEntry},
		{"append whose terms fall", leader, app(leader, last, ent(last+1, term+5), ent(last+2, term+4)), nil, RejectEntry},
		{"append of an unknown entry type", leader, app(leader, last, raftpb.Entry{Index: last + 1, Term: term + 5,
			Type: 9}), nil, RejectEntry},
		{"append past the largest index", leader, app(leader, math.MaxUint64-1, ent(math.MaxUint64, term+5)), nil, RejectIndex},
		{"term 0", leader, raftpb.Message{Type: raftpb.MsgHeartbeat, From: uint64(leader), To: to}, nil, RejectTerm},
		{"term beyond the bound", leader, raftpb.Message{Type: raftpb.MsgVote, From: uint64(leader), To: to,
			Term: math.MaxUint64}, nil, RejectTerm},
		{"local MsgHup", leader, raftpb.Message{Type: raftpb.MsgHup, From: uint64(leader), To: to, Term: term}, nil, RejectType},
		{"local MsgBeat", leader, raftpb.Message{Type: raftpb.MsgBeat, From: uint64(leader), To: to, Term: term}, nil, RejectType},
		{"forwarded transfer", leader, raftpb.Message{Type: raftpb.MsgTransferLeader, From: uint64(leader), To: to,
			Term: term}, nil, RejectType},
		{"proposal", leader, raftpb.Message{Type: raftpb.MsgProp, From: uint64(leader), To: to,
			Entries: []raftpb.Entry{{Data: []byte("x")}}}, nil, RejectType},
		{"snapshot on the message stream", leader, raftpb.Message{Type: raftpb.MsgSnap, From: uint64(leader), To: to,
			Term: term + 5, Snapshot: &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 1 << 40, Term: term + 5}}},
			nil, RejectType},
		{"From other than the handshake's", 7, raftpb.Message{Type: raftpb.MsgHeartbeat, From: uint64(leader), To: to,
			Term: term}, nil, RejectSender},
		{"From this node", target, raftpb.Message{Type: raftpb.MsgHeartbeat, From: to, To: to, Term: term}, nil, RejectSender},
		{"To another node", leader, raftpb.Message{Type: raftpb.MsgHeartbeat, From: uint64(leader), To: to%3 + 1,
			Term: term}, nil, RejectDestination},
		{"undecodable frame", leader, raftpb.Message{}, bytes.Repeat([]byte{0xff}, 64), RejectFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := c.hosts[target]
			before := h.Stats().Rejected
			conn := forge(t, h, tc.handshake, target)
			defer conn.Close()
			var err error
			if tc.raw != nil {
				_, err = conn.Write(tc.raw)
			} else {
				err = sendMessages(conn, c.target, tc.msg)
			}
			if err != nil {
				t.Fatal(err)
			}
			waitRejected(t, h, tc.reason, before)
			if !closedByPeer(conn) {
				t.Error("the connection is still open")
			}
			for _, id := range []GroupID{c.target, c.bystander} {
				if err := c.serve(id, int64(i+1), 10*time.Second); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestForgedSnapshotsAreRefused opens snapshot streams with forged
// MsgSnaps: from an unknown node, and from a member with a configuration
// Raft cannot restore (it panicked in raft.restore). Each is refused before
// the state machine reads a byte, and the groups keep serving.
func TestForgedSnapshotsAreRefused(t *testing.T) {
	c := newHostileCluster(t)
	target, leader := c.follower(c.target)
	term := c.hosts[target].Group(c.target).Status().Term
	snap := func(from NodeID, cs raftpb.ConfState) raftpb.Message {
		return raftpb.Message{Type: raftpb.MsgSnap, From: uint64(from), To: uint64(target), Term: term + 3,
			Snapshot: &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 1 << 20, Term: term + 3, ConfState: cs}}}
	}
	all := raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	for i, tc := range []struct {
		name   string
		msg    raftpb.Message
		reason RejectReason
	}{
		{"from a non-member", snap(7, all), RejectMember},
		{"voter and learner at once", snap(leader, raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{uint64(target)}}),
			RejectSnapshot},
		{"duplicate voters", snap(leader, raftpb.ConfState{Voters: []uint64{1, 2, 3, 3}}), RejectSnapshot},
		{"no voter", snap(leader, raftpb.ConfState{Learners: []uint64{1, 2, 3}}), RejectSnapshot},
		{"snapshot term above the message's", func() raftpb.Message {
			m := snap(leader, all)
			m.Snapshot.Metadata.Term = m.Term + 1
			return m
		}(), RejectSnapshot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := c.hosts[target]
			before := h.Stats().Rejected
			conn, err := net.Dial("tcp", h.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(handshake{kind: streamSnapshot, from: NodeID(tc.msg.From), to: target}.encode()); err != nil {
				t.Fatal(err)
			}
			if err := sendMessages(conn, c.target, tc.msg); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			fr := frameReader{r: conn}
			hdr, result, err := fr.next()
			if err != nil || hdr.typ != frameSnapshotResult || len(result) == 0 || result[0] == 0 {
				t.Fatalf("snapshot result %v %q %v, want a refusal", hdr, result, err)
			}
			waitRejected(t, h, tc.reason, before)
			if err := c.serve(c.target, int64(i+1), 10*time.Second); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestForgedLeaderAppendFromAMember shows the limit of what can be checked
// without authenticating peers: a well-formed append from a member with a
// higher term is what a new leader sends, and Raft takes it (the group's
// term jumps). It must not panic or stop the groups: they elect a leader
// again and serve.
func TestForgedLeaderAppendFromAMember(t *testing.T) {
	c := newHostileCluster(t)
	target, leader := c.follower(c.target)
	st := c.hosts[target].Group(c.target).Status()
	conn := forge(t, c.hosts[target], leader, target)
	defer conn.Close()
	m := raftpb.Message{Type: raftpb.MsgApp, From: uint64(leader), To: uint64(target), Term: st.Term + 100,
		Index: st.Commit, LogTerm: st.Term, Commit: st.Commit}
	if err := sendMessages(conn, c.target, m); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.hosts[target].Group(c.target).Status().Term < st.Term+100 {
		if time.Now().After(deadline) {
			t.Fatalf("the append was not taken: %+v", c.hosts[target].Group(c.target).Status())
		}
		time.Sleep(time.Millisecond)
	}
	for _, id := range []GroupID{c.target, c.bystander} {
		if err := c.serve(id, 1, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckMessage checks the delivery-time checks message by message,
// good messages included.
func TestCheckMessage(t *testing.T) {
	ok := []raftpb.Message{
		{Type: raftpb.MsgApp, Term: 3, Index: 10, LogTerm: 2, Commit: 9,
			Entries: []raftpb.Entry{{Index: 11, Term: 2}, {Index: 12, Term: 3, Type: raftpb.EntryConfChangeV2}}},
		{Type: raftpb.MsgApp, Term: 3, Index: 10, LogTerm: 3, Commit: 12},
		{Type: raftpb.MsgAppResp, Term: 3, Index: 10, Reject: true, RejectHint: 8, LogTerm: 2},
		{Type: raftpb.MsgVote, Term: 4, Index: 10, LogTerm: 3},
		{Type: raftpb.MsgPreVote, Term: 5, Index: 10, LogTerm: 3},
		{Type: raftpb.MsgVoteResp, Term: 4},
		{Type: raftpb.MsgPreVoteResp, Term: 5, Reject: true},
		{Type: raftpb.MsgHeartbeat, Term: 3, Commit: 12, Context: []byte("read")},
		{Type: raftpb.MsgHeartbeatResp, Term: 3, Context: []byte("read")},
		{Type: raftpb.MsgTimeoutNow, Term: 3},
	}
	for _, m := range ok {
		if err := checkMessage(&m); err != nil {
			t.Errorf("%v refused: %v", m.Type, err)
		}
	}
	bad := []struct {
		m      raftpb.Message
		reason RejectReason
	}{
		{raftpb.Message{Type: raftpb.MsgStorageAppend, Term: 3}, RejectType},
		{raftpb.Message{Type: raftpb.MsgSnapStatus, Term: 3}, RejectType},
		{raftpb.Message{Type: raftpb.MsgUnreachable, Term: 3}, RejectType},
		{raftpb.Message{Type: raftpb.MsgCheckQuorum, Term: 3}, RejectType},
		{raftpb.Message{Type: raftpb.MsgReadIndex, Term: 3}, RejectType},
		{raftpb.Message{Type: raftpb.MsgReadIndexResp, Term: 3}, RejectType},
		{raftpb.Message{Type: raftpb.MsgForgetLeader, Term: 3}, RejectType},
		{raftpb.Message{Type: raftpb.MessageType(99), Term: 3}, RejectType},
		{raftpb.Message{Type: raftpb.MsgHeartbeat}, RejectTerm},
		{raftpb.Message{Type: raftpb.MsgVote, Term: 3, LogTerm: 4}, RejectTerm},
		{raftpb.Message{Type: raftpb.MsgHeartbeat, Term: 3, Commit: maxRaftValue + 1}, RejectIndex},
		{raftpb.Message{Type: raftpb.MsgAppResp, Term: 3, RejectHint: math.MaxUint64}, RejectIndex},
		{raftpb.Message{Type: raftpb.MsgHeartbeat, Term: 3, Snapshot: &raftpb.Snapshot{}}, RejectSnapshot},
		{raftpb.Message{Type: raftpb.MsgVote, Term: 3, Entries: []raftpb.Entry{{Index: 1, Term: 1}}}, RejectEntry},
		{raftpb.Message{Type: raftpb.MsgApp, Term: 3, Index: 10, LogTerm: 2,
			Entries: []raftpb.Entry{{Index: 11, Term: 0}}}, RejectEntry},
		{raftpb.Message{Type: raftpb.MsgApp, Term: 3, Index: 10, LogTerm: 2,
			Entries: []raftpb.Entry{{Index: 11, Term: 1}}}, RejectEntry},
		{raftpb.Message{Type: raftpb.MsgApp, Term: 3, Index: maxRaftValue, LogTerm: 2,
			Entries: []raftpb.Entry{{Index: maxRaftValue + 1, Term: 3}}}, RejectIndex},
	}
	for _, tc := range bad {
		err := checkMessage(&tc.m)
		if reason, ok := rejectReason(err); !ok || reason != tc.reason || !errors.Is(err, ErrRejected) {
			t.Errorf("%v %+v: %v, want a refusal for %v", tc.m.Type, tc.m, err, tc.reason)
		}
	}
}

// TestRejectReasonNames keeps the metric labels stable.
func TestRejectReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for r := range NumRejectReasons {
		name := r.String()
		if name == "" || seen[name] {
			t.Errorf("reason %d has label %q", r, name)
		}
		seen[name] = true
	}
	if got := RejectReason(200).String(); got != "reason(200)" {
		t.Errorf("unknown reason: %q", got)
	}
}

// TestHeartbeatBeyondATruncatedLogIsRefused steps, in one iteration, an
// append that cuts Raft's log shorter than the persisted one, then a
// heartbeat committing up to the persisted end: the persisted last index
// cannot vouch for it (Raft's log ends earlier, and Raft would panic), so
// the loop persists first and refuses the heartbeat.
func TestHeartbeatBeyondATruncatedLogIsRefused(t *testing.T) {
	clk := clock.NewManual(testEpoch)
	h, err := NewHost(Config{NodeID: 1, LogRegion: pmem.NewFake(4096+1<<20, 1), Clock: clk, Logger: testLogger(),
		Transport: NewSimNetwork(1, clk).Endpoint(1), Manual: true, TickInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	g, err := h.AddGroup(1, []NodeID{1, 2, 3}, &faultySM{})
	if err != nil {
		t.Fatal(err)
	}
	ents := func(first, last, term uint64) []raftpb.Entry {
		var out []raftpb.Entry
		for i := first; i <= last; i++ {
			out = append(out, raftpb.Entry{Index: i, Term: term})
		}
		return out
	}
	// Node 2 leads term 2 and appends 2..5, committing nothing new.
	g.deliver(inbound{m: raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1, Term: 2, Index: 1, LogTerm: 1, Commit: 1,
		Entries: ents(2, 5, 2)}, src: simSource{}})
	h.Poll()
	if st := g.Status(); st.LastIndex != 5 || st.Commit != 1 {
		t.Fatalf("after the first append: %+v", st)
	}
	// Node 3 leads term 3: its append overwrites from 3, then its heartbeat
	// claims 5 committed, in the same iteration.
	before := h.Stats().Rejected
	g.deliver(inbound{m: raftpb.Message{Type: raftpb.MsgApp, From: 3, To: 1, Term: 3, Index: 2, LogTerm: 2, Commit: 1,
		Entries: ents(3, 3, 3)}, src: simSource{}})
	g.deliver(inbound{m: raftpb.Message{Type: raftpb.MsgHeartbeat, From: 3, To: 1, Term: 3, Commit: 5}, src: simSource{}})
	h.Poll()
	if got := h.Stats().Rejected[RejectIndex] - before[RejectIndex]; got != 1 {
		t.Errorf("%d heartbeats refused for their commit index, want 1", got)
	}
	if st := g.Status(); st.Err != nil || st.LastIndex != 3 || st.Commit > 3 {
		t.Errorf("after the heartbeat: %+v", st)
	}
}
