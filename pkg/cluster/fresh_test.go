package cluster

import (
	"context"
	"testing"
	"time"

	"basalt/pkg/clock"
)

// followerMeta is a metadata group on a follower: its read barrier says
// ErrNotLeader, as the replication layer's does.
type followerMeta struct{ fakeMeta }

func (g *followerMeta) ReadBarrier(context.Context) error { return ErrNotLeader }

// TestFollowerIsFreshOnceItAppliedWhatTheLeaderHad: a follower's metadata
// is fresh (so that it may delete orphaned replicas) once it has applied
// what the leader had applied when asked; before LeaderApplied existed a
// follower's read barrier failed for ever and it never deleted an orphan.
func TestFollowerIsFreshOnceItAppliedWhatTheLeaderHad(t *testing.T) {
	leader := register(1)
	leader.Node.APIAddr = "leader:9420"
	m := machineWith(t, &MemoryPersister{}, leader, register(2))
	g := &followerMeta{fakeMeta{m: m, self: 2, leader: 1, active: map[NodeID]bool{}}}
	leaderApplied := m.AppliedIndex() + 1
	c := &Cluster{cfg: Config{Self: Node{ID: 2}, Peers: []Node{{ID: 1, APIAddr: "leader:9420"}, {ID: 2}},
		LeaderApplied: func(_ context.Context, addr string) (uint64, error) {
			if addr != "leader:9420" {
				t.Errorf("asked %q, want the leader's API", addr)
			}
			return leaderApplied, nil
		}}, m: m, meta: g, clock: clock.Real()}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.caughtUpWithLeader(ctx); err != context.DeadlineExceeded {
		t.Fatalf("before applying what the leader had: %v, want to wait (deadline exceeded)", err)
	}
	applyOK(t, m, register(3))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if err := c.caughtUpWithLeader(ctx2); err != nil {
		t.Fatalf("not fresh after applying index %d: %v", leaderApplied, err)
	}
	c.cfg.LeaderApplied = nil
	if err := c.caughtUpWithLeader(ctx2); err == nil {
		t.Fatal("fresh with no way to ask the leader")
	}
}
