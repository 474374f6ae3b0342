package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"basalt/pkg/cluster"
	"basalt/pkg/nvme/host"
	"basalt/target"
	"basalt/target/tcp"
)

const (
	hostA = "nqn.2014-08.io.basalt.test:host-a"
	hostB = "nqn.2014-08.io.basalt.test:host-b"
)

// serveDiscovery gives node tn its NVMe port as pkg/node does (PORTID =
// node ID, advertised at its NVMeAddr) and serves it on a loopback
// listener, whose address it returns.
func serveDiscovery(t *testing.T, tn *testNode) string {
	t.Helper()
	port, err := tn.t.AddPort(target.PortConfig{ID: uint16(tn.id), TRADDR: fmt.Sprintf("127.0.0.%d", tn.id), TRSVCID: "4420"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tcp.Listen(tn.t, port, "127.0.0.1:0", tcp.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = l.Serve() }()
	t.Cleanup(func() { _ = l.Close(); l.Wait() })
	return l.Addr().String()
}

// discoveredPaths reads the discovery log at addr as hostNQN and returns
// the entries for nqn as "PORTID TRADDR:TRSVCID", sorted.
func discoveredPaths(t *testing.T, addr, hostNQN, nqn string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := host.DialDiscovery(ctx, addr, hostNQN)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	entries, err := c.DiscoveryLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{}
	for _, e := range entries {
		if e.SUBNQN == nqn {
			paths = append(paths, fmt.Sprintf("%d %s:%s", e.PORTID, e.TRADDR, e.TRSVCID))
		}
	}
	slices.Sort(paths)
	return paths
}

// Every node's discovery log lists a volume on exactly the ports of the
// nodes holding a replica, the node that holds none included, for the
// hosts the volume admits (docs/ARCHITECTURE.md, "Multipath and ANA
// failover").
func TestDiscoveryListsReplicaNodes(t *testing.T) {
	tc := newTestCluster(t, 3)
	addrs := map[cluster.NodeID]string{}
	for id, tn := range tc.nodes {
		addrs[id] = serveDiscovery(t, tn)
	}
	res, err := tc.submit(2, createCmd("d", 1<<20, 2, hostA))
	if err != nil {
		t.Fatal(err)
	}
	v := res.Volume
	var want []string
	for _, id := range v.Replicas {
		want = append(want, fmt.Sprintf("%d 127.0.0.%d:4420", id, id))
	}
	slices.Sort(want)
	if len(v.Replicas) != 2 || len(want) != 2 {
		t.Fatalf("replicas %v", v.Replicas)
	}
	// every waits until each node's log, read as hostNQN, lists want: with
	// rf 2 on 3 nodes, one of them holds no replica.
	every := func(what, hostNQN string, want []string) {
		t.Helper()
		tc.eventually(what, func() bool {
			for _, id := range []cluster.NodeID{1, 2, 3} {
				if !slices.Equal(discoveredPaths(t, addrs[id], hostNQN, v.NQN()), want) {
					return false
				}
			}
			return true
		})
	}
	every("every node lists the two replica nodes", hostA, want)
	for id := range tc.nodes {
		if got := discoveredPaths(t, addrs[id], hostB, v.NQN()); len(got) != 0 {
			t.Errorf("%v lists %v to a host the volume does not admit", id, got)
		}
	}
	if _, err := tc.submit(3, cluster.Command{Op: cluster.OpAddHost, Volume: "d", Host: hostB}); err != nil {
		t.Fatal(err)
	}
	every("an added host sees both paths everywhere", hostB, want)
	if _, err := tc.submit(1, cluster.Command{Op: cluster.OpDeleteVolume, Volume: "d"}); err != nil {
		t.Fatal(err)
	}
	every("a deleted volume is listed nowhere", hostA, []string{})
}
