package cluster

import (
	"reflect"
	"testing"

	"basalt/target"
)

// remoteSubsystems lists each volume on the ports of its replica nodes
// other than self, with the volume's NQN and host access.
func TestRemoteSubsystems(t *testing.T) {
	s := NewState()
	for _, n := range []Node{
		{ID: 1, NVMeAddr: "192.0.2.1:4420"}, {ID: 2, NVMeAddr: "[2001:db8::2]:4421"},
		{ID: 3, NVMeAddr: "192.0.2.3:4420"}, {ID: 4, NVMeAddr: "no-port"}, {ID: 5, NVMeAddr: ":4420"},
	} {
		s.Nodes[n.ID] = &n
	}
	for _, v := range []*Volume{
		{Name: "a", Replicas: []NodeID{1, 2}, Hosts: []string{"nqn.h1"}},
		{Name: "b", Replicas: []NodeID{3, 2}, AllowAnyHost: true},
		{Name: "c", Replicas: []NodeID{1}},
		{Name: "d", Replicas: []NodeID{4, 5, 6}}, // bad addresses, unknown node
		{Name: "e", Replicas: []NodeID{3, 6}, Hosts: []string{"nqn.h1", "nqn.h2"}},
	} {
		s.Volumes[v.Name] = v
	}
	p1 := target.PortConfig{ID: 1, TRADDR: "192.0.2.1", TRSVCID: "4420"}
	p2 := target.PortConfig{ID: 2, TRADDR: "2001:db8::2", TRSVCID: "4421"}
	p3 := target.PortConfig{ID: 3, TRADDR: "192.0.2.3", TRSVCID: "4420"}
	a := func(p ...target.PortConfig) target.RemoteSubsystem {
		return target.RemoteSubsystem{NQN: NQNPrefix + "a", Hosts: []string{"nqn.h1"}, Ports: p}
	}
	b := func(p ...target.PortConfig) target.RemoteSubsystem {
		return target.RemoteSubsystem{NQN: NQNPrefix + "b", AllowAnyHost: true, Ports: p}
	}
	c := func(p ...target.PortConfig) target.RemoteSubsystem {
		return target.RemoteSubsystem{NQN: NQNPrefix + "c", Ports: p}
	}
	e := func(p ...target.PortConfig) target.RemoteSubsystem {
		return target.RemoteSubsystem{NQN: NQNPrefix + "e", Hosts: []string{"nqn.h1", "nqn.h2"}, Ports: p}
	}
	for _, tc := range []struct {
		self NodeID
		want []target.RemoteSubsystem
	}{
		{1, []target.RemoteSubsystem{a(p2), b(p2, p3), e(p3)}},
		{2, []target.RemoteSubsystem{a(p1), b(p3), c(p1), e(p3)}},
		{3, []target.RemoteSubsystem{a(p1, p2), b(p2), c(p1)}},
		{9, []target.RemoteSubsystem{a(p1, p2), b(p2, p3), c(p1), e(p3)}}, // not a member
	} {
		nodes := make([]Node, 0, len(s.Nodes))
		for _, n := range s.NodeList() {
			nodes = append(nodes, *n)
		}
		if got := remoteSubsystems(s, nodes, tc.self); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("self %v:\n got %+v\nwant %+v", tc.self, got, tc.want)
		}
	}
	if got := remoteSubsystems(NewState(), nil, 1); got != nil {
		t.Errorf("empty state: %+v", got)
	}
}
