package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"basalt/pkg/cluster"
	"basalt/pkg/nvme/host"
)

// addNode starts a new node that joins the running cluster through node
// via's API (cluster.join): no node ID, no peers in its configuration.
func (tc *testCluster) addNode(via *node) *node {
	tc.t.Helper()
	id := len(tc.nodes) + 1
	n := &node{id: id, dir: filepath.Join(tc.dir, fmt.Sprintf("node%d", id)), nvme: freePort(tc.t), api: freePort(tc.t),
		raft: freePort(tc.t), proxiesTo: map[int]*proxy{}}
	n.cfg, n.log = filepath.Join(n.dir, "basaltd.toml"), filepath.Join(tc.dir, fmt.Sprintf("node%d.log", id))
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		tc.t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[node]\nname = \"node%d\"\ndata_dir = %q\n\n", id, n.dir)
	fmt.Fprintf(&b, "[nvme]\nlisten = %q\nadvertise = %q\n\n[log]\nlevel = \"info\"\n\n", n.nvme, n.nvme)
	fmt.Fprintf(&b, "[cluster]\njoin = %q\nraft_listen = %q\napi_listen = %q\n%s", via.api, n.raft, n.api, tc.o.clusterConf)
	if tc.o.store {
		fmt.Fprintf(&b, "\n[store]\ndrives = [%q, %q, %q]\ndrive_size = \"256MiB\"\nbuffer_size = \"64MiB\"\n"+
			"chunk_size = \"32KiB\"\nsegment_stripes = 8\n",
			filepath.Join(n.dir, "d0"), filepath.Join(n.dir, "d1"), filepath.Join(n.dir, "d2"))
	}
	fmt.Fprintf(&b, "\n[raft_log]\npath = %q\nsize = \"64MiB\"\n", filepath.Join(tc.logDir, fmt.Sprintf("node%d.raft", id)))
	// No certificate: the cluster's CA certificate and an admin token, with
	// which it gets its certificate from the cluster (pkg/node, join_tls.go).
	fmt.Fprintf(&b, "\n[security]\njoin_token_file = %q\n", tc.joinSecurity(n))
	if err := os.WriteFile(n.cfg, []byte(b.String()), 0o600); err != nil {
		tc.t.Fatal(err)
	}
	tc.nodes = append(tc.nodes, n)
	tc.start(n)
	return n
}

// replicaCounts returns how many replicas each node holds.
func (tc *testCluster) replicaCounts() map[cluster.NodeID]int {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vols, err := tc.client(tc.up()).Volumes(ctx)
	if err != nil {
		return nil
	}
	out := map[cluster.NodeID]int{}
	for _, v := range vols {
		for _, r := range v.Replicas {
			out[r]++
		}
	}
	return out
}

// allHealthy reports whether every volume is healthy with rf replicas and
// no move in progress.
func (tc *testCluster) allHealthy(names []string, rf int) bool {
	for _, name := range names {
		v, err := tc.volume(name)
		if err != nil || v.Health != "healthy" || len(v.Replicas) != rf || len(v.Want) > 0 || len(v.Learners) > 0 {
			return false
		}
	}
	return true
}

// TestNodeAddedThenDrainedUnderLoad: a fourth node joins a 3-node cluster
// with cluster.join alone (it gets ID 4 from the cluster and catches up the
// metadata as a learner, then votes); replicas rebalance onto it until every
// node holds its share. Then the node holding volume a's leader is drained
// under a verified load: leadership and replicas move off it with no I/O
// error, and once it holds nothing it is removed. Every acknowledged write
// reads back and the history is linearizable.
func TestNodeAddedThenDrainedUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	tc := startCluster(t, opts{nodes: 3, store: true})
	names := []string{"a", "b", "c", "d"}
	for _, name := range names {
		tc.createVolume(name, 32<<20, 3)
	}
	v := tc.waitHealthy("a", 30*time.Second)
	mp, closePaths := tc.connectReplicas(v)
	defer closePaths()
	w := newWorkload(mp)
	lbas := seqLBAs(32)
	ctx, stop := context.WithCancel(context.Background())
	wg := w.run(ctx, 8, lbas, 0.7, 30*time.Second)

	// The host follows the volume's replicas as a Linux host does: it
	// connects the paths the discovery log gains (connect-all after a
	// rescan) and reconnects a path whose connection was lost (a replica
	// removed from a node and added back later is a new subsystem there).
	have := map[cluster.NodeID]*host.Controller{}
	for i, p := range mp.Paths(1) {
		have[v.Replicas[i]] = p.Controller
	}
	followPaths := func() {
		moved, err := tc.volume("a")
		if err != nil {
			return
		}
		for _, id := range append(moved.Replicas, moved.Learners...) {
			if c := have[id]; c != nil && c.Err() == nil {
				continue
			}
			c, err := dial(context.Background(), tc.nodes[id-1], v.NQN)
			if err != nil {
				continue // not exported there yet: the next poll tries again
			}
			have[id] = c
			t.Cleanup(func() { c.Close() })
			mp.AddPath(c)
		}
	}
	start := time.Now()
	n4 := tc.addNode(tc.nodes[0])
	tc.eventually(60*time.Second, "node4 joins and votes in the metadata group", func() bool {
		cv, err := tc.client(n4).Cluster(context.Background())
		return err == nil && cv.Self == 4 && cv.Nodes == 4 && cv.NodesUp == 4
	})
	tc.eventually(120*time.Second, "replicas rebalance onto node4 (12 replicas: 3 each)", func() bool {
		followPaths()
		c := tc.replicaCounts()
		return c[4] == 3 && c[1] == 3 && c[2] == 3 && c[3] == 3 && tc.allHealthy(names, 3)
	})
	t.Logf("FIGURE node add: join to balanced replicas (4 volumes of 32 MiB, rf 3): %v",
		time.Since(start).Round(100*time.Millisecond))

	drained := tc.leaderOf("a")
	drainAt := time.Now()
	t.Logf("draining node%d at %v", drained.id, drainAt.Sub(w.epoch).Round(time.Millisecond))
	if _, err := tc.client(tc.up()).SetNodeState(context.Background(), cluster.NodeID(drained.id), cluster.NodeDraining); err != nil {
		t.Fatal(err)
	}
	tc.eventually(120*time.Second, fmt.Sprintf("node%d holds and leads nothing", drained.id), func() bool {
		nodes, err := tc.client(tc.up()).Nodes(context.Background())
		if err != nil {
			return false
		}
		followPaths()
		for _, nv := range nodes {
			if nv.ID == cluster.NodeID(drained.id) {
				return nv.Replicas == 0 && nv.Leading == 0 && tc.allHealthy(names, 3)
			}
		}
		return false
	})
	drainTime := time.Since(drainAt)
	gap := w.maxGap(drainAt, time.Now())
	p99, ops := w.percentile(0.99, drainAt, time.Now())
	t.Logf("FIGURE drain of node%d (leader of a; 4 volumes, rf 3): %v; longest write pause %v; p99 %v over %d operations",
		drained.id, drainTime.Round(100*time.Millisecond), gap.Round(time.Millisecond), p99.Round(time.Microsecond), ops)
	if err := tc.client(tc.up()).RemoveNode(context.Background(), cluster.NodeID(drained.id)); err != nil {
		t.Fatalf("removing the drained node: %v", err)
	}
	stop()
	wg.Wait()
	writes, reads, failed := w.counts()
	t.Logf("%d writes and %d reads completed, %d operations failed", writes, reads, failed)
	if failed > 0 {
		t.Errorf("%d operations failed during the join, rebalance and drain; the first: %q", failed, w.firstErrors())
	}
	w.finalReads(t, lbas)
	w.checkLinearizable(t)
}
