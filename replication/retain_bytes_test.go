package replication

import (
	"bytes"
	"testing"
	"time"

	"basalt/pkg/pmem"
)

// TestCutOffFollowerCatchesUpFromTheRetainedLog cuts a follower off while
// more than CompactionMargin entries (but fewer bytes than RetainBytes) are
// written: the leader keeps its log back to the follower's match index, its
// status shows the follower behind and the group degraded, and once the
// partition heals the follower catches up from the log, with no snapshot.
// With retention off (RetainBytes -1) the same run needs a snapshot, which
// is what the retention saves.
func TestCutOffFollowerCatchesUpFromTheRetainedLog(t *testing.T) {
	const writes = 1500 // > CompactionMargin (1024); ~6 MiB < RetainBytes (8 MiB)
	for _, retain := range []bool{true, false} {
		t.Run(map[bool]string{true: "retained", false: "retention off"}[retain], func(t *testing.T) {
			c := newSimCluster(t, 31, func(cfg *Config) {
				if !retain {
					cfg.RetainBytes = -1
				}
			})
			for _, id := range c.members {
				c.regions[id] = pmem.NewFake(4096+32<<20, int64(id))
			}
			c.startAll()
			leader := c.leader()
			follower := c.members[int(leader)%3]
			var others []NodeID
			for _, id := range c.members {
				if id != follower {
					others = append(others, id)
				}
			}
			c.net.Isolate(follower, others...)
			for i := range int64(writes) {
				if err := c.write(leader, i%64, byte(i+1)); err != nil {
					t.Fatal(err)
				}
			}
			c.run(50 * time.Millisecond) // a tick publishes the progress
			st := c.vols[leader].Group().Status()
			peer := peerOf(st, follower)
			if peer == nil || peer.Behind < writes || !peer.CatchingUp || !st.Degraded {
				t.Fatalf("leader's status while %v is cut off: degraded %v, peer %+v", follower, st.Degraded, peer)
			}
			if retain && st.FirstIndex-1 > max(peer.Match, 1) {
				t.Fatalf("leader compacted to %d past the follower's match %d", st.FirstIndex, peer.Match)
			}
			c.net.Heal()
			start := c.clock.Now()
			c.runUntil(10*time.Second, "the follower catches up", func() bool {
				return c.vols[follower].Group().Status().Applied >= c.vols[leader].Group().Status().Commit
			})
			c.run(50 * time.Millisecond)
			sent := c.vols[leader].Group().Status().SnapshotsSent
			got := c.vols[follower].Group().Status().SnapshotsReceived
			t.Logf("caught up in %v (simulated), snapshots sent %d, received %d", c.clock.Since(start), sent, got)
			if retain && (sent != 0 || got != 0) {
				t.Fatalf("the follower caught up by snapshot (sent %d, received %d), want from the log", sent, got)
			}
			if !retain && got == 0 {
				t.Fatal("with retention off the follower caught up without a snapshot")
			}
			if st := c.vols[leader].Group().Status(); st.Degraded {
				t.Fatalf("the group stays degraded after the follower caught up: %+v", st.Peers)
			}
			if !bytes.Equal(c.locals[leader].bytes(), c.locals[follower].bytes()) {
				t.Fatal("the follower's replica differs from the leader's")
			}
		})
	}
}

func peerOf(st GroupStatus, id NodeID) *PeerStatus {
	for i := range st.Peers {
		if st.Peers[i].Node == id {
			return &st.Peers[i]
		}
	}
	return nil
}
