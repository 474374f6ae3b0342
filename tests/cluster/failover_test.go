package cluster_test

import (
	"context"
	"testing"
	"time"

	"basalt/pkg/cluster"
)

// maxPause is the failover pause the tests accept: the goal is under 2 s;
// the bound leaves room for a loaded 2-core CI machine.
const maxPause = 4 * time.Second

// TestKillLeaderDuringVerifiedWrites kills -9 the volume's leader while
// clients read and write through the ANA-following MultiPath: the writes
// pause for less than maxPause, the history of every block stays
// linearizable (porcupine), every acknowledged write reads back, and the
// killed node rejoins. Once with the Raft logs on tmpfs, once on disk files
// (msync).
func TestKillLeaderDuringVerifiedWrites(t *testing.T) {
	onEachMedium(t, killLeaderDuringVerifiedWrites)
}

func killLeaderDuringVerifiedWrites(t *testing.T, m medium) {
	tc := startCluster(t, opts{nodes: 3, store: true, raftLogOn: m})
	v := tc.createVolume("failover", 64<<20, 3)
	mp, closePaths := tc.connect(v.NQN)
	defer closePaths()

	w := newWorkload(mp)
	lbas := seqLBAs(24)
	ctx, stop := context.WithCancel(context.Background())
	wg := w.run(ctx, 8, lbas, 0.6, 15*time.Second)
	time.Sleep(1500 * time.Millisecond)

	leader := tc.leaderOf("failover")
	tc.kill(leader)
	killedAt := leader.killedAt
	t.Logf("killed node%d (the leader) at %v", leader.id, killedAt.Sub(w.epoch).Round(time.Millisecond))
	time.Sleep(4 * time.Second)
	stop()
	wg.Wait()

	pause, ok := w.pauseAfter(killedAt)
	if !ok {
		t.Fatal("no write completed after the leader was killed")
	}
	writes, reads, failed := w.counts()
	t.Logf("FIGURE failover pause (host library, kill -9 → first write completed on the new leader): %v", pause.Round(time.Millisecond))
	t.Logf("%d writes and %d reads completed, %d operations failed", writes, reads, failed)
	if pause > maxPause {
		t.Errorf("failover paused writes for %v, want < %v", pause, maxPause)
	}
	w.finalReads(t, lbas)
	w.checkLinearizable(t)

	nv := tc.waitLeaderElsewhere("failover", leader)
	t.Logf("new leader: node%d", nv)
	tc.start(leader)
	tc.waitReady(30 * time.Second)
	tc.waitHealthy("failover", 30*time.Second)
}

// waitLeaderElsewhere waits until the volume has a leader other than n.
func (tc *testCluster) waitLeaderElsewhere(name string, n *node) cluster.NodeID {
	tc.t.Helper()
	var leader cluster.NodeID
	tc.eventually(15*time.Second, "a new leader is elected", func() bool {
		v, err := tc.volume(name)
		leader = v.Leader
		return err == nil && leader != 0 && int(leader) != n.id
	})
	return leader
}
