package replication

import (
	"math"
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// hostFrame is one fuzzed input of FuzzHostFrames: a Raft message whose
// fields are drawn, encoded as the transport encodes it so that it gets
// past the decoder, and raw bytes sent after it (or instead of it).
type hostFrame struct {
	raw                          []byte
	sender, dest, typ            uint8
	term, commit, index, logTerm uint64
	count                        uint8
	entTerm                      uint64
	flags                        uint8
}

// Flags of a hostFrame.
const (
	fuzzWrongHandshake = 1 << iota // the connection claims node 7, whatever From says
	fuzzUnknownGroup               // the frame names a group that does not run
	fuzzWrongTo                    // To is another node than the one dialled
	fuzzRelative                   // terms and indices are offsets from the target's own
	fuzzEntryGap                   // entry indices are drawn, not consecutive
	fuzzEntryData                  // entries carry raw as their payload
	fuzzRawAfter                   // raw follows the message frame
	fuzzRawOnly                    // raw is sent instead of the message
)

// FuzzHostFrames drives arbitrary frames into a running Host over its real
// TCP receive path: three hosts on loopback run a target volume group and a
// bystander one; each input dials one host's Raft port, performs the
// handshake, writes the message and raw bytes, and waits until the host has
// handled them. Then the process must still be alive (a panic anywhere ends
// it: the fuzzer reports it), the bystander group, which no frame names,
// must serve, and so must the target group, unless a frame impersonated one
// of its members: a member's forged append cannot be told from its real
// leader's without authenticating peers, and may legitimately break the
// group (the target is then replaced by a new group and the run goes on).
func FuzzHostFrames(f *testing.F) {
	const big = 1 << 40
	type K = raftpb.MessageType
	for _, s := range []hostFrame{
		// The heartbeat that ended the process, from a non-member and from a member.
		{sender: 3, dest: 1, typ: uint8(raftpb.MsgHeartbeat), term: big, commit: big},
		{sender: 0, dest: 1, typ: uint8(raftpb.MsgHeartbeat), term: big, commit: big},
		// A higher-term append from a non-member and from a member, plain and relative.
		{sender: 3, dest: 2, typ: uint8(raftpb.MsgApp), term: big, index: 2, logTerm: 1, commit: 3, count: 1, entTerm: big},
		{sender: 1, dest: 2, typ: uint8(raftpb.MsgApp), term: big, index: 2, logTerm: 1, commit: 3, count: 1, entTerm: big},
		{sender: 1, dest: 2, typ: uint8(raftpb.MsgApp), term: 1, index: 0, logTerm: 0, commit: 2, count: 2, entTerm: 1,
			flags: fuzzRelative},
		{sender: 2, dest: 0, typ: uint8(raftpb.MsgApp), term: 1, index: 1, commit: 1, count: 1, entTerm: 1,
			flags: fuzzRelative | fuzzEntryData, raw: []byte{1, 1, 0, 0, 0, 0, 0, 0}},
		// An append over committed entries, entries with a gap.
		{sender: 0, dest: 1, typ: uint8(raftpb.MsgApp), term: 1, index: 0, count: 3, entTerm: 1, flags: fuzzRelative | fuzzEntryGap},
		// Votes, responses, local types, a snapshot on the message stream.
		{sender: 2, dest: 0, typ: uint8(raftpb.MsgVote), term: 2, index: 1 << 30, logTerm: 2},
		{sender: 2, dest: 0, typ: uint8(raftpb.MsgAppResp), term: 0, index: big, flags: fuzzRelative},
		{sender: 2, dest: 0, typ: uint8(raftpb.MsgHeartbeatResp), term: 0, flags: fuzzRelative},
		{sender: 1, dest: 0, typ: uint8(raftpb.MsgTimeoutNow), term: 0, flags: fuzzRelative},
		{sender: 1, dest: 0, typ: uint8(raftpb.MsgHup), term: 1},
		{sender: 1, dest: 0, typ: uint8(raftpb.MsgTransferLeader), term: 0, flags: fuzzRelative},
		{sender: 1, dest: 0, typ: uint8(raftpb.MsgSnap), term: big},
		{sender: 1, dest: 0, typ: uint8(K(99)), term: 1},
		// Mismatched handshake, wrong destination, unknown group, garbage.
		{sender: 1, dest: 0, typ: uint8(raftpb.MsgHeartbeat), term: 1, flags: fuzzWrongHandshake},
		{sender: 1, dest: 0, typ: uint8(raftpb.MsgHeartbeat), term: 1, flags: fuzzWrongTo},
		{sender: 1, dest: 0, typ: uint8(raftpb.MsgHeartbeat), term: big, commit: big, flags: fuzzUnknownGroup},
		{sender: 1, dest: 0, raw: []byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 1}, flags: fuzzRawOnly},
		{sender: 1, dest: 0, typ: uint8(raftpb.MsgHeartbeat), term: 1, raw: make([]byte, 40), flags: fuzzRawAfter},
	} {
		f.Add(s.raw, s.sender, s.dest, s.typ, s.term, s.commit, s.index, s.logTerm, s.count, s.entTerm, s.flags)
	}
	c := newHostileCluster(f)
	tainted := false // a member was impersonated since the target group was built
	f.Fuzz(func(t *testing.T, raw []byte, sender, dest, typ uint8, term, commit, index, logTerm uint64,
		count uint8, entTerm uint64, flags uint8) {
		in := hostFrame{raw, sender, dest, typ, term, commit, index, logTerm, count, entTerm, flags}
		impersonates := c.sendFrame(t, in)
		tainted = tainted || impersonates
		if err := c.serve(c.bystander, 1, 10*time.Second); err != nil {
			t.Fatalf("the bystander group stopped serving: %v", err)
		}
		limit := 10 * time.Second
		if tainted {
			limit = 2 * time.Second
		}
		if err := c.serve(c.target, 2, limit); err != nil {
			if !tainted {
				t.Fatalf("the target group stopped serving after frames from no member: %v", err)
			}
			t.Logf("the target group broke after a member was impersonated (%v); replacing it", err)
			if err := c.rebuild(); err != nil {
				t.Fatal(err)
			}
			tainted = false
		}
	})
}

// sendFrame sends in to the host it names and waits until that host has
// handled it. It reports whether the frame impersonated a member of the
// target group and could have reached Raft.
func (c *hostileCluster) sendFrame(t *testing.T, in hostFrame) bool {
	to := NodeID(in.dest%3 + 1)
	h := c.hosts[to]
	from := NodeID(in.sender%3 + 1) // a member (this node itself included)
	switch in.sender % 5 {
	case 3:
		from = 7
	case 4:
		from = NodeID(math.MaxUint64 - uint64(in.sender&1)) // Raft's local targets
	}
	claimed := from
	if in.flags&fuzzWrongHandshake != 0 {
		claimed = 7
	}
	group := c.target
	if in.flags&fuzzUnknownGroup != 0 {
		group = 99
	}
	m := c.fuzzMessage(in, h, from, to)
	conn := forge(t, h, claimed, to)
	defer conn.Close()
	var err error
	if in.flags&fuzzRawOnly != 0 {
		_, err = conn.Write(in.raw)
	} else if err = sendMessages(conn, group, m); err == nil && in.flags&fuzzRawAfter != 0 {
		_, err = conn.Write(in.raw)
	}
	if err != nil && !closedByPeer(conn) {
		t.Fatalf("sending: %v", err)
	}
	c.handled(t, conn, h)
	return in.flags&(fuzzRawOnly|fuzzWrongHandshake|fuzzUnknownGroup) == 0 && claimed == from &&
		from >= 1 && from <= 3 && from != to
}

// fuzzMessage builds in's message, for host h (node to) from node from.
func (c *hostileCluster) fuzzMessage(in hostFrame, h *Host, from, to NodeID) raftpb.Message {
	m := raftpb.Message{Type: raftpb.MessageType(in.typ % 24), From: uint64(from), To: uint64(to),
		Term: in.term, Commit: in.commit, Index: in.index, LogTerm: in.logTerm, RejectHint: in.index / 2}
	if in.flags&fuzzWrongTo != 0 {
		m.To = uint64(to%3 + 1)
	}
	entTerm := in.entTerm
	if in.flags&fuzzRelative != 0 {
		st := h.Group(c.target).Status()
		m.Term = st.Term + in.term%3
		m.Commit = st.Commit + in.commit%3
		m.Index = st.LastIndex - min(st.LastIndex, in.index%3)
		m.LogTerm = st.Term - min(st.Term, in.logTerm%2)
		entTerm = m.Term - min(m.Term, in.entTerm%2)
	}
	if m.Type == raftpb.MsgSnap {
		m.Snapshot = &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: m.Index, Term: m.LogTerm,
			ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
	}
	for i := range uint64(in.count % 8) {
		e := raftpb.Entry{Index: m.Index + 1 + i, Term: entTerm, Type: raftpb.EntryType(in.count >> 3 % 4)}
		if in.flags&fuzzEntryGap != 0 {
			e.Index = in.entTerm + i*in.index
		}
		if in.flags&fuzzEntryData != 0 {
			e.Data = in.raw
		}
		m.Entries = append(m.Entries, e)
	}
	return m
}

// handled waits until host h has read everything sent on conn (it closes
// the connection once it reaches our end of it, or refuses it earlier),
// then until the target group's loop has stepped what was queued.
func (c *hostileCluster) handled(t *testing.T, conn net.Conn, h *Host) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	if !closedByPeer(conn) {
		t.Fatal("the host did not finish reading the connection")
	}
	g := h.Group(c.target)
	deadline := time.Now().Add(5 * time.Second)
	for g.inbox.len() > 0 && !g.stopped.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the target group's inbox does not drain")
		}
		time.Sleep(time.Millisecond)
	}
	done := make(chan struct{})
	g.exec(func(*core) { close(done) })
	select {
	case <-done:
	case <-g.stopping:
	case <-time.After(5 * time.Second):
		t.Fatal("the target group's loop does not run")
	}
}
