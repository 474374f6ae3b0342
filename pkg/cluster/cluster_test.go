package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/cluster"
	"basalt/pkg/cluster/clustertest"
	"basalt/pkg/nvme"
	"basalt/target"
)

// testNode is one in-process node on a clustertest.Net.
type testNode struct {
	id       cluster.NodeID
	c        *cluster.Cluster
	t        *target.Target
	replicas *cluster.MemoryReplicas
	persist  *cluster.MemoryPersister
}

type testCluster struct {
	t     *testing.T
	mu    sync.Mutex // guards nodes against the Forward callbacks
	net   *clustertest.Net
	peers []cluster.Node
	nodes map[cluster.NodeID]*testNode
	// wrap, when set, wraps every node's replicas (to inject faults).
	wrap func(cluster.Replicas) cluster.Replicas
}

func peer(id cluster.NodeID) cluster.Node {
	return cluster.Node{ID: id, Name: id.String(), NVMeAddr: fmt.Sprintf("127.0.0.%d:4420", id),
		RaftAddr: fmt.Sprintf("127.0.0.%d:9520", id), APIAddr: fmt.Sprintf("127.0.0.%d:9420", id)}
}

func newTestCluster(t *testing.T, n int) *testCluster { return newWrappedCluster(t, n, nil) }

// newWrappedCluster starts n nodes whose replicas wrap wraps (nil: none).
func newWrappedCluster(t *testing.T, n int, wrap func(cluster.Replicas) cluster.Replicas) *testCluster {
	tc := &testCluster{t: t, net: clustertest.NewNet(), nodes: map[cluster.NodeID]*testNode{}, wrap: wrap}
	for i := 1; i <= n; i++ {
		tc.peers = append(tc.peers, peer(cluster.NodeID(i)))
	}
	for _, p := range tc.peers {
		tc.start(p.ID, &cluster.MemoryReplicas{}, &cluster.MemoryPersister{})
	}
	t.Cleanup(func() {
		for _, tn := range tc.nodes {
			tn.stop()
		}
	})
	tc.eventually("every node registered", func() bool {
		for _, tn := range tc.nodes {
			if len(tn.c.State().Nodes) != n {
				return false
			}
		}
		return true
	})
	return tc
}

func (tc *testCluster) start(id cluster.NodeID, reps *cluster.MemoryReplicas, p *cluster.MemoryPersister) *testNode {
	t := tc.t
	tgt, err := target.New(target.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cluster.NewMachine(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	var replicas cluster.Replicas = reps
	if tc.wrap != nil {
		replicas = tc.wrap(reps)
	}
	c, err := cluster.Start(cluster.Config{
		Self: peer(id), Peers: tc.peers, Machine: m, Replicator: tc.net.Replicator(id), Replicas: replicas,
		Target: tgt, Port: uint16(id), Resync: 20 * time.Millisecond,
		Forward: func(ctx context.Context, addr string, cmd cluster.Command) (cluster.Result, error) {
			tc.mu.Lock()
			var target *cluster.Cluster
			for _, tn := range tc.nodes {
				if tn.c.Self().APIAddr == addr {
					target = tn.c
				}
			}
			tc.mu.Unlock()
			if target == nil {
				return cluster.Result{}, errors.New("no such node")
			}
			return target.Propose(ctx, cmd)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{id: id, c: c, t: tgt, replicas: reps, persist: p}
	tc.mu.Lock()
	tc.nodes[id] = tn
	tc.mu.Unlock()
	return tn
}

func (tn *testNode) stop() {
	_ = tn.c.Close()
	_ = tn.t.Close()
}

func (tc *testCluster) eventually(what string, cond func() bool) {
	tc.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tc.t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (tc *testCluster) submit(via cluster.NodeID, cmd cluster.Command) (cluster.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return tc.nodes[via].c.Submit(ctx, cmd)
}

func createCmd(name string, size int64, rf int, hosts ...string) cluster.Command {
	return cluster.Command{Op: cluster.OpCreateVolume, Create: &cluster.CreateVolume{
		Name: name, Size: size, RF: rf, Hosts: hosts, UUID: cluster.ID16{0xAA, byte(len(name))}, NGUID: cluster.ID16{0xBB}}}
}

func (tn *testNode) ana(v *cluster.Volume) nvme.ANAState {
	return tn.t.ANAState(v.ANAGroup, uint16(tn.id))
}

func TestVolumeLifecycleAcrossThreeNodes(t *testing.T) {
	tc := newTestCluster(t, 3)
	// Node 3 is not the metadata leader: its request is forwarded.
	res, err := tc.submit(3, createCmd("vol1", 1<<20, 3))
	if err != nil {
		t.Fatal(err)
	}
	v := res.Volume
	nqn := v.NQN()
	tc.eventually("every node exports the volume", func() bool {
		for _, tn := range tc.nodes {
			if tn.t.Subsystem(nqn) == nil {
				return false
			}
		}
		return true
	})
	leader := tc.net.VolumeLeader(v.ID)
	for id, tn := range tc.nodes {
		ns := tn.t.Subsystem(nqn).Namespace(1)
		if ns.ANAGroup() != v.ANAGroup || ns.Blocks() != 256 {
			t.Errorf("%v: namespace group %d blocks %d", id, ns.ANAGroup(), ns.Blocks())
		}
		want := nvme.ANAInaccessible
		if id == leader {
			want = nvme.ANAOptimized
		}
		if got := tn.ana(v); got != want {
			t.Errorf("%v: ANA %v, want %v (leader %v)", id, got, want, leader)
		}
	}

	// A write through the leader's namespace reaches every replica.
	data := bytes.Repeat([]byte{0x5A}, 4096)
	be := tc.nodes[leader].t.Subsystem(nqn).Namespace(1).Backend()
	if err := be.WriteAt(context.Background(), data, 8192, 0); err != nil {
		t.Fatal(err)
	}
	follower := tc.nodes[leader%3+1]
	fbe := follower.t.Subsystem(nqn).Namespace(1).Backend()
	if err := fbe.WriteAt(context.Background(), data, 0, 0); !errors.Is(err, backend.ErrInaccessible) {
		t.Errorf("write on a follower: %v, want ErrInaccessible", err)
	}

	// Leadership moves: the ANA states follow.
	tc.net.SetVolumeLeader(v.ID, follower.id)
	tc.eventually("ANA follows the leader", func() bool {
		return follower.ana(v) == nvme.ANAOptimized && tc.nodes[leader].ana(v) == nvme.ANAInaccessible
	})
	got := make([]byte, 4096)
	if err := fbe.ReadAt(context.Background(), got, 8192); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read on the new leader: %v, equal %v", err, bytes.Equal(got, data))
	}

	// Host access.
	if _, err := tc.submit(2, cluster.Command{Op: cluster.OpAddHost, Volume: "vol1", Host: "nqn.host-a"}); err != nil {
		t.Fatal(err)
	}
	tc.eventually("hosts follow the metadata", func() bool {
		for _, tn := range tc.nodes {
			s := tn.t.Subsystem(nqn)
			if s.HostAllowed("nqn.host-b") || !s.HostAllowed("nqn.host-a") {
				return false
			}
		}
		return true
	})

	// Resize: every replica grows, then hosts see the new size.
	if _, err := tc.submit(1, cluster.Command{Op: cluster.OpResizeVolume, Volume: "vol1", Size: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	tc.eventually("the namespace grows on every node", func() bool {
		for _, tn := range tc.nodes {
			if tn.t.Subsystem(nqn).Namespace(1).Blocks() != 1024 {
				return false
			}
		}
		return true
	})
	if err := fbe.ReadAt(context.Background(), got, 8192); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("data lost by the resize: %v", err)
	}

	// Status.
	st := follower.c.Local()
	if len(st.Volumes) != 1 || st.Volumes[0].ANAState != "optimized" || st.Volumes[0].Size != 4<<20 {
		t.Errorf("local status %+v", st.Volumes)
	}

	// Delete: exports and replicas go away everywhere.
	if _, err := tc.submit(2, cluster.Command{Op: cluster.OpDeleteVolume, Volume: "vol1"}); err != nil {
		t.Fatal(err)
	}
	tc.eventually("the volume is gone everywhere", func() bool {
		for _, tn := range tc.nodes {
			names, _ := tn.replicas.List()
			if tn.t.Subsystem(nqn) != nil || len(names) != 0 {
				return false
			}
		}
		return true
	})
}

func TestSubmitWithoutLeaderTimesOut(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.net.SetMetadataLeader(0)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := tc.nodes[2].c.Submit(ctx, createCmd("x", 1<<20, 1))
	if !errors.Is(err, cluster.ErrNoLeader) {
		t.Fatalf("err = %v, want ErrNoLeader", err)
	}
	// Invalid requests fail at once, leader or not.
	if _, err := tc.nodes[2].c.Submit(ctx, createCmd("X!", 1<<20, 1)); !errors.Is(err, cluster.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

func TestRestartedNodeServesItsVolumesAndDropsOrphans(t *testing.T) {
	tc := newTestCluster(t, 3)
	if _, err := tc.submit(1, createCmd("keep", 1<<20, 3)); err != nil {
		t.Fatal(err)
	}
	n3 := tc.nodes[3]
	tc.eventually("node 3 serves keep", func() bool { return n3.t.Subsystem(cluster.NQNPrefix+"keep") != nil })
	n3.stop()
	// While node 3 is down a volume is deleted; an orphan appears on its disk.
	if _, err := tc.submit(1, createCmd("gone", 1<<20, 3)); err != nil {
		t.Fatal(err)
	}
	gone := tc.nodes[1].c.State().Volumes["gone"]
	if _, err := n3.replicas.Open(gone.LocalName(), 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.submit(1, cluster.Command{Op: cluster.OpDeleteVolume, Volume: "gone"}); err != nil {
		t.Fatal(err)
	}
	n3 = tc.start(3, n3.replicas, n3.persist)
	tc.eventually("node 3 serves keep again and dropped the orphan", func() bool {
		names, _ := n3.replicas.List()
		return n3.t.Subsystem(cluster.NQNPrefix+"keep") != nil && len(names) == 1 &&
			slices.Contains(names, tc.nodes[1].c.State().Volumes["keep"].LocalName())
	})
}

func TestRetriedCommandsThatCommittedSucceed(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.net.LoseNextProposals(1)
	res, err := tc.submit(2, createCmd("once", 1<<20, 3))
	if err != nil || res.Volume == nil || res.Volume.Name != "once" {
		t.Fatalf("create whose first attempt committed: %v %+v", err, res)
	}
	tc.net.LoseNextProposals(1)
	if _, err := tc.submit(1, cluster.Command{Op: cluster.OpDeleteVolume, Volume: "once"}); err != nil {
		t.Fatalf("delete whose first attempt committed: %v", err)
	}
	// Without an ambiguous attempt, refusals stand.
	if _, err := tc.submit(1, cluster.Command{Op: cluster.OpDeleteVolume, Volume: "once"}); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("delete of a missing volume: %v", err)
	}
	if _, err := tc.submit(1, createCmd("twice", 1<<20, 3)); err != nil {
		t.Fatal(err)
	}
	tc.net.LoseNextProposals(1)
	other := createCmd("twice", 1<<20, 3)
	other.Create.UUID = cluster.ID16{0xEE}
	if _, err := tc.submit(1, other); !errors.Is(err, cluster.ErrExists) {
		t.Fatalf("a create colliding with another volume: %v, want ErrExists", err)
	}
}

// TestStoppedGroupLeavesItsPathInaccessible stops a volume's group on the
// node that leads it (as a storage error would): that node's ANA state must
// turn inaccessible, so that hosts stop sending there, although no other
// leader is known yet.
func TestStoppedGroupLeavesItsPathInaccessible(t *testing.T) {
	tc := newTestCluster(t, 3)
	res, err := tc.submit(1, createCmd("vol1", 1<<20, 3))
	if err != nil {
		t.Fatal(err)
	}
	v := res.Volume
	var leader cluster.NodeID
	tc.eventually("the leader's path is optimized", func() bool {
		leader = tc.net.VolumeLeader(v.ID)
		return leader != 0 && tc.nodes[leader].ana(v) == nvme.ANAOptimized
	})
	tc.net.StopGroup(v.ID, leader)
	tc.eventually("the stopped leader's path is inaccessible", func() bool {
		return tc.nodes[leader].ana(v) == nvme.ANAInaccessible
	})
}
