package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

func mustEncode(t *testing.T, c Command) []byte {
	t.Helper()
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func register(id NodeID) Command {
	return Command{Op: OpRegisterNode, Node: &Node{ID: id, Name: id.String(), NVMeAddr: fmt.Sprintf("127.0.0.1:%d", 4419+id)}}
}

func create(name string, rf int, hosts ...string) Command {
	return Command{Op: OpCreateVolume, Create: &CreateVolume{Name: name, Size: 1 << 20, RF: rf, Hosts: hosts,
		UUID: ID16{1, byte(len(name))}, NGUID: ID16{2}, Created: "2026-01-01T00:00:00Z"}}
}

// machineWith applies cmds to a fresh machine and fails on any refusal.
func machineWith(t *testing.T, p Persister, cmds ...Command) *Machine {
	t.Helper()
	m, err := NewMachine(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		applyOK(t, m, c)
	}
	return m
}

func applyOK(t *testing.T, m *Machine, c Command) Result {
	t.Helper()
	res, err := applyCmd(t, m, c)
	if err != nil {
		t.Fatalf("%s: %v", c.Op, err)
	}
	return res
}

// applyCmd applies c at the next index and returns its outcome.
func applyCmd(t *testing.T, m *Machine, c Command) (Result, error) {
	t.Helper()
	c.Request = m.AppliedIndex() + 1000
	ch := m.expect(c.Request)
	if err := m.Apply(context.Background(), m.AppliedIndex()+1, mustEncode(t, c)); err != nil {
		t.Fatal(err)
	}
	o := <-ch
	return o.res, o.err
}

func TestApplyRefusesInvalidCommands(t *testing.T) {
	base := []Command{register(1), register(2), register(3), create("a", 3)}
	tests := []struct {
		name string
		cmd  Command
		want error
	}{
		{"duplicate volume", create("a", 1), ErrExists},
		{"rf above nodes", create("b", 4), ErrInvalid},
		{"rf zero", create("b", 0), ErrInvalid},
		{"bad name", create("Bad Name", 1), ErrInvalid},
		{"name too long", create(string(bytes.Repeat([]byte("x"), 64)), 1), ErrInvalid},
		{"bad host", create("b", 1, "iqn.x"), ErrInvalid},
		{"delete missing", Command{Op: OpDeleteVolume, Volume: "zz"}, ErrNotFound},
		{"resize missing", Command{Op: OpResizeVolume, Volume: "zz", Size: 1 << 21}, ErrNotFound},
		{"shrink", Command{Op: OpResizeVolume, Volume: "a", Size: 4096}, ErrShrinkVolume},
		{"misaligned size", Command{Op: OpResizeVolume, Volume: "a", Size: 1<<21 + 1}, ErrInvalid},
		{"remove absent host", Command{Op: OpRemoveHost, Volume: "a", Host: "nqn.x"}, ErrNotFound},
		{"unknown op", Command{Op: "explode"}, ErrInvalid},
		{"register without node", Command{Op: OpRegisterNode}, ErrInvalid},
		{"create without body", Command{Op: OpCreateVolume}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := machineWith(t, &MemoryPersister{}, base...)
			before := m.State()
			_, err := applyCmd(t, m, tt.cmd)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if m.State() != before {
				t.Error("a refused command replaced the state")
			}
			if m.AppliedIndex() != uint64(len(base)+1) {
				t.Errorf("applied = %d, want the refused entry counted", m.AppliedIndex())
			}
		})
	}
}

func TestApplyMalformedEntryAdvancesIndex(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1))
	for i, junk := range [][]byte{nil, []byte("{"), []byte(`{"op":7}`), {0xff, 0x00}} {
		if err := m.Apply(context.Background(), uint64(i+2), junk); err != nil {
			t.Fatalf("entry %q: %v", junk, err)
		}
	}
	if m.AppliedIndex() != 5 || len(m.State().Nodes) != 1 {
		t.Fatalf("applied %d, nodes %d", m.AppliedIndex(), len(m.State().Nodes))
	}
}

func TestPlacementSpreadsReplicasAndANAGroupsAreReused(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), register(2), register(3))
	load := map[NodeID]int{}
	for i := range 6 {
		res := applyOK(t, m, create(fmt.Sprintf("v%d", i), 1))
		load[res.Volume.Replicas[0]]++
		if res.Volume.ANAGroup != uint32(i+1) || res.Volume.ID != MetadataGroup+GroupID(i+1) {
			t.Errorf("volume %d: ana group %d, id %d", i, res.Volume.ANAGroup, res.Volume.ID)
		}
	}
	for id, n := range load {
		if n != 2 {
			t.Errorf("%v holds %d of 6 single replicas, want 2 each: %v", id, n, load)
		}
	}
	applyOK(t, m, Command{Op: OpDeleteVolume, Volume: "v2"})
	res := applyOK(t, m, create("w", 2))
	if res.Volume.ANAGroup != 3 || res.Volume.ID != MetadataGroup+7 {
		t.Errorf("after a delete: ana group %d (want the freed 3), id %d (want 7, never reused)", res.Volume.ANAGroup, res.Volume.ID)
	}
	if len(res.Volume.Replicas) != 2 || res.Volume.Replicas[0] == res.Volume.Replicas[1] {
		t.Errorf("replicas %v", res.Volume.Replicas)
	}
}

func TestANAGroupsRunOut(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), create("v1", 1))
	// Every Apply clones and saves the whole state: fill the other groups
	// directly rather than with MaxANAGroups creates.
	s := m.State().clone()
	for g := uint32(2); g <= MaxANAGroups; g++ {
		v := s.Volumes["v1"].clone()
		v.Name, v.ID, v.ANAGroup = fmt.Sprintf("v%d", g), s.NextGroup, g
		s.Volumes[v.Name], s.NextGroup = v, s.NextGroup+1
	}
	m.cur.Store(&applied{state: s, index: m.AppliedIndex()})
	if _, err := applyCmd(t, m, create("one-too-many", 1)); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("err = %v, want ErrNoCapacity", err)
	}
	applyOK(t, m, Command{Op: OpDeleteVolume, Volume: "v4000"})
	if res := applyOK(t, m, create("w", 1)); res.Volume.ANAGroup != 4000 {
		t.Fatalf("ANA group %d, want the freed 4000", res.Volume.ANAGroup)
	}
}

func TestHostsAndResize(t *testing.T) {
	m := machineWith(t, &MemoryPersister{}, register(1), register(2), create("a", 2))
	v := m.State().Volumes["a"]
	if v.AllowAnyHost || len(v.Hosts) != 0 {
		t.Fatalf("a volume created without hosts admits nobody; got %+v", v)
	}
	res := applyOK(t, m, Command{Op: OpAddHost, Volume: "a", Host: "nqn.h1"})
	if res.Volume.AllowAnyHost || len(res.Volume.Hosts) != 1 || res.Note != "" {
		t.Fatalf("after add_host: %+v", res.Volume)
	}
	applyOK(t, m, Command{Op: OpAddHost, Volume: "a", Host: "nqn.h1"}) // idempotent
	res = applyOK(t, m, Command{Op: OpRemoveHost, Volume: "a", Host: "nqn.h1"})
	if res.Note == "" || res.Volume.AllowAnyHost {
		t.Errorf("removing the last host: note %q, any %v", res.Note, res.Volume.AllowAnyHost)
	}
	applyOK(t, m, Command{Op: OpResizeVolume, Volume: "a", Size: 2 << 20})
	v = m.State().Volumes["a"]
	if v.Size != 1<<20 || v.PendingSize != 2<<20 {
		t.Fatalf("resize must wait for the replicas: %+v", v)
	}
	grown := func(n NodeID, id GroupID) Command {
		return Command{Op: OpReplicaGrown, Volume: "a", ID: id, NodeID: n, Size: 2 << 20}
	}
	applyOK(t, m, grown(v.Replicas[0], v.ID))
	applyOK(t, m, grown(v.Replicas[1], v.ID+1)) // a report about another volume
	applyOK(t, m, grown(9, v.ID))               // not a replica
	if m.State().Volumes["a"].Size != 1<<20 {
		t.Fatal("resized before every replica grew")
	}
	applyOK(t, m, grown(v.Replicas[1], v.ID))
	if v := m.State().Volumes["a"]; v.Size != 2<<20 || v.PendingSize != 0 {
		t.Fatalf("after all replicas grew: %+v", v)
	}
	applyOK(t, m, Command{Op: OpResizeVolume, Volume: "a", Size: 2 << 20}) // same size: no-op
}

func TestMachineSurvivesRestartAndSkipsReplayedEntries(t *testing.T) {
	p := &MemoryPersister{}
	m := machineWith(t, p, register(1), create("a", 1))
	m2, err := NewMachine(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m2.AppliedIndex() != 2 || m2.State().Volumes["a"] == nil {
		t.Fatalf("restored applied %d, volumes %v", m2.AppliedIndex(), m2.State().Volumes)
	}
	// Replaying an applied entry changes nothing.
	if err := m2.Apply(context.Background(), 2, mustEncode(t, Command{Op: OpDeleteVolume, Volume: "a"})); err != nil {
		t.Fatal(err)
	}
	if m2.State().Volumes["a"] == nil {
		t.Fatal("a replayed entry was applied twice")
	}
	_ = m
}

func TestSaveFailureFailsApply(t *testing.T) {
	p := &MemoryPersister{}
	m := machineWith(t, p, register(1))
	p.Fail = errors.New("disk on fire")
	if err := m.Apply(context.Background(), 2, mustEncode(t, create("a", 1))); err == nil {
		t.Fatal("Apply succeeded although the state could not be saved")
	}
	if m.AppliedIndex() != 1 || m.State().Volumes["a"] != nil {
		t.Fatal("unsaved change became visible")
	}
}

func TestSnapshotRestore(t *testing.T) {
	src := machineWith(t, &MemoryPersister{}, register(1), register(2), create("a", 2, "nqn.h"))
	var buf bytes.Buffer
	if err := src.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	dst := machineWith(t, &MemoryPersister{}, register(7))
	changed := dst.Changed()
	if err := dst.Restore(bytes.NewReader(buf.Bytes()), 42); err != nil {
		t.Fatal(err)
	}
	if dst.AppliedIndex() != 42 || dst.State().Volumes["a"] == nil || dst.State().Nodes[7] != nil {
		t.Fatalf("restored: applied %d state %+v", dst.AppliedIndex(), dst.State())
	}
	select {
	case <-changed:
	default:
		t.Error("Restore did not notify subscribers")
	}
	for _, bad := range []string{"", "{", `{"version":99}`} {
		if err := dst.Restore(bytes.NewReader([]byte(bad)), 43); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Restore(%q) = %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestNewMachineRefusesCorruptRecord(t *testing.T) {
	p := &MemoryPersister{}
	if err := p.Save([]byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMachine(p, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []Command{register(1), create("a", 3, "nqn.h"), {Op: OpResizeVolume, Volume: "a", Size: 8192}} {
		b, _ := c.Encode()
		f.Add(b)
	}
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := machineWith(t, &MemoryPersister{}, register(1), register(2))
		if err := m.Apply(context.Background(), 3, b); err != nil {
			t.Fatal(err)
		}
		// Whatever was applied, the state still encodes and restores.
		var buf bytes.Buffer
		if err := m.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
		if err := machineWith(t, &MemoryPersister{}).Restore(&buf, 3); err != nil {
			t.Fatal(err)
		}
	})
}
