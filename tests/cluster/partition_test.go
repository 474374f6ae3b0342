package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"basalt/pkg/nvme/host"
)

// TestPartitionIsolatingLeader cuts the volume leader's Raft links: the
// isolated node stops accepting writes (its path answers with an ANA
// status and turns inaccessible), the majority elects a leader and carries
// on, no write the isolated node acknowledged is lost, and after the
// partition heals the history is still linearizable.
func TestPartitionIsolatingLeader(t *testing.T) {
	tc := startCluster(t, opts{nodes: 3, store: false})
	v := tc.createVolume("part", 32<<20, 3)
	old := tc.leaderOf("part")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	direct, err := dial(ctx, old, v.NQN) // the old leader's path only
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	mp, closePaths := tc.connect(v.NQN)
	defer closePaths()

	w := newWorkload(mp)
	lbas := seqLBAs(16)
	wctx, stopWork := context.WithCancel(context.Background())
	wg := w.run(wctx, 6, lbas, 0.6, 20*time.Second)
	time.Sleep(time.Second)

	tc.partition(old, true)
	cutAt := time.Now()
	t.Logf("partitioned node%d (the leader) away", old.id)

	// The minority stops accepting writes: a write on its path fails with a
	// path error (ANA inaccessible or transition) soon. Every write it still
	// acknowledges after the cut goes into the history, so that the final
	// check proves none was lost.
	directClient := w.clientID()
	var refusedAfter time.Duration
	for version := uint64(1); ; version++ {
		wctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := w.writeWith(wctx, direct.Write, directClient, lbas[int(version)%len(lbas)], 0xD1<<40|version)
		cancel()
		if err != nil {
			if !host.IsPathError(err) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the isolated leader refused a write with %v, want a path (ANA) error", err)
			}
			refusedAfter = time.Since(cutAt)
			break
		}
		if time.Since(cutAt) > 10*time.Second {
			t.Fatal("the isolated node still accepts writes 10 s after the partition")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("FIGURE isolated leader refuses writes %v after the partition", refusedAfter.Round(time.Millisecond))

	// The majority carries on.
	nv := tc.waitLeaderElsewhere("part", old)
	t.Logf("node%d leads the majority", nv)
	before, _, _ := w.counts()
	time.Sleep(2 * time.Second)
	after, _, _ := w.counts()
	if after <= before {
		t.Errorf("the majority completed no write in 2 s (%d → %d)", before, after)
	}
	tc.eventually(10*time.Second, "the isolated node reports its path inaccessible", func() bool {
		lctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := tc.client(old).Local(lctx)
		return err == nil && len(st.Volumes) == 1 && st.Volumes[0].ANAState == "inaccessible"
	})
	gap := w.maxGap(cutAt, time.Now())
	t.Logf("FIGURE longest write pause through the MultiPath after the partition: %v", gap.Round(time.Millisecond))
	if gap > maxPause {
		t.Errorf("writes paused %v after the partition, want < %v", gap, maxPause)
	}

	tc.partition(old, false)
	tc.waitHealthy("part", 30*time.Second)
	stopWork()
	wg.Wait()
	w.finalReads(t, lbas)
	w.checkLinearizable(t)
}
