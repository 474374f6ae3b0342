package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"basalt/pkg/pmem"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// startJoiner starts a fourth node id that joins group 1 with peers as the
// voters it may hear from, and adds it to the nodes the cluster polls.
func (c *simCluster) startJoiner(id NodeID, peers []NodeID) {
	c.t.Helper()
	if c.regions[id] == nil {
		c.regions[id] = pmem.NewFake(4096+1<<20, int64(id)*13)
		c.locals[id] = newBlockSM(testVolumeSize)
	}
	cfg := Config{NodeID: id, LogRegion: c.regions[id], Clock: c.clock, Logger: testLogger().With("node", id),
		Transport: c.net.Endpoint(id), Manual: true, TickInterval: 10 * time.Millisecond}
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	h, err := NewHost(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		c.t.Fatal(err)
	}
	g, err := h.JoinGroup(1, peers, c.locals[id])
	if err != nil {
		c.t.Fatal(err)
	}
	c.locals[id].group.Store(g)
	c.hosts[id], c.vols[id] = h, c.locals[id]
	if !slices.Contains(c.members, id) {
		c.members = append(c.members, id)
	}
}

// change runs ChangeMembers on node id's group while the cluster runs.
func (c *simCluster) change(id NodeID, changes ...MemberChange) error {
	c.t.Helper()
	result := make(chan error, 1)
	g := c.vols[id].Group()
	go func() { result <- g.ChangeMembers(context.Background(), changes...) }()
	var err error = errPending
	c.runUntil(10*time.Second, fmt.Sprintf("change %v", changes), func() bool {
		select {
		case err = <-result:
			return true
		default:
			return false
		}
	})
	return err
}

// caughtUp reports whether node id has applied everything the leader has.
func (c *simCluster) caughtUp(leader, id NodeID) bool {
	return c.vols[id].Group().Status().Applied >= c.vols[leader].Group().Status().Commit
}

// TestReplaceAVoterThroughALearner is the healing sequence: a new node joins
// group 1 as a learner, catches up by snapshot (the leader's log was
// compacted), and is promoted in the same joint change that removes a dead
// voter. Every acknowledged write reads back from the new member, and the
// removed one no longer counts: with it gone for good the group still
// commits. Seeded (BASALT_MEMBERSHIP_FIRST replays, BASALT_MEMBERSHIP_SEEDS
// runs more).
func TestReplaceAVoterThroughALearner(t *testing.T) {
	first, n := freshSeeds(t, "BASALT_MEMBERSHIP", 2)
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { replaceRun(t, seed) })
	}
}

func replaceRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	c := newSimCluster(t, seed, func(cfg *Config) { cfg.CompactionMargin = 4 })
	c.startAll()
	leader := c.leader()
	written := map[int64]byte{}
	writeSome := func(n int) {
		for range n {
			blk, b := int64(rng.IntN(64)), byte(rng.IntN(255)+1)
			if err := c.write(c.leader(), blk, b); err != nil {
				t.Fatal(err)
			}
			written[blk] = b
		}
	}
	writeSome(30)
	dead := c.members[(int(leader))%3] // a follower, lost for good
	c.crash(dead)
	writeSome(10)

	c.startJoiner(4, []NodeID{1, 2, 3})
	leader = c.leader()
	other := 6 - leader - dead
	if err := c.change(leader, MemberChange{AddVoter, 4}, MemberChange{RemoveMember, leader},
		MemberChange{RemoveMember, other}); !errors.Is(err, ErrUnsafeChange) {
		t.Fatalf("leaving only the dead voter and one that never answered: %v, want ErrUnsafeChange", err)
	}
	if err := c.change(leader, MemberChange{AddLearner, 4}); err != nil {
		t.Fatal(err)
	}
	c.runUntil(10*time.Second, "the learner catches up", func() bool { return c.caughtUp(leader, 4) })
	if got := c.vols[4].Group().Status().SnapshotsReceived; got == 0 {
		t.Fatal("the learner caught up without a snapshot (the leader's log was compacted)")
	}
	writeSome(5)
	if err := c.change(leader, MemberChange{AddVoter, 4}, MemberChange{RemoveMember, dead}); err != nil {
		t.Fatal(err)
	}
	m := c.vols[leader].Group().Members()
	want := []NodeID{}
	for _, id := range []NodeID{1, 2, 3, 4} {
		if id != dead {
			want = append(want, id)
		}
	}
	if !slices.Equal(m.Voters, want) || m.Joint() || len(m.Learners) != 0 {
		t.Fatalf("members after the change %+v, want voters %v and no joint configuration", m, want)
	}
	// The group commits with the removed node gone and one more crashed:
	// the two that remain are a majority of the new three only.
	writeSome(5)
	c.runUntil(5*time.Second, "node 4 applies everything", func() bool { return c.caughtUp(c.leader(), 4) })
	for blk, b := range written {
		got := c.locals[4].bytes()[blk*4096 : (blk+1)*4096]
		if !bytes.Equal(got, bytes.Repeat([]byte{b}, 4096)) {
			t.Fatalf("block %d on the new member reads %#x.., want %#x", blk, got[0], b)
		}
	}
	if got := c.vols[4].Group().Members(); !slices.Equal(got.Voters, want) {
		t.Fatalf("the new member sees voters %v, want %v", got.Voters, want)
	}
}

// TestChangeMembersRefusesWhatRaftCannotDo: a change on a follower, a second
// change while one is in progress, and removing every voter are refused
// without touching the configuration.
func TestChangeMembersRefusesWhatRaftCannotDo(t *testing.T) {
	c := newSimCluster(t, 3, nil)
	c.startAll()
	leader := c.leader()
	follower := c.members[(int(leader))%3]
	c.runUntil(time.Second, "the follower knows the leader", func() bool { return c.vols[follower].Group().Leader() == leader })
	if err := c.write(leader, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.change(follower, MemberChange{AddLearner, 4}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("change on a follower: %v, want ErrNotLeader", err)
	}
	if err := c.change(leader, MemberChange{RemoveMember, 1}, MemberChange{RemoveMember, 2},
		MemberChange{RemoveMember, 3}); !errors.Is(err, ErrUnsafeChange) {
		t.Fatalf("removing every voter: %v, want ErrUnsafeChange", err)
	}
	// Two changes stepped one after the other on the loop: the second is
	// refused while the first is not applied yet.
	g := c.vols[leader].Group()
	errs := make(chan error, 2)
	add := func(n NodeID) raftpb.ConfChangeV2 {
		return raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: uint64(n)}}}
	}
	g.exec(func(co *core) {
		co.proposeConfChange(add(4), func(err error) { errs <- err })
		co.proposeConfChange(add(5), func(err error) { errs <- err })
	})
	c.runUntil(5*time.Second, "both changes answer", func() bool { return len(errs) == 2 })
	if err := <-errs; !errors.Is(err, ErrChangeInProgress) {
		t.Fatalf("second change: %v, want ErrChangeInProgress", err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("first change: %v", err)
	}
	if m := g.Members(); !slices.Equal(m.Learners, []NodeID{4}) {
		t.Fatalf("learners after the changes %v, want [node4]", m.Learners)
	}
}

// TestVoterChangeRightAfterAQuorumCheck: Raft clears every peer's
// RecentActive at each quorum check (once per election timeout), so a
// live-majority check on it refuses a sound change for a while after each
// check. ChangeMembers counts a peer live when it was heard within the last
// election timeout instead: at the moment Raft's flags are all clear, adding
// a voter to a healthy group is accepted.
func TestVoterChangeRightAfterAQuorumCheck(t *testing.T) {
	c := newSimCluster(t, 11, nil)
	c.startAll()
	leader := c.leader()
	if err := c.write(leader, 0, 1); err != nil {
		t.Fatal(err)
	}
	g := c.vols[leader].Group()
	cleared := func() bool {
		all := make(chan bool, 1)
		g.exec(func(co *core) {
			ok := true
			co.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
				ok = ok && (id == co.self || !pr.RecentActive)
			})
			all <- ok
		})
		c.settle()
		return <-all
	}
	for range 1000 {
		if cleared() {
			break
		}
		c.clock.Advance(time.Millisecond)
		c.settle()
	}
	if !cleared() {
		t.Fatal("Raft's RecentActive flags never all cleared")
	}
	result := make(chan error, 1)
	g.exec(func(co *core) {
		co.proposeConfChange(raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{
			{Type: raftpb.ConfChangeAddNode, NodeID: 4}}, Transition: raftpb.ConfChangeTransitionAuto},
			func(err error) { result <- err })
	})
	c.runUntil(5*time.Second, "the change answers", func() bool { return len(result) == 1 })
	if err := <-result; err != nil {
		t.Fatalf("adding a voter to a healthy group right after a quorum check: %v", err)
	}
}

// noSnapshots drops every snapshot its node sends.
type noSnapshots struct{ Transport }

func (noSnapshots) SendSnapshot(_ GroupID, _ raftpb.Message, _ func(io.Writer) error, done func(error)) {
	done(errors.New("test: snapshots dropped"))
}

// TestJoinedMemberRecoversBeforeItsSnapshot: a node that joined a group
// persists its term as soon as the leader reaches it, before the snapshot;
// power lost then, its log must still recover (the group, empty, with its
// term). Before JoinGroup persisted an initial state record, recovery
// failed with "has log entries but no state record", and with it the Host
// and every group on the node.
func TestJoinedMemberRecoversBeforeItsSnapshot(t *testing.T) {
	c := newSimCluster(t, 21, func(cfg *Config) { cfg.CompactionMargin = 4 })
	c.wrap = func(_ NodeID, tr Transport) Transport { return noSnapshots{tr} }
	c.startAll()
	leader := c.leader()
	for i := range int64(10) {
		if err := c.write(leader, i, byte(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	c.startJoiner(4, []NodeID{1, 2, 3})
	if err := c.change(leader, MemberChange{AddLearner, 4}); err != nil {
		t.Fatal(err)
	}
	c.runUntil(5*time.Second, "the joiner learns the leader's term", func() bool {
		return c.hosts[4].Group(1).Status().Term > 0
	})
	if got := c.vols[4].Group().Status().SnapshotsReceived; got != 0 {
		t.Fatalf("the joiner received %d snapshots, want none (they are dropped)", got)
	}
	c.crash(4)
	h, err := NewHost(Config{NodeID: 4, LogRegion: c.regions[4], Clock: c.clock, Logger: testLogger(),
		Transport: c.net.Endpoint(4), Manual: true, TickInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("the joiner's log after a power loss before its snapshot: %v", err)
	}
	defer h.Close()
	if got := h.RecoveredGroups(); !slices.Equal(got, []GroupID{1}) {
		t.Fatalf("recovered groups %v, want [group1]", got)
	}
}
