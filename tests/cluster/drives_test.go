package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
)

// TestDriveLossRestartReplaceRebuild: three store nodes, an rf 3 volume
// with every block written (version 1) and a verified read/write load
// running throughout. A follower is stopped, one of its three drive files
// deleted, and the node started again: it starts degraded (GET /v1/drives
// shows the slot failed, or evacuated once the rebuild re-striped its data
// onto the survivors) while the volume keeps serving. The drive is then
// replaced through the API with a new file and the rebuild waited for
// (the slot healthy, no pass running, no error). Every block reads back
// through the MultiPath (linearizable history, no failed I/O). The rebuilt
// node's own data is then checked twice: its store's scrub (every stripe
// read and verified against its checksums and parity, scrub_interval 3 s
// on that node) must find nothing bad in a pass that began after the
// rebuild, and with the two other nodes in maintenance (they lead
// nothing, so the rebuilt node leads and serves every read from its own
// store) every block reads back as acknowledged. The rebuild's rate is
// reported from GET /v1/drives.
func TestDriveLossRestartReplaceRebuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const volBlocks = 16384 // 64 MiB
	tc := startCluster(t, opts{nodes: 3, store: true})
	v := tc.createVolume("drives", volBlocks*4096, 3)
	mp, closePaths := tc.connectReplicas(v)
	defer closePaths()
	w := newWorkload(mp)
	prefill(t, w, volBlocks)
	lbas := seqLBAs(1024)
	ctx, stop := context.WithCancel(context.Background())
	wg := w.run(ctx, 8, lbas, 0.7, 30*time.Second)
	defer func() { stop(); wg.Wait() }()

	leader := tc.leaderOf("drives")
	n := tc.nodes[leader.id%3] // a follower
	const slot = 1
	tc.stop(n)
	lost := filepath.Join(n.dir, fmt.Sprintf("d%d", slot))
	if err := os.Remove(lost); err != nil {
		t.Fatal(err)
	}
	enableScrub(t, n, "3s", "512MiB")
	tc.start(n)
	tc.waitReady(30 * time.Second)
	t.Logf("node%d restarted without %s", n.id, lost)
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, err := dial(dctx, n, v.NQN) // the host reconnects the path it lost
	dcancel()
	if err != nil {
		t.Fatalf("reconnecting to node%d: %v", n.id, err)
	}
	defer c.Close()
	mp.AddPath(c)
	dv := tc.drives(n)
	if st := dv.Drives[slot].State; st != "failed" && st != "evacuated" {
		t.Fatalf("after a start without drive %d: its slot is %q, want failed or evacuated: %+v", slot, st, dv.Drives)
	}
	t.Logf("degraded start: drive %d %s; rebuild %+v", slot, dv.Drives[slot].State, dv.Rebuild)
	tc.waitHealthy("drives", 30*time.Second)
	time.Sleep(time.Second) // the volume serves with the node degraded (the load runs)

	replaced := filepath.Join(n.dir, fmt.Sprintf("d%d-new", slot))
	replaceAt := time.Now()
	if _, err := tc.client(n).ReplaceDrive(context.Background(), slot, replaced); err != nil {
		t.Fatalf("replacing drive %d with %s: %v", slot, replaced, err)
	}
	tc.eventually(120*time.Second, fmt.Sprintf("the rebuild onto node%d's new drive %d finishes", n.id, slot), func() bool {
		dv = tc.drives(n)
		return len(dv.Drives) > slot && dv.Drives[slot].State == "healthy" && !dv.Rebuild.Running &&
			!dv.Rebuild.Finished.Before(replaceAt)
	})
	r := dv.Rebuild
	if r.LastError != "" || dv.Drives[slot].Path != replaced {
		t.Fatalf("after the rebuild: %+v", dv)
	}
	t.Logf("FIGURE rebuild pass (began %v after the replace request): %d of %d segments (%d skipped), %.1f MiB of drive I/O "+
		"in %v: %.1f MiB/s (limit %.0f MiB/s), under the clients' load; replace to healthy %v", r.Started.Sub(replaceAt).Round(time.Millisecond),
		r.SegmentsDone, r.SegmentsTotal, r.SegmentsSkipped, float64(r.BytesDone)/(1<<20),
		r.Finished.Sub(r.Started).Round(time.Millisecond), r.BytesPerSecond/(1<<20), float64(r.RateLimit)/(1<<20),
		time.Since(replaceAt).Round(time.Millisecond))

	stop()
	wg.Wait()
	writes, reads, failed := w.counts()
	t.Logf("%d writes and %d reads completed, %d failed", writes, reads, failed)
	if failed > 0 {
		t.Errorf("%d operations failed through the drive loss, restart and rebuild; the first: %q", failed, w.firstErrors())
	}
	readAll(t, w, volBlocks)

	tc.checkScrubAfter(n, r.Finished)
	others := tc.leadFrom(n, "drives")
	readAll(t, w, volBlocks) // served by n's store alone
	for _, o := range others {
		if _, err := tc.client(tc.up()).SetNodeState(context.Background(), cluster.NodeID(o.id), cluster.NodeActive); err != nil {
			t.Fatal(err)
		}
	}
	w.checkLinearizable(t)
}

// enableScrub sets scrub_interval and scrub_rate in n's [store] section
// (n is stopped).
func enableScrub(t *testing.T, n *node, interval, rate string) {
	t.Helper()
	b, err := os.ReadFile(n.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "\n[store]\n", fmt.Sprintf("\n[store]\nscrub_interval = %q\nscrub_rate = %q\n", interval, rate), 1)
	if cfg == string(b) {
		t.Fatalf("node%d's configuration has no [store] section", n.id)
	}
	if err := os.WriteFile(n.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// drives returns n's GET /v1/drives, failing the test on an error.
func (tc *testCluster) drives(n *node) api.DrivesView {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	dv, err := tc.client(n).Drives(ctx)
	if err != nil {
		tc.t.Fatalf("GET /v1/drives on node%d: %v", n.id, err)
	}
	return dv
}

// checkScrubAfter waits for two scrub passes of n's store completed after
// since (the second began an interval after the first ended, so after
// since) and checks that no scrub since n started found a bad block.
func (tc *testCluster) checkScrubAfter(n *node, since time.Time) {
	tc.t.Helper()
	var first time.Time
	var sv *api.ScrubView
	tc.eventually(60*time.Second, fmt.Sprintf("two scrub passes on node%d after the rebuild", n.id), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		l, err := tc.client(n).Local(ctx)
		if err != nil || l.Scrub == nil || !l.Scrub.LastCompleted.After(since) {
			return false
		}
		sv = l.Scrub
		if first.IsZero() {
			first = sv.LastCompleted
		}
		return sv.LastCompleted.After(first)
	})
	tc.t.Logf("scrub of node%d after the rebuild: last pass %+v; since its start %+v", n.id, sv.Last, sv.Total)
	if sv.Last.Blocks == 0 || sv.Total.Bad != 0 || sv.Total.Unrecoverable != 0 {
		tc.t.Errorf("node%d's scrub after the rebuild: last pass %+v, since its start %+v; want blocks checked and "+
			"nothing bad", n.id, sv.Last, sv.Total)
	}
}

// leadFrom puts every node but n into maintenance, so that n leads volume
// name (a node in maintenance leads nothing), and returns those nodes.
func (tc *testCluster) leadFrom(n *node, name string) []*node {
	tc.t.Helper()
	var others []*node
	for _, o := range tc.nodes {
		if o == n {
			continue
		}
		if _, err := tc.client(n).SetNodeState(context.Background(), cluster.NodeID(o.id), cluster.NodeMaintenance); err != nil {
			tc.t.Fatalf("putting node%d into maintenance: %v", o.id, err)
		}
		others = append(others, o)
	}
	tc.eventually(30*time.Second, fmt.Sprintf("node%d leads %s", n.id, name), func() bool {
		v, err := tc.volume(name)
		return err == nil && v.Leader == cluster.NodeID(n.id)
	})
	return others
}
