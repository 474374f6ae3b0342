package replication

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/pmem"
)

// indexSM is a blockSM that persists its applied index on every entry,
// those without data included (IndexRecorder), as the metadata's state
// machine does.
type indexSM struct {
	*blockSM
	mu       sync.Mutex
	recorded []uint64
}

func (s *indexSM) Apply(ctx context.Context, index uint64, data []byte) error {
	if err := s.blockSM.Apply(ctx, index, data); err != nil {
		return err
	}
	s.durable.Store(index)
	return nil
}

func (s *indexSM) RecordIndex(_ context.Context, index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorded = append(s.recorded, index)
	s.applied.Store(index)
	s.durable.Store(index)
	return nil
}

// TestEntriesWithoutDataAreRecorded: a state machine that persists its
// applied index is told of the entries Apply never sees (a new leader's
// empty entry, a configuration change), so that its index keeps up with
// the group's and a log compacted over them never starts past it (which a
// node's restart took for lost metadata).
func TestEntriesWithoutDataAreRecorded(t *testing.T) {
	clk := clock.NewManual(testEpoch)
	net := NewSimNetwork(3, clk)
	h, err := NewHost(Config{NodeID: 1, LogRegion: pmem.NewFake(4096+1<<20, 3), Clock: clk, Logger: testLogger(),
		Transport: net.Endpoint(1), Manual: true, TickInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	sm := &indexSM{blockSM: newBlockSM(testVolumeSize)}
	g, err := h.AddGroup(1, []NodeID{1}, sm)
	if err != nil {
		t.Fatal(err)
	}
	poll := func(cond func() bool) {
		for range 2000 {
			if cond() {
				return
			}
			net.Deliver()
			h.Poll()
			clk.Advance(time.Millisecond)
		}
		t.Fatal("condition not reached")
	}
	poll(func() bool { return g.IsLeader() && g.Status().Applied >= 2 })
	result := make(chan error, 1)
	go func() { result <- g.ChangeMembers(context.Background(), MemberChange{AddLearner, 5}) }()
	poll(func() bool { return len(result) == 1 })
	if err := <-result; err != nil {
		t.Fatal(err)
	}
	applied := g.Status().Applied
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if !slices.Contains(sm.recorded, 2) || !slices.Contains(sm.recorded, applied) {
		t.Fatalf("recorded indexes %v, want the leader's empty entry 2 and the configuration change %d", sm.recorded, applied)
	}
	if got := sm.AppliedIndex(); got != applied {
		t.Fatalf("the state machine's index is %d, the group applied %d", got, applied)
	}
}
