package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAllNodesRestartAtOnce writes through the MultiPath, kills -9 every
// node at the same moment, starts them again, and reads every
// acknowledged write back: the stores stage in memory, so what was not yet
// destaged comes back from the Raft logs. Once with the Raft logs on tmpfs,
// once on disk files (msync).
func TestAllNodesRestartAtOnce(t *testing.T) { onEachMedium(t, allNodesRestartAtOnce) }

func allNodesRestartAtOnce(t *testing.T, m medium) {
	tc := startCluster(t, opts{nodes: 3, store: true, raftLogOn: m})
	v := tc.createVolume("restart", 64<<20, 3)
	mp, closePaths := tc.connect(v.NQN)
	acked := map[uint64]uint64{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range uint64(512) {
		lba := i * 37 % 16384 // spread over the volume
		if err := mp.Write(ctx, 1, lba, block(lba, i+1), false); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		acked[lba] = i + 1
	}
	closePaths()

	tc.killAll()
	start := time.Now()
	for _, n := range tc.nodes {
		tc.start(n)
	}
	tc.waitReady(60 * time.Second)
	tc.waitHealthy("restart", 60*time.Second)
	t.Logf("FIGURE cluster back, volume healthy %v after all nodes were killed", time.Since(start).Round(time.Millisecond))

	mp, closePaths = tc.connect(v.NQN)
	defer closePaths()
	buf := make([]byte, 4096)
	for lba, want := range acked {
		if err := mp.Read(ctx, 1, lba, buf); err != nil {
			t.Fatalf("read lba %d: %v", lba, err)
		}
		if got, err := versionOf(buf, lba); err != nil || got != want {
			t.Fatalf("lba %d: version %d (%v), want %d", lba, got, err, want)
		}
	}
	// And the volume still takes writes.
	if err := mp.Write(ctx, 1, 1, block(1, 99999), true); err != nil {
		t.Fatal(err)
	}
}

// TestFollowerCatchesUp kills -9 a follower while clients write, restarts
// it while they keep writing, waits until it has applied what the leader
// committed, and then compares the three replicas byte for byte (file
// replicas, after a clean stop). It reports the catch-up rate and the
// clients' p99 latency before and during the catch-up. Once with the Raft
// logs on tmpfs, once on disk files (msync).
func TestFollowerCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	onEachMedium(t, followerCatchesUp)
}

func followerCatchesUp(t *testing.T, m medium) {
	tc := startCluster(t, opts{nodes: 3, store: false, raftLogOn: m})
	v := tc.createVolume("catchup", 32<<20, 3)
	leader := tc.leaderOf("catchup")
	follower := tc.nodes[leader.id%3]
	mp, closePaths := tc.connect(v.NQN)
	defer closePaths()

	w := newWorkload(mp)
	lbas := seqLBAs(8192) // 32 MiB: the whole volume
	ctx, stop := context.WithCancel(context.Background())
	wg := w.run(ctx, 8, lbas, 1, 20*time.Second)
	time.Sleep(2 * time.Second)
	steadyEnd := time.Now()

	appliedAtKill := tc.groupIndex(follower, "catchup", false)
	tc.kill(follower)
	downAt := time.Now()
	time.Sleep(4 * time.Second)
	tc.start(follower)
	restartAt := time.Now()
	commit := tc.groupIndex(leader, "catchup", true)
	tc.eventually(60*time.Second, "the follower catches up", func() bool {
		return tc.groupIndex(follower, "catchup", false) >= commit
	})
	caughtUp := time.Since(restartAt)
	p99Before, nBefore := w.percentile(0.99, steadyEnd.Add(-1500*time.Millisecond), steadyEnd)
	p99During, nDuring := w.percentile(0.99, restartAt, restartAt.Add(caughtUp))
	lag := commit - min(commit, appliedAtKill)
	t.Logf("FIGURE follower down %v, %d entries behind (about %d MiB of 4 KiB writes); caught up %v after its restart: %.0f entries/s, %.1f MiB/s",
		restartAt.Sub(downAt).Round(time.Millisecond), lag, lag*4096>>20, caughtUp.Round(time.Millisecond),
		float64(lag)/caughtUp.Seconds(), float64(lag*4096)/caughtUp.Seconds()/(1<<20))
	t.Logf("FIGURE client p99 write latency: %v before (%d ops), %v during the catch-up (%d ops)",
		p99Before.Round(time.Microsecond), nBefore, p99During.Round(time.Microsecond), nDuring)
	stop()
	wg.Wait()

	final := tc.groupIndex(leader, "catchup", true)
	tc.eventually(30*time.Second, "every replica applied everything", func() bool {
		for _, n := range tc.nodes {
			if tc.groupIndex(n, "catchup", false) < final {
				return false
			}
		}
		return true
	})
	for _, n := range tc.nodes {
		tc.stop(n)
	}
	tc.compareReplicas(v.ID)
}

// groupIndex returns n's commit (or applied) index of the volume's group.
func (tc *testCluster) groupIndex(n *node, name string, commit bool) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := tc.client(n).Local(ctx)
	if err != nil {
		return 0
	}
	for _, vs := range st.Volumes {
		if vs.Name == name {
			if commit {
				return vs.Raft.Commit
			}
			return vs.Raft.Applied
		}
	}
	return 0
}

// compareReplicas compares the nodes' replica files of volume group id.
func (tc *testCluster) compareReplicas(id interface{ String() string }) {
	tc.t.Helper()
	var first []byte
	for _, n := range tc.nodes {
		matches, _ := filepath.Glob(filepath.Join(n.dir, "replicas", "*.img"))
		if len(matches) != 1 {
			tc.t.Fatalf("node%d holds replicas %v, want one", n.id, matches)
		}
		b, err := os.ReadFile(matches[0])
		if err != nil {
			tc.t.Fatal(err)
		}
		if first == nil {
			first = b
			continue
		}
		if !bytes.Equal(first, b) {
			tc.t.Errorf("node%d's replica differs from node1's: %s", n.id, firstDiff(first, b))
		}
	}
	_ = id
}

func firstDiff(a, b []byte) string {
	if len(a) != len(b) {
		return fmt.Sprintf("sizes %d and %d", len(a), len(b))
	}
	var blocks []string
	for off := 0; off < len(a); off += 4096 {
		if !bytes.Equal(a[off:off+4096], b[off:off+4096]) {
			blocks = append(blocks, fmt.Sprint(off/4096))
			if len(blocks) == 8 {
				break
			}
		}
	}
	return "blocks " + strings.Join(blocks, ",")
}
