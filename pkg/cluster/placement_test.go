package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// placeNode is a node for the placement tests: active unless state says
// otherwise.
type placeNode struct {
	id       NodeID
	zone     string
	state    string
	capacity int64
}

// placeState builds a state of nodes and volumes directly (placement reads
// the state alone).
func placeState(nodes []placeNode, vols ...*Volume) *State {
	s := NewState()
	for _, pn := range nodes {
		st := pn.state
		if st == "" {
			st = NodeActive
		}
		s.Nodes[pn.id] = &Node{ID: pn.id, Name: pn.id.String(), Zone: pn.zone, State: st, Capacity: pn.capacity}
	}
	for _, v := range vols {
		s.Volumes[v.Name] = v
		s.NextGroup = max(s.NextGroup, v.ID+1)
	}
	return s
}

func activeNodes(ids ...NodeID) []placeNode {
	var out []placeNode
	for _, id := range ids {
		out = append(out, placeNode{id: id})
	}
	return out
}

func mustPick(t *testing.T, s *State, n int, id GroupID, chosen, exclude []NodeID) []NodeID {
	t.Helper()
	got, err := s.pick(n, id, chosen, exclude)
	if err != nil {
		t.Fatalf("pick(%d, %v, %v, %v): %v", n, id, chosen, exclude, err)
	}
	if len(got) != n {
		t.Fatalf("pick(%d, ...) = %v: want %d nodes", n, got, n)
	}
	return got
}

func TestPickPrefersDistinctZones(t *testing.T) {
	// Zones a, b, c with two nodes each, listed so that the ID order
	// alone would put two replicas in one zone.
	s := placeState([]placeNode{
		{id: 1, zone: "a"}, {id: 2, zone: "a"}, {id: 3, zone: "b"},
		{id: 4, zone: "b"}, {id: 5, zone: "c"}, {id: 6, zone: "c"},
	})
	for id := GroupID(2); id < 14; id++ {
		got := mustPick(t, s, 3, id, nil, nil)
		zones := map[string]bool{}
		for _, n := range got {
			zones[s.Nodes[n].Zone] = true
		}
		if len(zones) != 3 {
			t.Errorf("group %v: picked %v in zones %v, want 3 distinct zones", id, got, zones)
		}
	}
	// The zone of a chosen replica counts too: next to a replica in zone
	// a, the two new ones go to b and c.
	for id := GroupID(2); id < 8; id++ {
		got := mustPick(t, s, 2, id, []NodeID{1}, nil)
		if z0, z1 := s.Nodes[got[0]].Zone, s.Nodes[got[1]].Zone; z0 == "a" || z1 == "a" || z0 == z1 {
			t.Errorf("group %v: beside node1 (zone a) picked %v (zones %s, %s)", id, got, z0, z1)
		}
	}
}

func TestPickNodesWithoutZoneAreEachAZone(t *testing.T) {
	// Three nodes share zone a; node 4 has none, so it is a zone of its
	// own and must be among any two replicas.
	s := placeState([]placeNode{{id: 1, zone: "a"}, {id: 2, zone: "a"}, {id: 3, zone: "a"}, {id: 4}})
	for id := GroupID(2); id < 10; id++ {
		if got := mustPick(t, s, 2, id, nil, nil); !slices.Contains(got, 4) {
			t.Errorf("group %v: picked %v, want node4 (its own zone) among them", id, got)
		}
	}
}

func TestPickRanksByFreeCapacity(t *testing.T) {
	const g = 1 << 30
	nodes := []placeNode{{id: 1, capacity: 10 * g}, {id: 2, capacity: 30 * g}, {id: 3, capacity: 20 * g}}
	for id := GroupID(2); id < 8; id++ {
		if got := mustPick(t, placeState(nodes), 3, id, nil, nil); !slices.Equal(got, []NodeID{2, 3, 1}) {
			t.Errorf("group %v: picked %v, want most free first: [2 3 1]", id, got)
		}
	}
	// A volume of 25 GiB to be held by node 2 (in Want) leaves it 5 GiB:
	// now node 3 has the most free, then node 1.
	big := &Volume{Name: "big", ID: 2, Size: 5 * g, PendingSize: 25 * g, Replicas: []NodeID{}, Want: []NodeID{2}}
	s := placeState(nodes, big)
	if got := mustPick(t, s, 2, 3, nil, nil); !slices.Equal(got, []NodeID{3, 1}) {
		t.Errorf("with node2 holding 25 GiB: picked %v, want [3 1]", got)
	}
}

func TestPickLoadBreaksTies(t *testing.T) {
	// Equal capacity: the node with the fewest replicas wins, whatever
	// the group's rotation.
	nodes := []placeNode{{id: 1, capacity: 1 << 40}, {id: 2, capacity: 1 << 40}, {id: 3, capacity: 1 << 40}}
	vols := []*Volume{
		{Name: "x", ID: 2, Replicas: []NodeID{1, 2}},
		{Name: "y", ID: 3, Replicas: []NodeID{1}, Learners: []NodeID{2}}, // a learner counts
		{Name: "z", ID: 4, Replicas: []NodeID{1}},
	}
	s := placeState(nodes, vols...)
	if l := s.loads(); l[1].replicas != 3 || l[2].replicas != 2 || l[3].replicas != 0 {
		t.Fatalf("loads: node1 %d node2 %d node3 %d, want 3 2 0", l[1].replicas, l[2].replicas, l[3].replicas)
	}
	for id := GroupID(5); id < 11; id++ {
		if got := mustPick(t, s, 3, id, nil, nil); !slices.Equal(got, []NodeID{3, 2, 1}) {
			t.Errorf("group %v: picked %v, want fewest replicas first: [3 2 1]", id, got)
		}
	}
	// Unknown capacity (0) ranks by load alone.
	s = placeState(activeNodes(1, 2, 3), vols...)
	if got := mustPick(t, s, 1, 7, nil, nil); !slices.Equal(got, []NodeID{3}) {
		t.Errorf("capacity unknown: picked %v, want [3]", got)
	}
}

func TestPickRotatesAmongEqualNodes(t *testing.T) {
	// Equal nodes share the work: successive groups start on different
	// nodes.
	s := placeState(activeNodes(1, 2, 3))
	first := map[NodeID]bool{}
	for id := GroupID(2); id < 5; id++ {
		first[mustPick(t, s, 1, id, nil, nil)[0]] = true
	}
	if len(first) != 3 {
		t.Errorf("three groups on three equal nodes started on %v, want every node once", first)
	}
}

func TestPickNeverChoosesNodesThatDoNotServe(t *testing.T) {
	nodes := []placeNode{
		{id: 1}, {id: 2, state: NodeMaintenance}, {id: 3, state: NodeDraining},
		{id: 4, state: NodeOut}, {id: 5}, {id: 6, state: NodeOut},
	}
	s := placeState(nodes)
	for id := GroupID(2); id < 10; id++ {
		got := mustPick(t, s, 2, id, nil, nil)
		if slices.Sort(got); !slices.Equal(got, []NodeID{1, 5}) {
			t.Errorf("group %v: picked %v, want the active nodes [1 5]", id, got)
		}
	}
	_, err := s.pick(3, 2, nil, nil)
	if !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("rf 3 with 2 active nodes: err %v, want ErrNoCapacity", err)
	}
	for _, want := range []string{"1 more node", "1 maintenance", "1 draining", "2 out"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Excluded and chosen nodes are not reasons.
	_, err = placeState(activeNodes(1, 2)).pick(1, 2, []NodeID{1}, []NodeID{2})
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "no other node") {
		t.Errorf("nothing left: err %v, want ErrNoCapacity saying no other node", err)
	}
}

func TestCreateRefusalNamesTheNodeStates(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), register(2), register(3),
		Command{Op: OpSetNodeState, NodeID: 3, State: NodeMaintenance})
	_, err := applyCmd(t, m, create("a", 3))
	if !errors.Is(err, ErrNoCapacity) || !strings.Contains(err.Error(), "1 maintenance") ||
		!strings.Contains(err.Error(), "2 registered take replicas") {
		t.Fatalf("rf 3 with a node in maintenance: %v", err)
	}
}

// TestPickIsDeterministic builds the same state many times (map order
// differs each time) and expects the same answer from every one.
func TestPickIsDeterministic(t *testing.T) {
	build := func() *State {
		var nodes []placeNode
		for i := 1; i <= 12; i++ {
			nodes = append(nodes, placeNode{id: NodeID(i), zone: fmt.Sprintf("z%d", i%4), capacity: int64(i%3) << 30})
		}
		return placeState(nodes,
			&Volume{Name: "a", ID: 2, Size: 1 << 30, Replicas: []NodeID{1, 2, 3}},
			&Volume{Name: "b", ID: 3, Size: 1 << 29, Replicas: []NodeID{4, 5}, Want: []NodeID{4, 5, 6}})
	}
	for id := GroupID(4); id < 20; id++ {
		want := mustPick(t, build(), 3, id, nil, nil)
		for range 20 {
			if got := mustPick(t, build(), 3, id, nil, nil); !slices.Equal(got, want) {
				t.Fatalf("group %v: picked %v, earlier %v from the same state", id, got, want)
			}
		}
	}
}

func TestWantFor(t *testing.T) {
	nodes := []placeNode{
		{id: 1}, {id: 2}, {id: 3}, {id: 4}, {id: 5, state: NodeMaintenance},
		{id: 6, state: NodeDraining}, {id: 7, state: NodeOut},
	}
	tests := []struct {
		name     string
		replicas []NodeID
		want     []NodeID // nil: nothing to do
		spare    []NodeID // one of these replaces each lost replica
	}{
		{"all active", []NodeID{1, 2, 3}, nil, nil},
		{"maintenance kept", []NodeID{1, 2, 5}, nil, nil},
		{"out replaced", []NodeID{1, 2, 7}, []NodeID{1, 2}, []NodeID{3, 4}},
		{"draining replaced", []NodeID{1, 6, 3}, []NodeID{1, 3}, []NodeID{2, 4}},
		{"missing node replaced", []NodeID{1, 2, 9}, []NodeID{1, 2}, []NodeID{3, 4}},
		{"maintenance kept, out replaced", []NodeID{5, 7, 1}, []NodeID{1, 5}, []NodeID{2, 3, 4}},
		{"two lost", []NodeID{6, 7, 1}, []NodeID{1}, []NodeID{2, 3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &Volume{Name: "v", ID: 5, Replicas: tt.replicas}
			s := placeState(nodes, v)
			got, err := s.wantFor(v)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if got != nil {
					t.Fatalf("wantFor(%v) = %v, want nil (nothing to move)", tt.replicas, got)
				}
				return
			}
			if len(got) != len(tt.replicas) || !slices.IsSorted(got) {
				t.Fatalf("wantFor(%v) = %v: want %d nodes, sorted", tt.replicas, got, len(tt.replicas))
			}
			for _, k := range tt.want {
				if !slices.Contains(got, k) {
					t.Errorf("wantFor(%v) = %v dropped %v, which it must keep", tt.replicas, got, k)
				}
			}
			for _, n := range got {
				if !slices.Contains(tt.want, n) && !slices.Contains(tt.spare, n) {
					t.Errorf("wantFor(%v) = %v chose %v, want one of the active spares %v", tt.replicas, got, n, tt.spare)
				}
			}
		})
	}
}

func TestWantForWithoutASpareSaysWhy(t *testing.T) {
	v := &Volume{Name: "v", ID: 2, Replicas: []NodeID{1, 2, 3}}
	s := placeState([]placeNode{{id: 1}, {id: 2}, {id: 3, state: NodeOut}, {id: 4, state: NodeMaintenance}}, v)
	want, err := s.wantFor(v)
	if !errors.Is(err, ErrNoCapacity) || want != nil {
		t.Fatalf("wantFor = %v, %v: want ErrNoCapacity", want, err)
	}
	// Node 3, out, is excluded as a replica of v; node 4 is the reason.
	if !strings.Contains(err.Error(), "1 maintenance") {
		t.Errorf("error %q does not name the node in maintenance", err)
	}
}

func TestWantHealthy(t *testing.T) {
	nodes := []placeNode{{id: 1}, {id: 2}, {id: 3}, {id: 4, state: NodeMaintenance}, {id: 5, state: NodeOut}, {id: 6, state: NodeDraining}}
	tests := []struct {
		replicas, want []NodeID
		ok             bool
	}{
		{[]NodeID{1, 2, 4}, []NodeID{1, 2, 3}, true},
		{[]NodeID{1, 2, 4}, []NodeID{1, 2, 4}, true},  // a voter in maintenance keeps its replica
		{[]NodeID{1, 2, 3}, []NodeID{1, 2, 4}, false}, // node 4 would be a new replica
		{[]NodeID{1, 2, 4}, []NodeID{1, 2, 5}, false},
		{[]NodeID{1, 2, 4}, []NodeID{1, 2, 6}, false},
		{[]NodeID{1, 2, 4}, []NodeID{1, 2, 9}, false},
	}
	for _, tt := range tests {
		v := &Volume{Name: "v", ID: 2, Replicas: tt.replicas, Want: tt.want}
		if got := placeState(nodes, v).wantHealthy(v); got != tt.ok {
			t.Errorf("wantHealthy(want %v, replicas %v) = %v, want %v", tt.want, v.Replicas, got, tt.ok)
		}
	}
}

func TestLoadsCountEachHolderOnce(t *testing.T) {
	s := placeState(activeNodes(1, 2, 3),
		&Volume{Name: "a", ID: 2, Size: 100, PendingSize: 300, Replicas: []NodeID{1, 2}, Learners: []NodeID{3}, Want: []NodeID{1, 2, 3}},
		&Volume{Name: "b", ID: 3, Size: 50, Replicas: []NodeID{1, 9}}) // node 9 is unknown
	l := s.loads()
	for id, want := range map[NodeID]struct {
		replicas int
		used     int64
	}{1: {2, 350}, 2: {1, 300}, 3: {1, 300}} {
		if l[id].replicas != want.replicas || l[id].used != want.used {
			t.Errorf("%v: %d replicas, %d used; want %d, %d", id, l[id].replicas, l[id].used, want.replicas, want.used)
		}
	}
	if len(l) != 3 {
		t.Errorf("loads has %d nodes, want the 3 known", len(l))
	}
}
