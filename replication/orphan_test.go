package replication

import (
	"context"
	"errors"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/pmem"
)

// TestOneReplicaGroupAheadOfItsLogIsRefused: a group whose only voter is
// this node fails and is fenced (its log dropped); after a restart it is
// added again over a replica that had applied entries the new, empty log
// does not hold. AddGroup refuses it with ErrOrphanReplica. Without the
// check the group started, and a write proposed then was acknowledged at
// an index at or below the replica's applied one, which Apply skips: lost.
func TestOneReplicaGroupAheadOfItsLogIsRefused(t *testing.T) {
	clk := clock.NewManual(testEpoch)
	region := pmem.NewFake(4096+1<<20, 3)
	open := func() *Host {
		h, err := NewHost(Config{NodeID: 1, LogRegion: region, Clock: clk, Logger: testLogger(),
			Transport: NewSimNetwork(1, clk).Endpoint(1), Manual: true, TickInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := open()
	sm := &faultySM{failAt: 12}
	g, err := h.AddGroup(1, []NodeID{1}, sm)
	if err != nil {
		t.Fatal(err)
	}
	l := &loadGroup{g: g}
	for i := 0; !g.Fenced(); i++ {
		if i > 20000 {
			t.Fatalf("the group never failed: %+v", g.Status())
		}
		l.fill()
		clk.Advance(time.Millisecond)
		h.Poll()
	}
	applied := sm.applied
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = open()
	defer h.Close()
	replica := &faultySM{applied: applied} // the replica keeps what it applied
	g, err = h.AddGroup(1, []NodeID{1}, replica)
	if errors.Is(err, ErrOrphanReplica) {
		t.Logf("refused: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("AddGroup: %v, want ErrOrphanReplica", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Propose(ctx, []byte("new write")) }()
	for i := 0; i < 2000 && len(done) == 0; i++ {
		clk.Advance(time.Millisecond)
		h.Poll()
	}
	t.Fatalf("a one-replica group with a replica at index %d started on an empty log (proposal: %v; the replica's "+
		"applied index after it: %d): the write is acknowledged and skipped", applied, <-done, replica.applied)
}
