package cluster

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"basalt/pkg/clock"
)

// caughtUp is a leader's status in which every node in ids answers and
// has everything up to commit.
func caughtUp(commit uint64, ids ...NodeID) GroupStatus {
	st := GroupStatus{Commit: commit, Progress: map[NodeID]uint64{}, RecentActive: map[NodeID]bool{}}
	for _, id := range ids {
		st.Progress[id], st.RecentActive[id] = commit, true
	}
	return st
}

func withProgress(st GroupStatus, id NodeID, match uint64) GroupStatus {
	st.Progress = maps.Clone(st.Progress)
	st.Progress[id] = match
	return st
}

func withInactive(st GroupStatus, id NodeID) GroupStatus {
	st.RecentActive = maps.Clone(st.RecentActive)
	st.RecentActive[id] = false
	return st
}

func TestPlanMove(t *testing.T) {
	const commit = 10_000
	all := caughtUp(commit, 1, 2, 3, 4, 5)
	tests := []struct {
		name     string
		want     []NodeID
		m        Membership
		st       GroupStatus
		self     NodeID
		changes  []MemberChange
		transfer NodeID
	}{
		{"add the missing node as a learner",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3}}, all, 1,
			[]MemberChange{{AddLearner, 4}}, 0},
		{"add one learner at a time",
			[]NodeID{1, 4, 5}, Membership{Voters: []NodeID{1, 2, 3}}, all, 1,
			[]MemberChange{{AddLearner, 4}}, 0},
		{"wait for a learner that has acknowledged nothing, even while the commit index is low",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3}, Learners: []NodeID{4}},
			withProgress(caughtUp(100, 1, 2, 3), 4, 0), 1, nil, 0},
		{"remove a stray learner",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3}, Learners: []NodeID{4, 5}}, all, 1,
			[]MemberChange{{RemoveMember, 5}}, 0},
		{"wait while a learner lags by more than the slack",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3}, Learners: []NodeID{4}},
			withProgress(all, 4, commit-CatchUpSlack-1), 1, nil, 0},
		{"wait while a learner has no progress",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3}, Learners: []NodeID{4}},
			caughtUp(commit, 1, 2, 3), 1, nil, 0},
		{"promote and remove in one change",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3}, Learners: []NodeID{4}},
			withProgress(all, 4, commit-CatchUpSlack), 1,
			[]MemberChange{{AddVoter, 4}, {RemoveMember, 3}}, 0},
		{"promote two and remove two (joint)",
			[]NodeID{1, 4, 5}, Membership{Voters: []NodeID{1, 2, 3}, Learners: []NodeID{4, 5}}, all, 1,
			[]MemberChange{{AddVoter, 4}, {AddVoter, 5}, {RemoveMember, 2}, {RemoveMember, 3}}, 0},
		{"shrink: remove the voters not wanted",
			[]NodeID{1}, Membership{Voters: []NodeID{1, 2, 3}}, all, 1,
			[]MemberChange{{RemoveMember, 2}, {RemoveMember, 3}}, 0},
		{"a leader to leave promotes first",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3}, Learners: []NodeID{4}}, all, 3,
			[]MemberChange{{AddVoter, 4}}, 0},
		{"then hands over to a caught-up voter in Want",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3, 4}}, all, 3, nil, 1},
		{"never to a lagging voter",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3, 4}},
			withProgress(withProgress(all, 1, commit-CatchUpSlack-1), 2, commit-CatchUpSlack-1), 3, nil, 4},
		{"never to a voter that does not answer",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3, 4}},
			withInactive(withInactive(all, 1), 2), 3, nil, 4},
		{"nobody to hand over to: wait",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 3, 4}},
			withInactive(withProgress(withInactive(all, 1), 2, 0), 4), 3, nil, 0},
		{"reached: nothing to do",
			[]NodeID{1, 2, 4}, Membership{Voters: []NodeID{1, 2, 4}}, all, 1, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &Volume{Name: "v", ID: 2, Replicas: tt.m.Voters, Learners: tt.m.Learners, Want: tt.want}
			changes, transfer := planMove(v, tt.m, tt.st, tt.self)
			if !reflect.DeepEqual(changes, tt.changes) || transfer != tt.transfer {
				t.Fatalf("planMove(want %v, %+v, self %v) = %v, transfer %v; want %v, transfer %v",
					tt.want, tt.m, tt.self, changes, transfer, tt.changes, tt.transfer)
			}
		})
	}
}

// TestPlanMoveReachesWant follows planMove step by step on a simulated
// group, for each leader, until the configuration is Want: it must get
// there, keep a majority of the old voters until the last change, and the
// leader must never remove itself.
func TestPlanMoveReachesWant(t *testing.T) {
	for _, tc := range []struct{ from, want []NodeID }{
		{[]NodeID{1, 2, 3}, []NodeID{1, 2, 4}},
		{[]NodeID{1, 2, 3}, []NodeID{3, 4, 5}},
		{[]NodeID{1, 2, 3}, []NodeID{4, 5, 6}},
		{[]NodeID{1}, []NodeID{2}},
		{[]NodeID{1, 2}, []NodeID{1, 2, 3}},
	} {
		for _, leader := range tc.from {
			m := Membership{Voters: slices.Clone(tc.from)}
			lagging := map[NodeID]bool{} // a new learner lags for one step
			var steps []string
			for step := 0; ; step++ {
				if step > 20 {
					t.Fatalf("%v → %v from leader %v: no end after %v", tc.from, tc.want, leader, steps)
				}
				st := caughtUp(1000, append(slices.Clone(m.Voters), m.Learners...)...)
				for id := range lagging {
					st.Progress[id] = 0
				}
				clear(lagging)
				v := &Volume{Name: "v", ID: 2, Replicas: m.Voters, Learners: m.Learners, Want: tc.want}
				changes, transfer := planMove(v, m, st, leader)
				if transfer != 0 {
					if !slices.Contains(tc.want, transfer) || !slices.Contains(m.Voters, transfer) {
						t.Fatalf("handed over to %v: not a voter in Want (%+v)", transfer, m)
					}
					steps = append(steps, "transfer")
					leader = transfer
					continue
				}
				if len(changes) == 0 {
					if slices.Equal(sortedIDs(m.Voters), tc.want) && len(m.Learners) == 0 {
						break
					}
					steps = append(steps, "wait")
					continue
				}
				for _, c := range changes {
					switch c.Op {
					case AddLearner:
						m.Learners = append(m.Learners, c.Node)
						lagging[c.Node] = true
						steps = append(steps, "learner")
					case AddVoter:
						m.Learners = slices.DeleteFunc(m.Learners, func(id NodeID) bool { return id == c.Node })
						m.Voters = append(m.Voters, c.Node)
						steps = append(steps, "promote")
					case RemoveMember:
						if c.Node == leader {
							t.Fatalf("leader %v removes itself: %v", leader, changes)
						}
						m.Voters = slices.DeleteFunc(m.Voters, func(id NodeID) bool { return id == c.Node })
						steps = append(steps, "remove")
					}
				}
				// Every configuration reached is one the leader can record.
				rc := Command{Op: OpReplicasChanged, Volume: "v", ID: 2, Nodes: m.Voters, Learners: m.Learners}
				if err := rc.Validate(); err != nil {
					t.Fatalf("%v → %v from leader %v: configuration %+v cannot be recorded: %v", tc.from, tc.want, leader, m, err)
				}
			}
			if !slices.Contains(tc.want, leader) {
				t.Errorf("%v → %v: ends led by %v, not in Want", tc.from, tc.want, leader)
			}
		}
	}
}

// fakeMember is a volume group whose configuration changes at once.
type fakeMember struct {
	mu        sync.Mutex
	m         Membership
	st        GroupStatus
	changes   [][]MemberChange
	transfers []NodeID
	err       error // ChangeMembers fails with it
}

func (g *fakeMember) Propose(context.Context, []byte) error { return errors.New("fake: no proposals") }
func (g *fakeMember) ReadBarrier(context.Context) error     { return nil }
func (g *fakeMember) AddPeers([]NodeID)                     {}
func (g *fakeMember) Leader() NodeID                        { return 1 }
func (g *fakeMember) IsLeader() bool                        { return true }
func (g *fakeMember) Watch() <-chan NodeID                  { return make(chan NodeID) }

func (g *fakeMember) Status() GroupStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st
}

func (g *fakeMember) TransferLeadership(to NodeID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.transfers = append(g.transfers, to)
}

func (g *fakeMember) Members() Membership {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Membership{Voters: slices.Clone(g.m.Voters), Learners: slices.Clone(g.m.Learners), Outgoing: slices.Clone(g.m.Outgoing)}
}

func (g *fakeMember) ChangeMembers(_ context.Context, changes ...MemberChange) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.changes = append(g.changes, changes)
	if g.err != nil {
		return g.err
	}
	for _, c := range changes {
		g.m.Voters = slices.DeleteFunc(g.m.Voters, func(id NodeID) bool { return id == c.Node })
		g.m.Learners = slices.DeleteFunc(g.m.Learners, func(id NodeID) bool { return id == c.Node })
		switch c.Op {
		case AddLearner:
			g.m.Learners = append(g.m.Learners, c.Node)
		case AddVoter:
			g.m.Voters = append(g.m.Voters, c.Node)
		}
	}
	g.m.Voters, g.m.Learners = sortedIDs(g.m.Voters), sortedIDs(g.m.Learners)
	if len(g.m.Learners) == 0 {
		g.m.Learners = nil
	}
	return nil
}

// moverFixture is a reconciler of node self on a fakeMeta that it leads,
// with volume a on nodes 1-3 and nodes 1-4 registered.
func moverFixture(t *testing.T, self NodeID) (*reconciler, *fakeMeta, *Machine) {
	m := machineWith(t, &MemoryPersister{}, register(1), register(2), register(3), create("a", 3), register(4))
	if got := m.State().Volumes["a"].Replicas; !slices.Equal(got, []NodeID{1, 2, 3}) {
		t.Fatalf("placement of a: %v", got)
	}
	g := &fakeMeta{m: m, self: self, leader: self, active: map[NodeID]bool{}}
	c := &Cluster{cfg: Config{Self: Node{ID: self}}, m: m, meta: g, clock: clock.NewManual(time.Unix(0, 0)),
		log: slog.New(slog.DiscardHandler)}
	return &reconciler{c: c}, g, m
}

func TestMoveStepReportsAConfigurationTheMetadataLacks(t *testing.T) {
	r, meta, m := moverFixture(t, 1)
	g := &fakeMember{m: Membership{Voters: []NodeID{1, 2, 4}, Learners: []NodeID{3}}}
	if err := r.moveStep(context.Background(), m.State().Volumes["a"], g); err != nil {
		t.Fatal(err)
	}
	if v := m.State().Volumes["a"]; !slices.Equal(v.Replicas, []NodeID{1, 2, 4}) || !slices.Equal(v.Learners, []NodeID{3}) {
		t.Fatalf("after the report: replicas %v learners %v", v.Replicas, v.Learners)
	}
	if len(g.changes) != 0 || len(meta.proposed(OpReplicasChanged)) != 1 {
		t.Errorf("changes %v, reports %+v: want one report and no change", g.changes, meta.proposed(OpReplicasChanged))
	}
	// In a joint configuration nothing is reported or changed.
	g.m.Outgoing = []NodeID{1, 2, 3}
	g.m.Voters = []NodeID{1, 2, 5}
	if err := r.moveStep(context.Background(), m.State().Volumes["a"], g); err != nil {
		t.Fatal(err)
	}
	if len(meta.proposed(OpReplicasChanged)) != 1 || len(g.changes) != 0 {
		t.Errorf("acted in a joint configuration: reports %d, changes %v", len(meta.proposed(OpReplicasChanged)), g.changes)
	}
}

func TestMoveStepWalksTowardWant(t *testing.T) {
	r, meta, m := moverFixture(t, 1)
	applyOK(t, m, moveTo(m.State().Volumes["a"], 1, 2, 4))
	g := &fakeMember{m: Membership{Voters: []NodeID{1, 2, 3}}, st: caughtUp(1000, 1, 2, 3)}
	step := func() {
		t.Helper()
		if err := r.moveStep(context.Background(), m.State().Volumes["a"], g); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if v := m.State().Volumes["a"]; !reflect.DeepEqual(g.changes, [][]MemberChange{{{AddLearner, 4}}}) ||
		!slices.Equal(v.Learners, []NodeID{4}) {
		t.Fatalf("first step: changes %v, metadata learners %v", g.changes, v.Learners)
	}
	step() // node 4 has no progress yet: wait
	if len(g.changes) != 1 {
		t.Fatalf("promoted a learner that has not caught up: %v", g.changes)
	}
	g.st = caughtUp(1000, 1, 2, 3, 4)
	step()
	v := m.State().Volumes["a"]
	if !reflect.DeepEqual(g.changes[1], []MemberChange{{AddVoter, 4}, {RemoveMember, 3}}) ||
		!slices.Equal(v.Replicas, []NodeID{1, 2, 4}) || v.Learners != nil || v.Want != nil {
		t.Fatalf("promotion: changes %v; metadata %v learners %v want %v", g.changes, v.Replicas, v.Learners, v.Want)
	}
	step() // reached: nothing more
	if len(g.changes) != 2 || len(meta.proposed(OpReplicasChanged)) != 2 {
		t.Errorf("after reaching Want: changes %v, reports %d", g.changes, len(meta.proposed(OpReplicasChanged)))
	}
}

// TestMoveStepHandsOverBeforeLeaving moves a from 1,2,3 to 1,2,4 on its
// leader, node 3: it promotes node 4 alone and records four voters, hands
// the leadership to node 1, and node 1 removes node 3.
func TestMoveStepHandsOverBeforeLeaving(t *testing.T) {
	r, meta, m := moverFixture(t, 3)
	applyOK(t, m, moveTo(m.State().Volumes["a"], 1, 2, 4))
	applyOK(t, m, changed(m.State().Volumes["a"], []NodeID{1, 2, 3}, 4))
	g := &fakeMember{m: Membership{Voters: []NodeID{1, 2, 3}, Learners: []NodeID{4}}, st: caughtUp(1000, 1, 2, 3, 4)}
	step := func() {
		t.Helper()
		if err := r.moveStep(context.Background(), m.State().Volumes["a"], g); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if !reflect.DeepEqual(g.changes, [][]MemberChange{{{AddVoter, 4}}}) || len(g.transfers) != 0 {
		t.Fatalf("leader 3 leaving: changes %v transfers %v, want the promotion alone", g.changes, g.transfers)
	}
	if v := m.State().Volumes["a"]; !slices.Equal(v.Replicas, []NodeID{1, 2, 3, 4}) || v.Learners != nil {
		t.Fatalf("metadata after the promotion: replicas %v learners %v, want the four voters", v.Replicas, v.Learners)
	}
	g.st = withProgress(g.st, 1, 0) // node 1 lags: node 2 is the one to take over
	step()
	if !reflect.DeepEqual(g.transfers, []NodeID{2}) || len(g.changes) != 1 {
		t.Fatalf("second step: transfers %v changes %v, want a hand-over to node2 alone", g.transfers, g.changes)
	}
	// Node 2 leads now.
	meta.setLeader(2)
	meta.self, r.c.cfg.Self.ID = 2, 2
	step()
	if v := m.State().Volumes["a"]; !reflect.DeepEqual(g.changes[1], []MemberChange{{RemoveMember, 3}}) ||
		!slices.Equal(v.Replicas, []NodeID{1, 2, 4}) || v.Want != nil {
		t.Fatalf("on the new leader: changes %v; metadata %v want %v", g.changes, v.Replicas, v.Want)
	}
}

func TestMoveStepReturnsTheChangeError(t *testing.T) {
	r, meta, m := moverFixture(t, 1)
	applyOK(t, m, moveTo(m.State().Volumes["a"], 1, 2, 4))
	boom := errors.New("no live majority")
	g := &fakeMember{m: Membership{Voters: []NodeID{1, 2, 3}}, st: caughtUp(1000, 1, 2, 3), err: boom}
	if err := r.moveStep(context.Background(), m.State().Volumes["a"], g); !errors.Is(err, boom) {
		t.Fatalf("err %v, want %v", err, boom)
	}
	if len(meta.proposed(OpReplicasChanged)) != 0 {
		t.Errorf("reported a change that failed")
	}
}
