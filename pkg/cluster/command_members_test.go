package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// join is a join_node command for a node at addresses 10.0.0.i.
func join(i int) Command {
	return Command{Op: OpJoinNode, Node: &Node{Name: fmt.Sprintf("new%d", i),
		NVMeAddr: fmt.Sprintf("10.0.0.%d:4420", i), RaftAddr: fmt.Sprintf("10.0.0.%d:9520", i), APIAddr: fmt.Sprintf("10.0.0.%d:9420", i)}}
}

func setState(id NodeID, state string) Command {
	return Command{Op: OpSetNodeState, NodeID: id, State: state}
}

func moveTo(v *Volume, nodes ...NodeID) Command {
	return Command{Op: OpMoveReplicas, Volume: v.Name, ID: v.ID, Nodes: nodes}
}

func changed(v *Volume, voters []NodeID, learners ...NodeID) Command {
	return Command{Op: OpReplicasChanged, Volume: v.Name, ID: v.ID, Nodes: voters, Learners: learners}
}

func TestMemberCommandsValidate(t *testing.T) {
	ok := []Command{
		join(1),
		setState(2, NodeMaintenance), setState(2, NodeDraining), setState(2, NodeOut), setState(2, NodeActive),
		{Op: OpRemoveNode, NodeID: 2},
		{Op: OpReplaceNode, NodeID: 2, Nodes: []NodeID{4}},
		{Op: OpMoveReplicas, Volume: "a", ID: 2, Nodes: []NodeID{1, 2, 3}},
		{Op: OpReplicasChanged, Volume: "a", ID: 2, Nodes: []NodeID{1, 2}, Learners: []NodeID{3}},
		// A leader that leaves has the old and the new voters for a while.
		{Op: OpReplicasChanged, Volume: "a", ID: 2, Nodes: []NodeID{1, 2, 3, 4, 5, 6}},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%s %+v: %v, want valid", c.Op, c, err)
		}
	}
	noAddr := join(1)
	noAddr.Node.RaftAddr = ""
	bad := []struct {
		name string
		cmd  Command
	}{
		{"join without node", Command{Op: OpJoinNode}},
		{"join without raft address", noAddr},
		{"unknown node state", setState(2, "asleep")},
		{"empty node state", setState(2, "")},
		{"set state without node", setState(0, NodeMaintenance)},
		{"remove without node", Command{Op: OpRemoveNode}},
		{"replace without new node", Command{Op: OpReplaceNode, NodeID: 2}},
		{"replace into itself", Command{Op: OpReplaceNode, NodeID: 2, Nodes: []NodeID{2}}},
		{"replace into two", Command{Op: OpReplaceNode, NodeID: 2, Nodes: []NodeID{3, 4}}},
		{"replace without old node", Command{Op: OpReplaceNode, Nodes: []NodeID{3}}},
		{"move with bad name", Command{Op: OpMoveReplicas, Volume: "A!", Nodes: []NodeID{1}}},
		{"move to no node", Command{Op: OpMoveReplicas, Volume: "a"}},
		{"move to four nodes", Command{Op: OpMoveReplicas, Volume: "a", Nodes: []NodeID{1, 2, 3, 4}}},
		{"move naming a node twice", Command{Op: OpMoveReplicas, Volume: "a", Nodes: []NodeID{1, 2, 1}}},
		{"changed with seven voters", Command{Op: OpReplicasChanged, Volume: "a", Nodes: []NodeID{1, 2, 3, 4, 5, 6, 7}}},
		{"changed with a learner twice", Command{Op: OpReplicasChanged, Volume: "a", Nodes: []NodeID{1}, Learners: []NodeID{3, 3}}},
	}
	for _, tt := range bad {
		if err := tt.cmd.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", tt.name, err)
		}
	}
}

// TestMemberCommandsRefusedLeaveTheState applies refused membership
// commands through the machine: each is refused with its class and the
// state stays as it was.
func TestMemberCommandsRefusedLeaveTheState(t *testing.T) {
	base := []Command{register(1), register(2), register(3), register(4), setState(4, NodeMaintenance), create("a", 3)}
	m := machineWith(t, &MemoryPersister{}, base...)
	a := m.State().Volumes["a"]
	tests := []struct {
		name string
		cmd  Command
		want error
	}{
		{"set state of unknown node", setState(9, NodeOut), ErrNotFound},
		{"remove unknown node", Command{Op: OpRemoveNode, NodeID: 9}, ErrNotFound},
		{"replace unknown node", Command{Op: OpReplaceNode, NodeID: 9, Nodes: []NodeID{1}}, ErrNotFound},
		{"replace into unknown node", Command{Op: OpReplaceNode, NodeID: 1, Nodes: []NodeID{9}}, ErrNotFound},
		{"replace into a node in maintenance", Command{Op: OpReplaceNode, NodeID: 1, Nodes: []NodeID{4}}, ErrInvalid},
		{"move unknown volume", Command{Op: OpMoveReplicas, Volume: "zz", ID: a.ID, Nodes: []NodeID{1}}, ErrNotFound},
		{"move with another group ID", Command{Op: OpMoveReplicas, Volume: "a", ID: a.ID + 1, Nodes: []NodeID{1}}, ErrNotFound},
		{"move to unknown node", moveTo(a, 1, 2, 9), ErrInvalid},
		{"move to a node in maintenance", moveTo(a, 1, 2, 4), ErrInvalid},
		{"changed with another group ID", Command{Op: OpReplicasChanged, Volume: "a", ID: a.ID + 1, Nodes: []NodeID{1}}, ErrNotFound},
		{"join at a used address", join(1), nil}, // set up below
	}
	for _, tt := range tests[:len(tests)-1] {
		t.Run(tt.name, func(t *testing.T) {
			before := m.State()
			_, err := applyCmd(t, m, tt.cmd)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if m.State() != before {
				t.Error("a refused command replaced the state")
			}
		})
	}
	applyOK(t, m, join(1))
	if _, err := applyCmd(t, m, join(1)); !errors.Is(err, ErrExists) {
		t.Errorf("a second join at the same addresses: %v, want ErrExists", err)
	}
}

func TestMoveReplicasRefusesNodesThatTakeNoReplicas(t *testing.T) {
	for _, state := range []string{NodeMaintenance, NodeDraining, NodeOut} {
		t.Run(state, func(t *testing.T) {
			m := machineWith(t, &MemoryPersister{}, register(1), register(2), register(3), create("a", 3),
				register(4), setState(4, state))
			a := m.State().Volumes["a"]
			_, err := applyCmd(t, m, moveTo(a, 1, 2, 4))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), state) {
				t.Fatalf("move onto a node that is %s: %v, want ErrInvalid naming the state", state, err)
			}
			// A replica it already holds may stay in Want.
			applyOK(t, m, setState(3, state))
			res := applyOK(t, m, moveTo(a, 3, 2, 1))
			if res.Volume.Want != nil {
				t.Errorf("Want equal to the replicas: %v, want none", res.Volume.Want)
			}
		})
	}
}

func TestMoveReplicasSetsWantAndReplicasChangedClearsIt(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), register(2), register(3), create("a", 3), register(4))
	a := m.State().Volumes["a"]
	if !slices.Equal(a.Replicas, []NodeID{1, 2, 3}) {
		t.Fatalf("replicas %v", a.Replicas)
	}
	res := applyOK(t, m, moveTo(a, 4, 2, 1))
	if !slices.Equal(res.Volume.Want, []NodeID{1, 2, 4}) {
		t.Fatalf("Want %v, want [1 2 4] sorted", res.Volume.Want)
	}
	// Node 4 added as a learner: not reached yet.
	res = applyOK(t, m, changed(a, []NodeID{3, 1, 2}, 4))
	if v := res.Volume; !slices.Equal(v.Replicas, []NodeID{1, 2, 3}) || !slices.Equal(v.Learners, []NodeID{4}) ||
		!slices.Equal(v.Want, []NodeID{1, 2, 4}) {
		t.Fatalf("after the learner: replicas %v learners %v want %v", v.Replicas, v.Learners, v.Want)
	}
	// Promoted with node 3 removed: reached, Want cleared.
	res = applyOK(t, m, changed(a, []NodeID{4, 2, 1}))
	if v := res.Volume; !slices.Equal(v.Replicas, []NodeID{1, 2, 4}) || v.Learners != nil || v.Want != nil {
		t.Fatalf("after the promotion: replicas %v learners %v want %v", v.Replicas, v.Learners, v.Want)
	}
	if got := m.State().Volumes["a"]; got.Want != nil || got.HasReplica(3) {
		t.Fatalf("state after the move: %+v", got)
	}
	// A configuration other than Want keeps Want.
	applyOK(t, m, moveTo(a, 1, 2, 3))
	res = applyOK(t, m, changed(a, []NodeID{1, 2}))
	if !slices.Equal(res.Volume.Want, []NodeID{1, 2, 3}) || !slices.Equal(res.Volume.Replicas, []NodeID{1, 2}) {
		t.Fatalf("an intermediate configuration: %+v", res.Volume)
	}
}

func TestJoinNodeAssignsIncreasingIDsNeverReused(t *testing.T) {
	m := machineWith(t, &MemoryPersister{})
	for i, want := range []NodeID{1, 2, 3} {
		res := applyOK(t, m, join(i+1))
		if res.Node == nil || res.Node.ID != want || res.Node.State != NodeActive {
			t.Fatalf("join %d: %+v, want %v active", i+1, res.Node, want)
		}
	}
	applyOK(t, m, Command{Op: OpRemoveNode, NodeID: 3})
	if res := applyOK(t, m, join(4)); res.Node.ID != 4 {
		t.Fatalf("join after removing node3: got %v, want node4 (IDs are never reused)", res.Node.ID)
	}
	// A node registered from the configuration with a higher ID pushes
	// the next one past it.
	applyOK(t, m, register(9))
	if res := applyOK(t, m, join(5)); res.Node.ID != 10 {
		t.Fatalf("join after node9 registered: got %v, want node10", res.Node.ID)
	}
	// Remove the highest, then restart from the persisted record: its ID
	// stays used.
	applyOK(t, m, Command{Op: OpRemoveNode, NodeID: 10})
	var snap bytes.Buffer
	if err := m.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	m2 := machineWith(t, &MemoryPersister{})
	if err := m2.Restore(&snap, 100); err != nil {
		t.Fatal(err)
	}
	if res := applyOK(t, m2, join(6)); res.Node.ID != 11 {
		t.Fatalf("join after node10 was removed and the state restored: got %v, want node11", res.Node.ID)
	}
	// A node that registered (never joined) and was removed: its ID
	// stays used too.
	applyOK(t, m2, register(20))
	applyOK(t, m2, Command{Op: OpRemoveNode, NodeID: 20})
	if res := applyOK(t, m2, join(7)); res.Node.ID != 21 {
		t.Fatalf("join after node20 registered and was removed: got %v, want node21", res.Node.ID)
	}
}

func TestRemoveNodeRefusedWhileItHoldsReplicas(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), register(2), register(3), register(4),
		create("a", 3), create("b", 3))
	s := m.State()
	a, b := s.Volumes["a"], s.Volumes["b"]
	// Node 4 holds nothing yet; have it in a's Want: it counts as held.
	spare := NodeID(0)
	for id := NodeID(1); id <= 4; id++ {
		if !a.HasReplica(id) {
			spare = id
		}
	}
	both := NodeID(0)
	for _, id := range a.Replicas {
		if b.IsVoter(id) {
			both = id
			break
		}
	}
	if spare == 0 || both == 0 {
		t.Fatalf("placement: a on %v, b on %v", a.Replicas, b.Replicas)
	}
	_, err := applyCmd(t, m, Command{Op: OpRemoveNode, NodeID: both})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "[a b]") {
		t.Fatalf("remove %v holding a and b: %v, want ErrInvalid naming [a b]", both, err)
	}
	if !b.HasReplica(spare) {
		applyOK(t, m, moveTo(a, append(slices.DeleteFunc(slices.Clone(a.Replicas), func(id NodeID) bool { return id == both }), spare)...))
		_, err = applyCmd(t, m, Command{Op: OpRemoveNode, NodeID: spare})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "[a]") {
			t.Fatalf("remove %v, in a's Want: %v, want ErrInvalid naming [a]", spare, err)
		}
	}
	// Once no volume holds it, it goes.
	applyOK(t, m, Command{Op: OpDeleteVolume, Volume: "a"})
	applyOK(t, m, Command{Op: OpDeleteVolume, Volume: "b"})
	applyOK(t, m, Command{Op: OpRemoveNode, NodeID: both})
	if m.State().Nodes[both] != nil {
		t.Fatalf("%v still in the state after remove_node", both)
	}
}

func TestReplaceNodeSetsWantAndDrainsTheOldNode(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), register(2), register(3), register(4), register(5))
	// Place by hand so that every case is there: a on 1,2,3; b on 2,3,4
	// (node 4, the new one, holds it already); c on 4,5; d on 1,3,5 being
	// moved to 2,3,5 (off node 1 already); e on 1,2,3 being moved to
	// 2,3,4.
	s := m.State().clone()
	for i, v := range []*Volume{
		{Name: "a", Replicas: []NodeID{1, 2, 3}},
		{Name: "b", Replicas: []NodeID{2, 3, 4}},
		{Name: "c", Replicas: []NodeID{4, 5}},
		{Name: "d", Replicas: []NodeID{1, 3, 5}, Want: []NodeID{2, 3, 5}},
		{Name: "e", Replicas: []NodeID{1, 2, 3}, Want: []NodeID{2, 3, 4}},
	} {
		v.ID, v.ANAGroup, v.Size, v.State = s.NextGroup, uint32(i+1), 1<<20, VolumeActive
		s.Volumes[v.Name], s.NextGroup = v, s.NextGroup+1
	}
	m.cur.Store(&applied{state: s, index: m.AppliedIndex()})

	res := applyOK(t, m, Command{Op: OpReplaceNode, NodeID: 1, Nodes: []NodeID{4}})
	if res.Node == nil || res.Node.ID != 1 || res.Node.State != NodeDraining {
		t.Fatalf("result node %+v, want node1 draining", res.Node)
	}
	got := m.State()
	if got.Nodes[1].State != NodeDraining {
		t.Errorf("node1 is %s, want draining", got.Nodes[1].State)
	}
	for name, want := range map[string][]NodeID{
		"a": {2, 3, 4}, // old replaced by new
		"b": nil,       // not on the old node
		"c": nil,       // not on the old node
		"d": {2, 3, 5}, // already moving off the old node: Want kept
		"e": {2, 3, 4}, // already moving to 2,3,4: holds node 4 in Want
	} {
		if v := got.Volumes[name]; !slices.Equal(v.Want, want) {
			t.Errorf("volume %s (replicas %v): Want %v, want %v", name, v.Replicas, v.Want, want)
		}
	}
	for _, v := range got.Volumes {
		if len(v.Want) > MaxReplicationFactor {
			t.Errorf("volume %s: Want %v has more than %d nodes", v.Name, v.Want, MaxReplicationFactor)
		}
	}
}

func TestRegisterNodeKeepsAdminState(t *testing.T) {
	tests := []struct{ before, after string }{
		{NodeActive, NodeActive},
		{NodeMaintenance, NodeMaintenance},
		{NodeDraining, NodeDraining},
		{NodeOut, NodeActive}, // back from the dead: it takes replicas again
	}
	for _, tt := range tests {
		t.Run(tt.before, func(t *testing.T) {
			reg := register(2)
			reg.Node.Capacity = 1 << 40
			m := machineWith(t, &MemoryPersister{}, register(1), reg, setState(2, tt.before))
			again := register(2)
			again.Node.NVMeAddr = "10.9.9.9:4420" // a new address; capacity not reported
			res := applyOK(t, m, again)
			n := m.State().Nodes[2]
			if n.State != tt.after || res.Node.State != tt.after {
				t.Errorf("re-registered from %s: state %s (result %s), want %s", tt.before, n.State, res.Node.State, tt.after)
			}
			if n.NVMeAddr != "10.9.9.9:4420" || n.Capacity != 1<<40 {
				t.Errorf("re-registered: address %s capacity %d, want the new address and the old capacity", n.NVMeAddr, n.Capacity)
			}
		})
	}
	m := machineWith(t, &MemoryPersister{}, register(1))
	if n := m.State().Nodes[1]; n.State != NodeActive {
		t.Errorf("a new node registers %q, want active", n.State)
	}
}

func TestSetNodeStateThroughTheMachine(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), register(2))
	for _, st := range []string{NodeMaintenance, NodeDraining, NodeOut, NodeActive} {
		res := applyOK(t, m, setState(2, st))
		if res.Node == nil || res.Node.State != st || m.State().Nodes[2].State != st {
			t.Fatalf("set_node_state %s: result %+v, state %s", st, res.Node, m.State().Nodes[2].State)
		}
	}
}

func TestMemberCommandJSONRoundTrip(t *testing.T) {
	cmds := []Command{
		join(3),
		setState(2, NodeDraining),
		{Op: OpRemoveNode, NodeID: 7},
		{Op: OpReplaceNode, NodeID: 2, Nodes: []NodeID{5}},
		{Op: OpMoveReplicas, Volume: "a", ID: 9, Nodes: []NodeID{1, 4, 5}},
		{Op: OpReplicasChanged, Volume: "a", ID: 9, Nodes: []NodeID{1, 4}, Learners: []NodeID{5}, Request: 77},
	}
	for _, c := range cmds {
		b, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v\njson %s", c.Op, got, c, b)
		}
	}
	// The fields' names on the wire are part of the log format.
	b, _ := cmds[5].Encode()
	for _, want := range []string{`"op":"replicas_changed"`, `"nodes":[1,4]`, `"learners":[5]`, `"id":9`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("encoded %s lacks %s", b, want)
		}
	}
	b, _ = cmds[1].Encode()
	if !bytes.Contains(b, []byte(`"state":"draining"`)) || !bytes.Contains(b, []byte(`"node_id":2`)) {
		t.Errorf("encoded set_node_state %s", b)
	}
	// The state's new fields survive a snapshot.
	src := machineWith(t, &MemoryPersister{}, register(1), register(2), register(3), create("a", 2), join(4),
		Command{Op: OpRemoveNode, NodeID: 4})
	a := src.State().Volumes["a"]
	var spare NodeID
	for id := NodeID(1); id <= 3; id++ {
		if !a.HasReplica(id) {
			spare = id
		}
	}
	want := sortedIDs([]NodeID{a.Replicas[0], spare})
	applyOK(t, src, moveTo(a, want...))
	applyOK(t, src, changed(a, a.Replicas, spare))
	var snap bytes.Buffer
	if err := src.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	dst := machineWith(t, &MemoryPersister{})
	if err := dst.Restore(&snap, 50); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dst.State(), src.State()) {
		t.Errorf("restored state differs:\n got %+v\nwant %+v", dst.State(), src.State())
	}
	if v := dst.State().Volumes["a"]; !slices.Equal(v.Want, want) || !slices.Equal(v.Learners, []NodeID{spare}) ||
		dst.State().NextNode != 5 {
		t.Errorf("restored: want %v learners %v next node %v", v.Want, v.Learners, dst.State().NextNode)
	}
}
