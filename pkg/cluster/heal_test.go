package cluster

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"basalt/pkg/clock"
)

// fakeMeta is a metadata group of one machine: proposals on the leader
// apply at once; the test chooses the leader and which nodes the leader
// sees as recently active.
type fakeMeta struct {
	mu     sync.Mutex
	m      *Machine
	self   NodeID
	leader NodeID
	active map[NodeID]bool
	cmds   []Command // every command proposed, in order
}

func (g *fakeMeta) Propose(ctx context.Context, data []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leader != g.self {
		return fmt.Errorf("fake: %w", ErrNotLeader)
	}
	c, err := DecodeCommand(data)
	if err != nil {
		return err
	}
	g.cmds = append(g.cmds, c)
	return g.m.Apply(ctx, g.m.AppliedIndex()+1, data)
}

func (g *fakeMeta) ReadBarrier(context.Context) error { return nil }

func (g *fakeMeta) Leader() NodeID {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leader
}

func (g *fakeMeta) IsLeader() bool { return g.Leader() == g.self }

func (g *fakeMeta) Watch() <-chan NodeID { return make(chan NodeID) }

func (g *fakeMeta) Status() GroupStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := GroupStatus{Leader: g.leader, Role: "follower"}
	if g.leader == g.self {
		st.Role, st.RecentActive = "leader", maps.Clone(g.active)
	}
	return st
}

func (g *fakeMeta) TransferLeadership(NodeID) {}

func (g *fakeMeta) setActive(id NodeID, on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active[id] = on
}

func (g *fakeMeta) setLeader(id NodeID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leader = id
}

// proposed returns the commands of op proposed so far.
func (g *fakeMeta) proposed(op Op) []Command {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Command
	for _, c := range g.cmds {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// healFixture is a Cluster of node 1, the metadata leader, on a fakeMeta
// and a manual clock, with a healer whose passes the test runs.
type healFixture struct {
	t   *testing.T
	m   *Machine
	g   *fakeMeta
	clk *clock.Manual
	c   *Cluster
	h   *healer
	log *bytes.Buffer
}

const testDownOut = time.Minute

// newHealFixture applies cmds, then sees every node as active.
func newHealFixture(t *testing.T, cmds ...Command) *healFixture {
	m := machineWith(t, &MemoryPersister{}, cmds...)
	g := &fakeMeta{m: m, self: 1, leader: 1, active: map[NodeID]bool{}}
	for id := range m.State().Nodes {
		g.active[id] = true
	}
	f := &healFixture{t: t, m: m, g: g, clk: clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), log: &bytes.Buffer{}}
	f.c = &Cluster{cfg: Config{Self: Node{ID: 1}, DownOutInterval: testDownOut, Resync: time.Second},
		m: m, meta: g, clock: f.clk, log: slog.New(slog.NewTextHandler(f.log, nil))}
	f.h = newHealer(f.c)
	return f
}

// pass advances the clock by d and runs one healer pass.
func (f *healFixture) pass(d time.Duration) {
	f.clk.Advance(d)
	f.h.pass(context.Background())
}

func (f *healFixture) nodeState(id NodeID) string { return f.m.State().Nodes[id].State }

// threeOfFour registers nodes 1-4 and creates volume a (rf 3); it returns
// the commands, a replica node of a other than node 1 and the node that
// holds no replica.
func threeOfFour(t *testing.T) ([]Command, func(*State) (victim, spare NodeID)) {
	cmds := []Command{register(1), register(2), register(3), register(4), create("a", 3)}
	roles := func(s *State) (victim, spare NodeID) {
		a := s.Volumes["a"]
		for id := NodeID(1); id <= 4; id++ {
			switch {
			case !a.HasReplica(id):
				spare = id
			case id != 1:
				victim = id
			}
		}
		if victim == 0 || spare == 0 {
			t.Fatalf("placement of a: %v", a.Replicas)
		}
		return victim, spare
	}
	return cmds, roles
}

func TestHealerMarksOutANodeDownLongerThanTheInterval(t *testing.T) {
	cmds, roles := threeOfFour(t)
	f := newHealFixture(t, cmds...)
	victim, spare := roles(f.m.State())
	a := f.m.State().Volumes["a"]
	f.pass(0)
	f.g.setActive(victim, false)
	f.pass(time.Second) // seen at the first pass, silent since
	f.pass(testDownOut - 2*time.Second)
	if st := f.nodeState(victim); st != NodeActive || len(f.g.cmds) != 0 {
		t.Fatalf("before the interval: %v is %s, commands %+v", victim, st, f.g.cmds)
	}
	f.pass(time.Second) // exactly the interval since last seen
	if st := f.nodeState(victim); st != NodeOut {
		t.Fatalf("after the interval: %v is %s, want out", victim, st)
	}
	want := sortedIDs(append(slices.DeleteFunc(slices.Clone(a.Replicas), func(id NodeID) bool { return id == victim }), spare))
	if got := f.m.State().Volumes["a"].Want; !slices.Equal(got, want) {
		t.Fatalf("a on %v with %v out: Want %v, want %v", a.Replicas, victim, got, want)
	}
	for range 5 {
		f.pass(testDownOut)
	}
	if outs := f.g.proposed(OpSetNodeState); len(outs) != 1 || outs[0].NodeID != victim || outs[0].State != NodeOut {
		t.Errorf("set_node_state commands %+v, want one marking %v out", outs, victim)
	}
	if moves := f.g.proposed(OpMoveReplicas); len(moves) != 1 {
		t.Errorf("move_replicas commands %+v, want one", moves)
	}
	// Back again: it stays out until an administrator activates it.
	f.g.setActive(victim, true)
	f.pass(time.Second)
	if st := f.nodeState(victim); st != NodeOut || len(f.g.proposed(OpSetNodeState)) != 1 {
		t.Errorf("a returning node: %s, commands %+v", st, f.g.proposed(OpSetNodeState))
	}
}

func TestHealerNeverMarksOutANodeInMaintenance(t *testing.T) {
	cmds, roles := threeOfFour(t)
	f := newHealFixture(t, cmds...)
	victim, _ := roles(f.m.State())
	applyOK(t, f.m, setState(victim, NodeMaintenance))
	f.g.setActive(victim, false)
	for range 10 {
		f.pass(testDownOut)
	}
	if st := f.nodeState(victim); st != NodeMaintenance {
		t.Fatalf("%v in maintenance, down for 10 intervals: %s", victim, st)
	}
	if len(f.g.cmds) != 0 || f.m.State().Volumes["a"].Want != nil {
		t.Fatalf("commands %+v, Want %v: want none", f.g.cmds, f.m.State().Volumes["a"].Want)
	}
}

func TestHealerOnANewLeaderStartsTheClocksAfresh(t *testing.T) {
	cmds, roles := threeOfFour(t)
	f := newHealFixture(t, cmds...)
	victim, _ := roles(f.m.State())
	f.g.setActive(victim, false)
	f.pass(0) // first seen (silent) now
	f.pass(testDownOut - time.Second)
	f.g.setLeader(2) // node 1 follows
	for range 3 {
		f.pass(testDownOut)
	}
	if len(f.g.cmds) != 0 || f.nodeState(victim) != NodeActive {
		t.Fatalf("a follower's healer acted: %+v", f.g.cmds)
	}
	f.g.setLeader(1) // leads again: the clock it had is stale
	f.pass(time.Second)
	f.pass(testDownOut - time.Second)
	if st := f.nodeState(victim); st != NodeActive {
		t.Fatalf("marked out %v after less than the interval under the new leadership", testDownOut-time.Second)
	}
	f.pass(time.Second)
	if st := f.nodeState(victim); st != NodeOut {
		t.Fatalf("after the interval under the new leadership: %s, want out", st)
	}
}

func TestHealerClockRestartsWhenTheNodeAnswers(t *testing.T) {
	cmds, roles := threeOfFour(t)
	f := newHealFixture(t, cmds...)
	victim, _ := roles(f.m.State())
	f.pass(0)
	f.g.setActive(victim, false)
	f.pass(testDownOut - time.Second)
	f.g.setActive(victim, true)
	f.pass(time.Second) // answered: seen now
	f.g.setActive(victim, false)
	f.pass(testDownOut - time.Second)
	if st := f.nodeState(victim); st != NodeActive {
		t.Fatalf("%v answered %v ago: %s", victim, testDownOut-time.Second, st)
	}
	f.pass(time.Second)
	if st := f.nodeState(victim); st != NodeOut {
		t.Fatalf("%v silent for the interval: %s, want out", victim, st)
	}
}

func TestHealerGivesADrainingNodesVolumesAWant(t *testing.T) {
	cmds, roles := threeOfFour(t)
	f := newHealFixture(t, cmds...)
	victim, spare := roles(f.m.State())
	applyOK(t, f.m, setState(victim, NodeDraining))
	f.pass(time.Second)
	a := f.m.State().Volumes["a"]
	if !slices.Contains(a.Want, spare) || slices.Contains(a.Want, victim) || len(a.Want) != 3 {
		t.Fatalf("a on %v with %v draining: Want %v, want %v replacing it", a.Replicas, victim, a.Want, spare)
	}
	if f.nodeState(victim) != NodeDraining {
		t.Errorf("draining node became %s", f.nodeState(victim))
	}
}

// fiveNodes is for a state of nodes 1-5 and volume a (rf 3): it returns
// two of a's replicas (keep), the third (v) and the two spares.
func fiveNodes(t *testing.T, f *healFixture) (keep []NodeID, v NodeID, spares []NodeID) {
	a := f.m.State().Volumes["a"]
	for id := NodeID(1); id <= 5; id++ {
		if !a.HasReplica(id) {
			spares = append(spares, id)
		}
	}
	if len(a.Replicas) != 3 || len(spares) != 2 {
		t.Fatalf("placement of a: %v", a.Replicas)
	}
	return a.Replicas[:2], a.Replicas[2], spares
}

func TestHealerKeepsAHealthyMoveInProgress(t *testing.T) {
	// An administrator moves a off v onto either spare; then v goes out.
	// The move in progress is possible: the healer keeps it, whichever
	// spare placement would have chosen.
	for i := range 2 {
		f := newHealFixture(t, register(1), register(2), register(3), register(4), register(5), create("a", 3))
		keep, v, spares := fiveNodes(t, f)
		moving := sortedIDs(append(slices.Clone(keep), spares[i]))
		applyOK(t, f.m, moveTo(f.m.State().Volumes["a"], moving...))
		applyOK(t, f.m, setState(v, NodeOut))
		f.pass(time.Second)
		if got := f.m.State().Volumes["a"].Want; !slices.Equal(got, moving) {
			t.Errorf("move to %v in progress, %v out: Want %v, want the move kept", moving, v, got)
		}
		if moves := f.g.proposed(OpMoveReplicas); len(moves) != 0 {
			t.Errorf("healer proposed %+v over a healthy move", moves)
		}
	}
}

func TestHealerReplacesAMoveThatBecameImpossible(t *testing.T) {
	f := newHealFixture(t, register(1), register(2), register(3), register(4), register(5), create("a", 3))
	keep, v, spares := fiveNodes(t, f)
	moving := sortedIDs(append(slices.Clone(keep), spares[0]))
	applyOK(t, f.m, moveTo(f.m.State().Volumes["a"], moving...))
	// The target of the move and the replica it replaces both go out.
	applyOK(t, f.m, setState(spares[0], NodeOut))
	applyOK(t, f.m, setState(v, NodeOut))
	f.pass(time.Second)
	if got, want := f.m.State().Volumes["a"].Want, sortedIDs(append(slices.Clone(keep), spares[1])); !slices.Equal(got, want) {
		t.Fatalf("a moving to %v, %v and %v out: Want %v, want %v", moving, spares[0], v, got, want)
	}
}

func TestHealerLogsAVolumeItCannotHealOnce(t *testing.T) {
	f := newHealFixture(t, register(1), register(2), register(3), create("a", 3))
	f.g.setActive(3, false)
	f.pass(0)
	f.pass(testDownOut)
	if f.nodeState(3) != NodeOut {
		t.Fatalf("node3 is %s, want out", f.nodeState(3))
	}
	for range 5 {
		f.pass(time.Second)
	}
	if moves := f.g.proposed(OpMoveReplicas); len(moves) != 0 {
		t.Fatalf("no spare node, yet move_replicas %+v", moves)
	}
	logged := f.log.String()
	if n := strings.Count(logged, "cannot be re-replicated"); n != 1 || !strings.Contains(logged, "no other node") {
		t.Fatalf("logged the stuck volume %d times (want once, saying there is no other node):\n%s", n, logged)
	}
	// A node joins: the next pass heals onto it.
	applyOK(t, f.m, register(4))
	f.g.setActive(4, true)
	f.pass(time.Second)
	if got := f.m.State().Volumes["a"].Want; !slices.Equal(got, []NodeID{1, 2, 4}) {
		t.Fatalf("after node4 joined: Want %v, want [1 2 4]", got)
	}
}

// TestHealerCancelsAMoveWhoseTargetWentOut: the replicas are all fine, but
// the node a move was heading to went out: the move is cancelled (Want =
// Replicas) instead of waiting for ever, which would also keep the node
// from being removed.
func TestHealerCancelsAMoveWhoseTargetWentOut(t *testing.T) {
	f := newHealFixture(t, register(1), register(2), register(3), register(4), register(5), create("a", 3))
	keep, v, spares := fiveNodes(t, f)
	a := f.m.State().Volumes["a"]
	moving := sortedIDs(append(slices.Clone(keep), spares[0]))
	applyOK(t, f.m, moveTo(a, moving...))
	applyOK(t, f.m, setState(spares[0], NodeOut))
	f.pass(time.Second)
	if got := f.m.State().Volumes["a"].Want; len(got) != 0 {
		t.Fatalf("a moving off %v to %v, which went out: Want %v, want the move cancelled", v, spares[0], got)
	}
}
