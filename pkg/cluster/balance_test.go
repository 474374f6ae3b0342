package cluster_test

import (
	"context"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/cluster"
	"basalt/pkg/cluster/clustertest"
	"basalt/target"
)

// balanceSeed returns the seed of a randomized balance test: a fresh one,
// or BALANCE_SEED to replay a run.
func balanceSeed(t *testing.T) uint64 {
	t.Helper()
	seed := rand.Uint64()
	if s := os.Getenv("BALANCE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BALANCE_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with BALANCE_SEED=%d)", seed, seed)
	return seed
}

// stateOf builds a state with nodes 1..nodes (all active) and the volumes,
// volume i (group i+2) on replicas[i].
func stateOf(nodes int, replicas ...[]cluster.NodeID) *cluster.State {
	s := cluster.NewState()
	for i := 1; i <= nodes; i++ {
		s.Nodes[cluster.NodeID(i)] = &cluster.Node{ID: cluster.NodeID(i), State: cluster.NodeActive}
	}
	for i, r := range replicas {
		id := cluster.GroupID(i + 2)
		s.Volumes["v"+strconv.Itoa(i)] = &cluster.Volume{Name: "v" + strconv.Itoa(i), ID: id, Replicas: r}
	}
	return s
}

// randomState draws a state: 2..7 nodes, some not serving, and up to 40
// volumes of 1..3 voters (and sometimes a learner).
func randomState(rng *rand.Rand) *cluster.State {
	n := 2 + rng.IntN(6)
	s := stateOf(n)
	states := []string{cluster.NodeActive, cluster.NodeActive, cluster.NodeActive, "",
		cluster.NodeMaintenance, cluster.NodeDraining, cluster.NodeOut}
	for _, node := range s.Nodes {
		node.State = states[rng.IntN(len(states))]
	}
	for i := range rng.IntN(41) {
		perm := rng.Perm(n)
		rf := 1 + rng.IntN(min(3, n))
		v := &cluster.Volume{Name: "v" + strconv.Itoa(i), ID: cluster.GroupID(2 + 3*i + rng.IntN(3))}
		for _, p := range perm[:rf] {
			v.Replicas = append(v.Replicas, cluster.NodeID(p+1))
		}
		if rf < n && rng.IntN(3) == 0 {
			v.Learners = []cluster.NodeID{cluster.NodeID(perm[rf] + 1)}
		}
		s.Volumes[v.Name] = v
	}
	return s
}

// counts returns how many volumes each node is preferred for.
func counts(pref map[cluster.GroupID]cluster.NodeID) map[cluster.NodeID]int {
	c := map[cluster.NodeID]int{}
	for _, n := range pref {
		c[n]++
	}
	return c
}

func TestPreferredLeadersIsAFunctionOfTheState(t *testing.T) {
	rng := rand.New(rand.NewPCG(balanceSeed(t), 1))
	for range 200 {
		s := randomState(rng)
		want := cluster.PreferredLeaders(s)
		// A copy decoded afresh has maps built in another order.
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var c cluster.State
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if got := cluster.PreferredLeaders(&c); !maps.Equal(got, want) {
				t.Fatalf("state %s: preferred leaders %v, then %v", b, want, got)
			}
		}
	}
}

func TestPreferredLeadersAreServingVoters(t *testing.T) {
	rng := rand.New(rand.NewPCG(balanceSeed(t), 2))
	for range 300 {
		s := randomState(rng)
		pref := cluster.PreferredLeaders(s)
		for _, v := range s.Volumes {
			n, ok := pref[v.ID]
			hasServing := slices.ContainsFunc(v.Replicas, func(id cluster.NodeID) bool { return s.Nodes[id].Serves() })
			switch {
			case ok != hasServing:
				t.Fatalf("volume %v (voters %v): preferred %v, want one exactly when a voter serves", v.ID, v.Replicas, n)
			case ok && !v.IsVoter(n):
				t.Fatalf("volume %v: preferred %v is not a voter of %v", v.ID, n, v.Replicas)
			case ok && !s.Nodes[n].Serves():
				t.Fatalf("volume %v: preferred %v is %q", v.ID, n, s.Nodes[n].State)
			}
		}
		if len(pref) > len(s.Volumes) {
			t.Fatalf("%d preferences for %d volumes", len(pref), len(s.Volumes))
		}
	}
}

func TestPreferredLeadersSpreadEvenly(t *testing.T) {
	// Three nodes, six volumes on all three: two each.
	all := []cluster.NodeID{1, 2, 3}
	s := stateOf(3, all, all, all, all, all, all)
	if c := counts(cluster.PreferredLeaders(s)); c[1] != 2 || c[2] != 2 || c[3] != 2 {
		t.Fatalf("six volumes on three nodes: %v, want two each", c)
	}
	// A node in maintenance, draining or out prefers none: the others
	// share its volumes.
	for _, st := range []string{cluster.NodeMaintenance, cluster.NodeDraining, cluster.NodeOut} {
		s.Nodes[2].State = st
		if c := counts(cluster.PreferredLeaders(s)); c[2] != 0 || c[1] != 3 || c[3] != 3 {
			t.Errorf("node 2 %s: %v, want 3 on node 1 and node 3", st, c)
		}
	}

	// Every volume on every node: within one of an even share, whatever
	// the group IDs.
	rng := rand.New(rand.NewPCG(balanceSeed(t), 3))
	for range 200 {
		n := 1 + rng.IntN(7)
		var every []cluster.NodeID
		for i := 1; i <= n; i++ {
			every = append(every, cluster.NodeID(i))
		}
		vols := make([][]cluster.NodeID, rng.IntN(50))
		for i := range vols {
			vols[i] = every
		}
		s := stateOf(n, vols...)
		c := counts(cluster.PreferredLeaders(s))
		for i := 1; i <= n; i++ {
			if got := c[cluster.NodeID(i)]; got < len(vols)/n || got > (len(vols)+n-1)/n {
				t.Fatalf("%d volumes on %d nodes: node %d prefers %d (%v)", len(vols), n, i, got, c)
			}
		}
	}
}

// TestPreferredLeadersAreAsEvenAsTheVotersAllow compares the busiest and
// the idlest node with the best any assignment reaches, by trying every
// assignment of small random states.
func TestPreferredLeadersAreAsEvenAsTheVotersAllow(t *testing.T) {
	rng := rand.New(rand.NewPCG(balanceSeed(t), 4))
	for range 300 {
		n := 2 + rng.IntN(4)
		var vols [][]cluster.NodeID
		for range 1 + rng.IntN(7) {
			perm := rng.Perm(n)
			var r []cluster.NodeID
			for _, p := range perm[:1+rng.IntN(min(3, n))] {
				r = append(r, cluster.NodeID(p+1))
			}
			vols = append(vols, r)
		}
		s := stateOf(n, vols...)
		c := counts(cluster.PreferredLeaders(s))
		gotMax := slices.Max(slices.Collect(maps.Values(c)))
		if best := bestMax(vols, n); gotMax != best {
			t.Fatalf("voters %v: the busiest node prefers %d (%v), the best assignment %d", vols, gotMax, c, best)
		}
	}
}

// bestMax returns the least, over every assignment of each volume to one
// of its voters, of the most volumes one node gets.
func bestMax(vols [][]cluster.NodeID, nodes int) int {
	count := make([]int, nodes+1)
	best := len(vols)
	var try func(i int)
	try = func(i int) {
		if i == len(vols) {
			best = min(best, slices.Max(count))
			return
		}
		for _, n := range vols[i] {
			count[n]++
			try(i + 1)
			count[n]--
		}
	}
	try(0)
	return best
}

func TestHandoffTarget(t *testing.T) {
	s := stateOf(4, []cluster.NodeID{1, 2, 3})
	s.Volumes["v0"].Learners = []cluster.NodeID{4}
	id := cluster.GroupID(2)
	st := cluster.GroupStatus{Leader: 1, Role: "leader", LastIndex: 1000,
		Progress:     map[cluster.NodeID]uint64{1: 1000, 2: 990, 3: 1000, 4: 1000},
		RecentActive: map[cluster.NodeID]bool{1: true, 2: true, 3: true, 4: true}}
	check := func(what string, prefer, want cluster.NodeID) {
		t.Helper()
		if got := cluster.HandoffTarget(s, 1, id, st, prefer); got != want {
			t.Errorf("%s: target %v, want %v", what, got, want)
		}
	}
	check("the preferred node, caught up", 2, 2)
	check("no preference: the furthest along", 0, 3)
	check("the leader itself is never the target", 1, 3)
	check("a learner is never the target", 4, 3)
	st.RecentActive[3] = false
	check("a node that did not answer lately is skipped", 0, 2)
	st.Progress[2] = 1000 - cluster.CaughtUpSlack - 1
	check("a node too far behind is skipped", 0, 0)
	st.Progress[2], st.RecentActive[3] = 1000, true
	s.Nodes[3].State = cluster.NodeMaintenance
	st.Progress[3] = 1001
	check("a serving node before one that does not", 0, 2)
	st.RecentActive[2] = false
	check("a node in maintenance rather than none", 0, 3)
	// The metadata group: every member is a voter.
	st.RecentActive[2] = true
	if got := cluster.HandoffTarget(s, 1, cluster.MetadataGroup, st, 0); got != 4 && got != 2 {
		t.Errorf("metadata group: target %v, want a caught-up serving member (2 or 4)", got)
	}
}

func TestHandoffPreferencesLeaveTheNodeOut(t *testing.T) {
	all := []cluster.NodeID{1, 2, 3}
	s := stateOf(3, all, all, all, all, all, all)
	pref := cluster.HandoffPreferences(s, 2)
	if c := counts(pref); c[2] != 0 || c[1] != 3 || c[3] != 3 {
		t.Fatalf("preferences without node 2: %v", c)
	}
	if !s.Nodes[2].Serves() {
		t.Fatal("HandoffPreferences changed the state it was given")
	}
}

// balanceCluster is three in-process nodes on a clustertest.Net that
// report their members caught up, on one manual clock.
type balanceCluster struct {
	t     *testing.T
	net   *clustertest.Net
	clk   *clock.Manual
	mu    sync.Mutex // guards nodes against the Forward callbacks
	nodes map[cluster.NodeID]*cluster.Cluster
}

func newBalanceCluster(t *testing.T, n int) *balanceCluster {
	bc := &balanceCluster{t: t, net: clustertest.NewNet(), clk: clock.NewManual(time.Unix(1e9, 0)),
		nodes: map[cluster.NodeID]*cluster.Cluster{}}
	var peers []cluster.Node
	for i := 1; i <= n; i++ {
		peers = append(peers, peer(cluster.NodeID(i)))
	}
	for _, p := range peers {
		tgt, err := target.New(target.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := cluster.NewMachine(&cluster.MemoryPersister{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := cluster.Start(cluster.Config{Self: p, Peers: peers, Machine: m, Replicator: bc.net.Replicator(p.ID),
			Replicas: &cluster.MemoryReplicas{}, Target: tgt, Port: uint16(p.ID), Resync: time.Second, Clock: bc.clk,
			Forward: func(ctx context.Context, addr string, cmd cluster.Command) (cluster.Result, error) {
				bc.mu.Lock()
				leader := bc.nodes[1] // node 1 leads the metadata
				bc.mu.Unlock()
				if leader == nil {
					return cluster.Result{}, cluster.ErrNoLeader
				}
				return leader.Propose(ctx, cmd)
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(); _ = tgt.Close() })
		bc.mu.Lock()
		bc.nodes[p.ID] = c
		bc.mu.Unlock()
	}
	bc.eventually("every node registered", func() bool {
		for _, c := range bc.nodes {
			if len(c.State().Nodes) != n {
				return false
			}
		}
		return true
	})
	return bc
}

func (bc *balanceCluster) eventually(what string, cond func() bool) {
	bc.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			bc.t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// leads counts the volumes each node leads.
func (bc *balanceCluster) leads(ids []cluster.GroupID) map[cluster.NodeID]int {
	c := map[cluster.NodeID]int{}
	for _, id := range ids {
		c[bc.net.VolumeLeader(id)]++
	}
	return c
}

// advance moves the manual clock by d, one Resync at a time, letting the
// reconcilers run their pass after each step.
func (bc *balanceCluster) advance(d time.Duration) {
	for ; d > 0; d -= time.Second {
		bc.clk.Advance(time.Second)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLeadersMoveToTheirPreferredNodes puts the leadership of six volumes
// on one node of three: after the hold on a gained leadership, each node
// leads two, in a few transfers per pass, and they stay put.
func TestLeadersMoveToTheirPreferredNodes(t *testing.T) {
	bc := newBalanceCluster(t, 3)
	var ids []cluster.GroupID
	for i := range 6 {
		res, err := bc.nodes[1].Submit(context.Background(), createCmd("vol"+strconv.Itoa(i), 1<<20, 3))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Volume.ID)
	}
	bc.eventually("every node serves every volume", func() bool {
		for _, c := range bc.nodes {
			if len(c.Local().Volumes) != len(ids) {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		bc.net.SetVolumeLeader(id, 1)
	}
	bc.net.ReportProgress(true)
	bc.advance(5 * time.Second)
	if n := bc.net.Transfers(); n != 0 {
		t.Fatalf("%d transfers within 5 s of gaining the leaderships, want none before the hold ends", n)
	}
	// The hold ends 10 s after the first pass that saw node 1 lead, 5 or
	// 6 s from now. Each step is one Resync, so one pass.
	steps := 0
	for c := bc.leads(ids); c[1] != 2 || c[2] != 2 || c[3] != 2; c = bc.leads(ids) {
		if steps++; steps > 20 {
			t.Fatalf("leaders %v after 25 s, want two volumes on each node", c)
		}
		before := bc.net.Transfers()
		bc.advance(time.Second)
		if n := bc.net.Transfers(); before == 0 && n > 3 {
			t.Fatalf("%d transfers in the first pass that made any, want at most 3 a pass", n)
		}
	}
	want := cluster.PreferredLeaders(bc.nodes[1].State())
	for _, id := range ids {
		if got := bc.net.VolumeLeader(id); got != want[id] {
			t.Errorf("%v: leader %v, preferred %v", id, got, want[id])
		}
	}
	moved := bc.net.Transfers()
	if moved != 4 {
		t.Errorf("%d transfers, want 4 (two of node 1's six are preferred there)", moved)
	}
	bc.advance(30 * time.Second)
	if n := bc.net.Transfers(); n != moved {
		t.Errorf("%d more transfers once balanced", n-moved)
	}
}

// TestNoTransferWithoutProgress: a leader whose members report no
// progress (not known caught up) keeps its volumes.
func TestNoTransferWithoutProgress(t *testing.T) {
	bc := newBalanceCluster(t, 3)
	var ids []cluster.GroupID
	for i := range 3 {
		res, err := bc.nodes[1].Submit(context.Background(), createCmd("vol"+strconv.Itoa(i), 1<<20, 3))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Volume.ID)
	}
	bc.eventually("every node serves every volume", func() bool {
		for _, c := range bc.nodes {
			if len(c.Local().Volumes) != len(ids) {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		bc.net.SetVolumeLeader(id, 1)
	}
	bc.advance(25 * time.Second)
	if n := bc.net.Transfers(); n != 0 {
		t.Fatalf("%d transfers to members not known to be caught up", n)
	}
}

// TestALeaderInMaintenanceHandsItsVolumesOff: once its node is put in
// maintenance, a leader hands each volume to a caught-up serving voter at
// once (no hold), and the others do not give them back.
func TestALeaderInMaintenanceHandsItsVolumesOff(t *testing.T) {
	bc := newBalanceCluster(t, 3)
	var ids []cluster.GroupID
	for i := range 3 {
		res, err := bc.nodes[1].Submit(context.Background(), createCmd("vol"+strconv.Itoa(i), 1<<20, 3))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Volume.ID)
	}
	bc.eventually("every node serves every volume", func() bool {
		for _, c := range bc.nodes {
			if len(c.Local().Volumes) != len(ids) {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		bc.net.SetVolumeLeader(id, 2)
	}
	bc.net.ReportProgress(true)
	if _, err := bc.nodes[1].Submit(context.Background(),
		cluster.Command{Op: cluster.OpSetNodeState, NodeID: 2, State: cluster.NodeMaintenance}); err != nil {
		t.Fatal(err)
	}
	bc.eventually("node 2 is in maintenance everywhere", func() bool {
		for _, c := range bc.nodes {
			if n := c.State().Nodes[2]; n == nil || n.State != cluster.NodeMaintenance {
				return false
			}
		}
		return true
	})
	bc.advance(2 * time.Second)
	if c := bc.leads(ids); c[2] != 0 || c[1]+c[3] != len(ids) {
		t.Fatalf("leaders %v two passes after node 2 went into maintenance, want none on node 2", c)
	}
	moved := bc.net.Transfers()
	bc.advance(30 * time.Second)
	if c := bc.leads(ids); c[2] != 0 || bc.net.Transfers() != moved {
		t.Fatalf("leaders %v, %d transfers after the handoff: want them to stay off node 2", c, bc.net.Transfers()-moved)
	}
}
