package replication

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/cache"
	"basalt/pkg/clock"
	"basalt/pkg/pmem"
)

// playedPeer is a group member the test plays on a SimNetwork: it keeps what
// the host sends it and sends what the test writes.
type playedPeer struct {
	id   NodeID
	ep   *SimEndpoint
	msgs []raftpb.Message
}

func (p *playedPeer) HandleMessage(_ GroupID, m raftpb.Message, _ Source) { p.msgs = append(p.msgs, m) }
func (p *playedPeer) HandleSnapshot(GroupID, raftpb.Message, io.Reader) error {
	return errors.New("test: no snapshots here")
}
func (p *playedPeer) ReportUnreachable(NodeID, GroupID)          {}
func (p *playedPeer) ReportRejected(RejectReason, NodeID, error) {}

// votingHost is node 1, a Manual Host, in group 1 of members 1, 2 and 3,
// where the test plays nodes 2 and 3 with raw Raft messages.
type votingHost struct {
	t      *testing.T
	clk    *clock.Manual
	net    *SimNetwork
	region *pmem.Fake
	h      *Host
	peers  map[NodeID]*playedPeer
}

var votingMembers = []NodeID{1, 2, 3}

func newVotingHost(t *testing.T) *votingHost {
	clk := clock.NewManual(testEpoch)
	v := &votingHost{t: t, clk: clk, net: NewSimNetwork(1, clk), region: pmem.NewFake(4096+1<<20, 5),
		peers: map[NodeID]*playedPeer{}}
	for _, id := range votingMembers[1:] {
		p := &playedPeer{id: id, ep: v.net.Endpoint(id)}
		if err := p.ep.Start(p); err != nil {
			t.Fatal(err)
		}
		v.peers[id] = p
	}
	v.open()
	t.Cleanup(func() {
		if v.h != nil {
			_ = v.h.Close()
		}
	})
	return v
}

// open opens node 1's Host on the region (after a restart: a new endpoint).
func (v *votingHost) open() {
	v.t.Helper()
	v.net.Crash(1)
	h, err := NewHost(Config{NodeID: 1, LogRegion: v.region, Clock: v.clk, Logger: testLogger(),
		Transport: v.net.Endpoint(1), Manual: true, TickInterval: time.Millisecond, CompactionMargin: 8})
	if err != nil {
		v.t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		v.t.Fatal(err)
	}
	v.h = h
}

// restart closes node 1's Host and opens it again on the same region.
func (v *votingHost) restart() {
	v.t.Helper()
	if err := v.h.Close(); err != nil {
		v.t.Fatal(err)
	}
	v.open()
}

// add adds group 1 and lets it run for more than an election timeout, so
// that it considers vote requests (a host that starts ignores them for one
// election timeout: loop.go, voteDelayed).
func (v *votingHost) add(sm StateMachine) *Group {
	v.t.Helper()
	g, err := v.h.AddGroup(1, votingMembers, sm)
	if err != nil {
		v.t.Fatal(err)
	}
	v.run(30)
	return g
}

// run moves the clock by n ms, delivering and polling.
func (v *votingHost) run(n int) {
	for range n {
		v.clk.Advance(time.Millisecond)
		v.net.Deliver()
		v.h.Poll()
		v.net.Deliver()
	}
}

// send sends m from the played peer m.From to node 1 and runs until node 1
// answers with a message of type resp (it returns it), or for 50 ms (ok
// false).
func (v *votingHost) send(m raftpb.Message, resp raftpb.MessageType) (raftpb.Message, bool) {
	p := v.peers[NodeID(m.From)]
	m.To = 1
	p.msgs = p.msgs[:0]
	p.ep.Send(1, []raftpb.Message{m})
	for range 50 {
		v.run(1)
		if i := slices.IndexFunc(p.msgs, func(r raftpb.Message) bool { return r.Type == resp }); i >= 0 {
			return p.msgs[i], true
		}
	}
	return raftpb.Message{}, false
}

// vote asks node 1 for its vote in term for a candidate whose log ends at
// (logTerm, index); granted is false for a refusal and for no answer.
func (v *votingHost) vote(from NodeID, term, logTerm, index uint64) (granted, answered bool) {
	r, ok := v.send(raftpb.Message{Type: raftpb.MsgVote, From: uint64(from), Term: term, LogTerm: logTerm, Index: index},
		raftpb.MsgVoteResp)
	return ok && !r.Reject, ok
}

// voteAndFail has node 1 vote for node 2 in term 5, take node 2's append of
// entry 2 (term 5) with the commit index 2, and fail applying it: the group
// is fenced with its log ending at (5, 2).
func (v *votingHost) voteAndFail() *Group {
	v.t.Helper()
	g := v.add(&faultySM{failAt: 2})
	if granted, _ := v.vote(2, 5, 1, 1); !granted {
		v.t.Fatalf("node 1 did not grant node 2 its vote in term 5: %+v", g.Status())
	}
	if st := g.Status(); st.Term != 5 {
		v.t.Fatalf("term %d after voting in term 5", st.Term)
	}
	entry := raftpb.Entry{Term: 5, Index: 2, Type: raftpb.EntryNormal, Data: []byte("proposalx")}
	p := v.peers[2]
	p.ep.Send(1, []raftpb.Message{{Type: raftpb.MsgApp, From: 2, To: 1, Term: 5, LogTerm: 1, Index: 1, Commit: 2,
		Entries: []raftpb.Entry{entry}}})
	for i := 0; !g.Fenced(); i++ {
		if i > 100 {
			v.t.Fatalf("the group never failed applying entry 2: %+v", g.Status())
		}
		v.run(1)
	}
	if err := g.Status().Err; !errors.Is(err, errInjectedApply) {
		v.t.Fatalf("the fenced group's error: %v", err)
	}
	return g
}

func countVoteRequests(msgs []raftpb.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Type == raftpb.MsgVote || m.Type == raftpb.MsgPreVote {
			n++
		}
	}
	return n
}

// TestFencedGroupKeepsItsVote: a group votes for node 2 in term 5, fails and
// is fenced; the Host restarts and the group is added again with no log
// here. It must still be in term 5 having voted for node 2: a vote request
// from node 3 in term 5 is refused (Raft answers Reject), and one in a later
// term from a candidate whose log is behind the log it dropped (5, 2) gets
// no vote; a candidate whose log has caught up with it does. Nor does it
// campaign while its log is behind. Before, the group was bootstrapped
// afresh in term 1 and granted node 3 its vote in term 5: two leaders in one
// term.
func TestFencedGroupKeepsItsVote(t *testing.T) {
	v := newVotingHost(t)
	v.voteAndFail()
	v.restart()
	if ids := v.h.RecoveredGroups(); len(ids) != 0 {
		t.Fatalf("groups recovered after the fence: %v", ids)
	}
	g := v.add(&faultySM{})
	if st := g.Status(); st.Term < 5 {
		t.Errorf("added again after the fence, the group is in term %d, want at least 5", st.Term)
	}
	// Behind the log it dropped, it asks nobody for a vote.
	for _, p := range v.peers {
		p.msgs = nil
	}
	v.run(100)
	for _, p := range v.peers {
		if n := countVoteRequests(p.msgs); n != 0 {
			t.Errorf("node 1 sent %v %d vote requests while its log was behind the one it dropped", p.id, n)
		}
	}
	granted, answered := v.vote(3, 5, 5, 2)
	if granted || !answered {
		t.Fatalf("in term 5, after voting for node 2, node 1 answered node 3 (answered %v) with its vote %v: "+
			"two votes in one term: %+v", answered, granted, g.Status())
	}
	if st := g.Status(); st.Term < 5 {
		t.Errorf("term %d after refusing a vote in term 5", st.Term)
	}
	// A candidate whose log is behind what node 1 had acknowledged (entry 2
	// of term 5) must not get its vote: that entry may be committed.
	if granted, _ := v.vote(3, 6, 1, 1); granted {
		t.Errorf("node 1 voted in term 6 for a log ending at (1, 1), behind the log (5, 2) it dropped")
	}
	if granted, _ := v.vote(3, 7, 5, 2); !granted {
		t.Errorf("node 1 refused its vote in term 7 to a log as long as the one it dropped: %+v", g.Status())
	}
}

// TestTombstoneSurvivesTheReleaser: after the fence, another group on the
// Host writes four times the 1 MiB log, so that the releaser frees the
// tombstone's record's place many times over; the tombstone must be copied,
// not freed, and after a crash (or a clean restart) the group added again
// still refuses a second vote in term 5. An idle Host then writes at most
// one more record: the copies do not chase each other.
func TestTombstoneSurvivesTheReleaser(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "restart", true: "crash"}[crash], func(t *testing.T) {
			v := newVotingHost(t)
			v.voteAndFail()
			fencedAt := v.h.tombs.get(1).seq
			g2, err := v.h.AddGroup(2, []NodeID{1}, &faultySM{})
			if err != nil {
				t.Fatal(err)
			}
			load := &loadGroup{g: g2}
			for i := 0; load.committed < 4<<20; i++ {
				if i > 100000 || load.failed != nil {
					t.Fatalf("group 2 committed %d bytes: %v, %+v", load.committed, load.failed, v.h.Stats())
				}
				load.fill()
				v.run(1)
			}
			for range 100 { // let the writes in flight finish
				v.run(1)
			}
			if st := v.h.Stats(); st.First <= fencedAt {
				t.Fatalf("the buffer was never released past the tombstone %v: %+v", fencedAt, st.Stats)
			}
			last := v.h.Stats().Last
			v.run(2000)
			if st := v.h.Stats(); st.Last > last+1 {
				t.Errorf("an idle host wrote %d records", st.Last-last)
			}
			if crash {
				v.region = v.region.CrashRegion()
				v.h = nil
				v.open()
			} else {
				v.restart()
			}
			if ids := v.h.Tombstones(); !slices.Equal(ids, []GroupID{1}) {
				t.Fatalf("tombstones after the laps: %v", ids)
			}
			g := v.add(&faultySM{})
			if granted, answered := v.vote(3, 5, 5, 2); granted || !answered {
				t.Fatalf("node 1 answered (%v) a second vote in term 5 with %v: %+v", answered, granted, g.Status())
			}
		})
	}
}

// TestTombstoneGoesOnceTheLogCatchesUp: the group added again takes the
// leader's append of entry 2 (term 5): its log reaches the floor (5, 2), the
// tombstone goes, and after a restart the group comes back with that log,
// its term and its vote (a second vote in term 5 is still refused, by the
// log's own hard state).
func TestTombstoneGoesOnceTheLogCatchesUp(t *testing.T) {
	v := newVotingHost(t)
	v.voteAndFail()
	v.restart()
	g := v.add(&faultySM{})
	if g.storage.tomb == nil {
		t.Fatal("the group added again has no tombstone")
	}
	entry := raftpb.Entry{Term: 5, Index: 2, Type: raftpb.EntryNormal, Data: []byte("proposalx")}
	if _, ok := v.send(raftpb.Message{Type: raftpb.MsgApp, From: 2, Term: 5, LogTerm: 1, Index: 1, Commit: 2,
		Entries: []raftpb.Entry{entry}}, raftpb.MsgAppResp); !ok {
		t.Fatalf("no answer to the leader's append: %+v", g.Status())
	}
	v.run(5)
	if ids := v.h.Tombstones(); len(ids) != 0 || v.h.tombs.get(1) != nil {
		t.Fatalf("tombstones once the log reached the floor: %v", ids)
	}
	// Caught up, and hearing no leader, it campaigns again.
	v.peers[3].msgs = nil
	v.run(100)
	if countVoteRequests(v.peers[3].msgs) == 0 {
		t.Errorf("node 1 never campaigned once its log had caught up: %+v", g.Status())
	}
	v.restart()
	if ids := v.h.RecoveredGroups(); !slices.Equal(ids, []GroupID{1}) || len(v.h.Tombstones()) != 0 {
		t.Fatalf("recovered %v, tombstones %v; want the log of group 1 alone", ids, v.h.Tombstones())
	}
	g = v.add(&faultySM{})
	if st := g.Status(); st.Term != 5 || st.LastIndex != 2 {
		t.Fatalf("recovered group: term %d, last index %d; want 5 and 2", st.Term, st.LastIndex)
	}
	if granted, answered := v.vote(3, 5, 5, 2); granted || !answered {
		t.Fatalf("node 1 answered (%v) a second vote in term 5 with %v", answered, granted)
	}
}

// TestRemoveGroupDropsTheTombstone: RemoveGroup of the fenced group (before
// a restart), or of its tombstone alone (after one), drops it: the group
// added again later is a new one, in term 1.
func TestRemoveGroupDropsTheTombstone(t *testing.T) {
	for _, restartFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "fenced group", true: "tombstone alone"}[restartFirst], func(t *testing.T) {
			v := newVotingHost(t)
			v.voteAndFail()
			if restartFirst {
				v.restart()
				if ids := v.h.Tombstones(); !slices.Equal(ids, []GroupID{1}) {
					t.Fatalf("tombstones after the restart: %v", ids)
				}
			}
			if err := v.h.RemoveGroup(1); err != nil {
				t.Fatal(err)
			}
			if err := v.h.RemoveGroup(1); !errors.Is(err, ErrUnknownGroup) {
				t.Errorf("a second removal: %v, want ErrUnknownGroup", err)
			}
			if ids := v.h.Tombstones(); len(ids) != 0 {
				t.Fatalf("tombstones after RemoveGroup: %v", ids)
			}
			v.restart()
			if ids := v.h.Tombstones(); len(ids) != 0 {
				t.Fatalf("tombstones after RemoveGroup and a restart: %v", ids)
			}
			if st := v.add(&faultySM{}).Status(); st.Term != 1 {
				t.Fatalf("the group added again after its removal is in term %d, want 1", st.Term)
			}
		})
	}
}

func TestTombstoneRecordRoundTripAndMalformed(t *testing.T) {
	var b recordBuilder
	want := tombstoneState{term: 5, vote: 2, floor: logPoint{index: 9, term: 4}}
	for _, drop := range []bool{false, true} {
		r, err := decodeRecord(kindTombstone, joinPieces(b.tombstoneRecord(7, want, drop)))
		if err != nil || r.group != 7 || r.hard != (raftpb.HardState{Term: 5, Vote: 2}) || r.floor != want.floor ||
			(r.flags&tombFlagDrop != 0) != drop {
			t.Fatalf("drop %v: decoded %+v, %v", drop, r, err)
		}
	}
	good := joinPieces(b.tombstoneRecord(7, want, true))
	edit := func(f func(p []byte) []byte) []byte { return f(bytes.Clone(good)) }
	bad := map[string][]byte{
		"short":           good[:len(good)-1],
		"long":            append(bytes.Clone(good), 0),
		"group zero":      edit(func(p []byte) []byte { clear(p[8:16]); return p }),
		"unknown flag":    edit(func(p []byte) []byte { p[1] = 2; return p }),
		"entry count":     edit(func(p []byte) []byte { p[4] = 1; return p }),
		"term zero":       edit(func(p []byte) []byte { clear(p[16:24]); return p }),
		"commit":          edit(func(p []byte) []byte { p[32] = 1; return p }),
		"floor past term": edit(func(p []byte) []byte { p[48] = 6; return p }),
	}
	for name, p := range bad {
		if _, err := decodeRecord(kindTombstone, p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// TestRecoveryMergesTombstones: recovery merges a group's tombstone records
// in any order (a copy may be written after a fence it predates), the
// fence's record drops the log before it and a copy drops nothing, and a
// removal record drops log and tombstone alike. Logs written before
// tombstones existed (no kindTombstone) read as they did.
func TestRecoveryMergesTombstones(t *testing.T) {
	ts := func(term, vote, index, logTerm uint64) tombstoneState {
		return tombstoneState{term: term, vote: vote, floor: logPoint{index: index, term: logTerm}}
	}
	type rec struct {
		kind  cache.Kind
		state tombstoneState // kindTombstone
		drop  bool
	}
	log := rec{kind: kindState}
	tests := []struct {
		name    string
		records []rec
		log     bool
		tomb    *tombstoneState
	}{
		{"log alone", []rec{log}, true, nil},
		{"fence", []rec{log, {kindTombstone, ts(5, 2, 2, 5), true}}, false, &tombstoneState{5, 2, logPoint{2, 5}}},
		{"old copy after the fence", []rec{log, {kindTombstone, ts(4, 1, 1, 1), false}, {kindTombstone, ts(5, 2, 2, 5), true},
			{kindTombstone, ts(4, 1, 1, 1), false}}, false, &tombstoneState{5, 2, logPoint{2, 5}}},
		{"vote cast later in the same term", []rec{{kindTombstone, ts(5, 0, 2, 5), true}, log,
			{kindTombstone, ts(5, 3, 2, 5), true}, {kindTombstone, ts(5, 0, 2, 5), false}}, false,
			&tombstoneState{5, 3, logPoint{2, 5}}},
		{"log added again", []rec{log, {kindTombstone, ts(5, 2, 2, 5), true}, log, {kindTombstone, ts(5, 2, 2, 5), false}},
			true, &tombstoneState{5, 2, logPoint{2, 5}}},
		{"removed", []rec{log, {kindTombstone, ts(5, 2, 2, 5), true}, {kind: kindRemove}}, false, nil},
		{"removed before a new log", []rec{log, {kind: kindRemove}, log}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf, err := cache.Open(pmem.NewFake(4096+1<<20, 1), cache.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer buf.Close()
			var b recordBuilder
			var firstTomb cache.Seq
			for _, r := range tt.records {
				var pieces [][]byte
				switch r.kind {
				case kindState:
					pieces, err = b.stateRecord(4, stateFlagReplace, raftpb.HardState{Term: 5, Commit: 1}, 1, 1,
						raftpb.ConfState{Voters: []uint64{1}}, nil)
					if err != nil {
						t.Fatal(err)
					}
				case kindTombstone:
					pieces = b.tombstoneRecord(4, r.state, r.drop)
				case kindRemove:
					pieces = b.removeRecord(4)
				}
				seq, err := buf.Append(context.Background(), r.kind, pieces...)
				if err != nil {
					t.Fatal(err)
				}
				if r.kind == kindTombstone && firstTomb == 0 {
					firstTomb = seq
				} else if r.kind == kindRemove {
					firstTomb = 0
				}
			}
			got, err := recoverLog(buf)
			if err != nil {
				t.Fatal(err)
			}
			if (got.logs[4] != nil) != tt.log {
				t.Errorf("log recovered: %v, want %v", got.logs[4] != nil, tt.log)
			}
			switch tomb := got.tombs[4]; {
			case tt.tomb == nil && tomb != nil:
				t.Errorf("tombstone %+v, want none", tomb.state)
			case tt.tomb != nil && tomb == nil:
				t.Errorf("no tombstone, want %+v", *tt.tomb)
			case tt.tomb != nil && (tomb.state != *tt.tomb || tomb.seq != firstTomb):
				t.Errorf("tombstone %+v at %v, want %+v at %v (the oldest)", tomb.state, tomb.seq, *tt.tomb, firstTomb)
			}
		})
	}
}

// TestTombstoneSurvivesTheReleaserWithGoroutines is the same with the loops
// and the releaser on their goroutines: a one-member group fails and is
// fenced, another writes four times the 1 MiB log, and after a reopen the
// tombstone stands and the group comes back in its term.
func TestTombstoneSurvivesTheReleaserWithGoroutines(t *testing.T) {
	region := pmem.NewFake(4096+1<<20, 9)
	open := func() *Host {
		h, err := NewHost(Config{NodeID: 1, LogRegion: region, Logger: testLogger(), TickInterval: time.Millisecond,
			Listen: "127.0.0.1:0", CompactionMargin: 8})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := open()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	failing, err := h.AddGroup(1, []NodeID{1}, &faultySM{failAt: 5})
	if err != nil {
		t.Fatal(err)
	}
	for !failing.Fenced() {
		if err := failing.Propose(ctx, []byte("x")); err != nil && !errors.Is(err, ErrStopped) &&
			!errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrNotLeader) {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("group 1 never failed")
		}
	}
	term, fencedAt := h.tombs.get(1).state.term, h.tombs.get(1).seq
	busy, err := h.AddGroup(2, []NodeID{1}, &faultySM{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4<<20/loadSize; {
		switch err := busy.Propose(ctx, make([]byte, loadSize)); {
		case err == nil:
			i++
		case errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader):
			time.Sleep(time.Millisecond)
		default:
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if st := h.Stats(); st.First <= fencedAt {
		t.Fatalf("the buffer was never released past the tombstone %v: %+v", fencedAt, st.Stats)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = open()
	defer h.Close()
	if ids := h.Tombstones(); !slices.Equal(ids, []GroupID{1}) {
		t.Fatalf("tombstones after the laps: %v", ids)
	}
	g, err := h.AddGroup(1, []NodeID{1}, &faultySM{})
	if err != nil {
		t.Fatal(err)
	}
	if st := g.Status(); st.Term < term {
		t.Fatalf("group 1 came back in term %d, fenced in %d", st.Term, term)
	}
}
