package api

import (
	"testing"
	"time"

	"basalt/pkg/cluster"
)

// TestCatchUpPercentPrefersSnapshotBytes: while a snapshot streams to a
// member its progress is the bytes sent, not its match index (which stays
// put until the snapshot is installed); otherwise the match index against
// the commit index.
func TestCatchUpPercentPrefersSnapshotBytes(t *testing.T) {
	st := cluster.GroupStatus{Commit: 1000, Progress: map[cluster.NodeID]uint64{2: 10, 3: 500},
		CatchingUp: map[cluster.NodeID]cluster.CatchUp{2: {Behind: 990, SnapshotSent: 30, SnapshotTotal: 120}}}
	if got := catchUpPercent(st, 2); got != 25 {
		t.Errorf("snapshot 30 of 120 bytes: %v%%, want 25%%", got)
	}
	if got := catchUpPercent(st, 3); got != 50 {
		t.Errorf("match 500 of commit 1000: %v%%, want 50%%", got)
	}
}

// TestRecoveryETAFromTwoSamples: the ETA appears once progress has moved
// between two samples, at the rate between them.
func TestRecoveryETAFromTwoSamples(t *testing.T) {
	var r recoveryRates
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := r.detail(7, 20, t0); got != "20%" {
		t.Errorf("first sample: %q, want 20%% without an ETA", got)
	}
	if got := r.detail(7, 40, t0.Add(10*time.Second)); got != "40%, ETA 30s" {
		t.Errorf("20%% → 40%% in 10 s: %q, want 40%%, ETA 30s", got)
	}
	if got := r.detail(7, 40, t0.Add(11*time.Second)); got != "40%, ETA 30s" {
		t.Errorf("no progress since: %q, want the last ETA kept", got)
	}
}
