package node

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/cluster"
	"basalt/pkg/pmem"
	"basalt/replication"
)

// failingSM fails every Apply of a non-empty entry.
type failingSM struct{ applied uint64 }

var errApply = errors.New("test: apply failed")

func (s *failingSM) Apply(context.Context, uint64, []byte) error { return errApply }
func (s *failingSM) AppliedIndex() uint64                        { return s.applied }
func (s *failingSM) Snapshot(io.Writer) error                    { return nil }
func (s *failingSM) Restore(_ io.Reader, i uint64) error         { s.applied = i; return nil }

// TestRaftAdapterReportsFailureAndRefusals: a group that failed shows as
// failed, with the reason, in the cluster's GroupStatus, and the
// replicator reports the Host's refusals under every reason's label.
func TestRaftAdapterReportsFailureAndRefusals(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h, err := replication.NewHost(replication.Config{NodeID: 1, LogRegion: pmem.NewFake(4096+1<<20, 1), Clock: clk,
		Transport: replication.NewSimNetwork(1, clk).Endpoint(1), Manual: true, TickInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	g, err := h.AddGroup(5, []replication.NodeID{1}, &failingSM{})
	if err != nil {
		t.Fatal(err)
	}
	rg := newRaftGroup(g)
	for i := 0; !g.IsLeader(); i++ {
		if i > 10000 {
			t.Fatal("no leader")
		}
		clk.Advance(time.Millisecond)
		h.Poll()
	}
	if st := rg.Status(); st.Failed || st.Err != "" {
		t.Fatalf("a healthy group reports %+v", st)
	}
	var result error
	g.ProposeAsync([]byte("x"), func(err error) { result = err })
	for i := 0; result == nil && i < 10000; i++ {
		h.Poll()
	}
	st := rg.Status()
	if !st.Failed || !errors.Is(g.Status().Err, errApply) || st.Err == "" {
		t.Fatalf("a failed group reports %+v", st)
	}
	rs := raftReplicator{h: h}.ReplicationStatus()
	if len(rs.Rejected) != int(replication.NumRejectReasons) {
		t.Errorf("refusals reported under %d labels, want %d: %v", len(rs.Rejected), replication.NumRejectReasons, rs.Rejected)
	}
	for _, label := range []string{"frame", "sender", "member", "index"} {
		if _, ok := rs.Rejected[label]; !ok {
			t.Errorf("no %q label in %v", label, rs.Rejected)
		}
	}
}

// TestDropDormantDropsTombstones: a group fenced here leaves a tombstone
// (its term and vote) that outlives a restart; when its volume is gone,
// DropDormant removes the tombstone as it removes dormant logs, and keeps
// the tombstones of volumes that remain.
func TestDropDormantDropsTombstones(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	region := pmem.NewFake(4096+1<<20, 1)
	open := func() *replication.Host {
		h, err := replication.NewHost(replication.Config{NodeID: 1, LogRegion: region, Clock: clk,
			Transport: replication.NewSimNetwork(1, clk).Endpoint(1), Manual: true, TickInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := open()
	for _, id := range []replication.GroupID{5, 6} {
		g, err := h.AddGroup(id, []replication.NodeID{1}, &failingSM{})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; !g.Fenced(); i++ {
			if i > 20000 {
				t.Fatalf("%v never failed", id)
			}
			if g.IsLeader() && i%100 == 0 {
				g.ProposeAsync([]byte("x"), func(error) {})
			}
			clk.Advance(time.Millisecond)
			h.Poll()
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = open()
	defer h.Close()
	if got := h.Tombstones(); len(got) != 2 {
		t.Fatalf("tombstones after the restart: %v, want groups 5 and 6", got)
	}
	keep := func(id cluster.GroupID) bool { return id == 6 }
	if err := (raftReplicator{h: h}).DropDormant(keep); err != nil {
		t.Fatal(err)
	}
	if got := h.Tombstones(); len(got) != 1 || got[0] != 6 {
		t.Fatalf("tombstones after DropDormant keeping group 6: %v, want [6]", got)
	}
}
