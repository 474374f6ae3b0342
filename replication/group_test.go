package replication

import (
	"context"
	"errors"
	"testing"
	"time"

	"basalt/cache"
	"basalt/pkg/pmem"
)

// TestWatchAndStatusFollowLeadershipTransfer transfers leadership and checks
// that Watch reports the new leader on every node and Status agrees.
func TestWatchAndStatusFollowLeadershipTransfer(t *testing.T) {
	c := newSimCluster(t, 21, nil)
	c.startAll()
	leader := c.leader()
	c.run(50 * time.Millisecond)
	watches := map[NodeID]<-chan NodeID{}
	for id, v := range c.vols {
		watches[id] = v.Group().Watch()
	}
	to := leader%3 + 1
	c.vols[leader].Group().TransferLeadership(to)
	c.runUntil(5*time.Second, "the transfer", func() bool { return c.vols[to].Group().IsLeader() })
	c.run(50 * time.Millisecond)
	for id, w := range watches {
		select {
		case got := <-w:
			if got != to {
				t.Errorf("%v's watch says %v, want %v", id, got, to)
			}
		default:
			t.Errorf("%v's watch reported nothing", id)
		}
		st := c.vols[id].Group().Status()
		if st.Leader != to || st.Node != id || st.Group != 1 {
			t.Errorf("%v's status: %+v", id, st)
		}
	}
	st := c.vols[to].Group().Status()
	if st.Role != RoleLeader || len(st.Peers) != 3 {
		t.Errorf("new leader's status: %+v", st)
	}
	if err := c.hosts[to].RemoveGroup(1); err != nil {
		t.Fatal(err)
	}
	if _, open := <-c.vols[to].Group().Watch(); open {
		t.Error("Watch on a removed group is not closed")
	}
	if err := c.write(to, 0, 1); !errors.Is(err, ErrStopped) {
		t.Errorf("write on a removed group: %v, want ErrStopped", err)
	}
	c.crash(to)
	h, err := NewHost(Config{NodeID: to, LogRegion: c.regions[to], Transport: c.net.Endpoint(to), Manual: true,
		Clock: c.clock, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.RecoveredGroups(); len(got) != 0 {
		t.Errorf("a removed group was recovered: %v", got)
	}
	other := to%3 + 1
	c.crash(other)
	h, err = NewHost(Config{NodeID: other, LogRegion: c.regions[other], Transport: c.net.Endpoint(other), Manual: true,
		Clock: c.clock, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.RecoveredGroups(); len(got) != 1 || got[0] != 1 {
		t.Errorf("recovered groups %v, want [g1]", got)
	}
}

// stuckSM applies but never makes anything durable, so its group can never
// compact its log.
type stuckSM struct{ discardSM }

func (s *stuckSM) AppliedIndex() uint64 { return 0 }

// TestCloseUnblocksAGroupWaitingForBufferSpace fills a host's write buffer
// with a group that cannot compact, so that its loop's buffer-space
// admission (space.go) holds its proposals back; Close must still return,
// failing the pending proposals.
func TestCloseUnblocksAGroupWaitingForBufferSpace(t *testing.T) {
	h, err := NewHost(Config{NodeID: 1, Listen: "127.0.0.1:0", LogRegion: pmem.NewFake(4096+256<<10, 1), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	g, err := h.AddGroup(1, []NodeID{1}, &stuckSM{})
	if err != nil {
		t.Fatal(err)
	}
	for !g.IsLeader() {
		time.Sleep(5 * time.Millisecond)
	}
	results := make(chan error, 8)
	for range 8 { // propose until something fails: the buffer holds 256 KiB
		go func() {
			for {
				if err := g.Propose(context.Background(), make([]byte, 4096)); err != nil {
					results <- err
					return
				}
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for h.Stats().AdmissionWaits == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := h.Stats(); st.AdmissionWaits == 0 || st.SpaceWaits != 0 {
		t.Fatal("the buffer never filled")
	}
	time.Sleep(20 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return while a group waited for buffer space")
	}
	for range 8 {
		if err := <-results; !errors.Is(err, ErrStopped) && !errors.Is(err, ErrNoLeader) || errors.Is(err, cache.ErrTooLarge) {
			t.Errorf("pending proposal: %v", err)
		}
	}
}
