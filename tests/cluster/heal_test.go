package cluster_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
)

// TestDeadNodeIsReplacedAfterDownOutInterval is the healing path: four
// nodes, an rf 3 volume under a verified read/write load, one of its replica
// nodes killed for good. After down_out_interval (3 s here) the node is
// marked out, a replica is created on the fourth node, caught up and
// promoted, and the dead one removed: the volume is back to three healthy
// replicas, none on the dead node, and every acknowledged write reads back
// (linearizable history), also after the old leader is then killed too, so
// that the new replica must serve in the quorum.
func TestDeadNodeIsReplacedAfterDownOutInterval(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	tc := startCluster(t, opts{nodes: 4, store: true, clusterConf: "down_out_interval = \"3s\"\n"})
	v := tc.createVolume("heal", 64<<20, 3)
	mp, closePaths := tc.connectReplicas(v)
	defer closePaths()

	w := newWorkload(mp)
	lbas := seqLBAs(32)
	ctx, stop := context.WithCancel(context.Background())
	wg := w.run(ctx, 8, lbas, 0.7, 30*time.Second)
	time.Sleep(1500 * time.Millisecond)

	leader := tc.leaderOf("heal")
	var dead *node
	for _, id := range v.Replicas {
		if n := tc.nodes[id-1]; n != leader {
			dead = n
			break
		}
	}
	spare := 0
	for _, n := range tc.nodes {
		if !slices.Contains(v.Replicas, cluster.NodeID(n.id)) {
			spare = n.id
		}
	}
	tc.kill(dead)
	t.Logf("killed node%d (a follower of %v) for good; node%d holds no replica", dead.id, v.Replicas, spare)

	var healed api.VolumeView
	start := time.Now()
	tc.eventually(90*time.Second, "the volume is back to 3 healthy replicas without the dead node", func() bool {
		var err error
		healed, err = tc.volume("heal")
		return err == nil && healed.Health == "healthy" && len(healed.Replicas) == 3 &&
			!slices.Contains(healed.Replicas, cluster.NodeID(dead.id)) && len(healed.Want) == 0 && len(healed.Learners) == 0
	})
	reprotect := time.Since(start)
	p99, n := w.percentile(0.99, start, time.Now())
	t.Logf("FIGURE time to re-protect after a node loss (down_out_interval 3 s, kill → 3 healthy replicas): %v",
		reprotect.Round(100*time.Millisecond))
	t.Logf("FIGURE client p99 during re-protection: %v over %d operations", p99.Round(time.Microsecond), n)
	if !slices.Contains(healed.Replicas, cluster.NodeID(spare)) {
		t.Fatalf("replicas after healing %v, want node%d among them", healed.Replicas, spare)
	}
	nodes, err := tc.client(tc.up()).Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, nv := range nodes {
		if nv.ID == cluster.NodeID(dead.id) && nv.State != cluster.NodeOut {
			t.Fatalf("the dead node's state is %q, want %q", nv.State, cluster.NodeOut)
		}
	}

	// The host learns the new path (as connect-all would), and the new
	// replica must now carry the quorum: kill the old leader.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, err := dial(dctx, tc.nodes[spare-1], v.NQN)
	dcancel()
	if err != nil {
		t.Fatalf("connecting to the new replica on node%d: %v", spare, err)
	}
	defer c.Close()
	mp.AddPath(c)
	leader = tc.leaderOf("heal")
	tc.kill(leader)
	t.Logf("killed node%d, the leader after healing", leader.id)
	time.Sleep(4 * time.Second)
	stop()
	wg.Wait()
	writes, reads, failed := w.counts()
	t.Logf("%d writes and %d reads completed, %d operations failed", writes, reads, failed)
	w.finalReads(t, lbas)
	w.checkLinearizable(t)

	// The node marked out comes back: it is active again and deletes its
	// replica of the volume, which moved away while it was down (as the
	// metadata it catches up says, or as an orphan once it is fresh).
	tc.start(dead)
	tc.eventually(60*time.Second, "the returned node is active and has deleted its orphaned replica", func() bool {
		nodes, err := tc.client(dead).Nodes(context.Background())
		if err != nil {
			return false
		}
		active := false
		for _, nv := range nodes {
			active = active || (nv.ID == cluster.NodeID(dead.id) && nv.State == cluster.NodeActive && nv.Up)
		}
		b, _ := os.ReadFile(dead.log)
		since := string(b)[strings.LastIndex(string(b), "==== start"):]
		return active && (strings.Contains(since, `msg="deleting orphaned replica"`) ||
			strings.Contains(since, `msg="volume deleted" node=node`+strconv.Itoa(dead.id)))
	})
}
