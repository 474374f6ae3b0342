package volume

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/qos"
)

// TestQoSHoldsWritesBeforeRaft: on the leader, a write past its limit is
// held before it is proposed (the group's log does not grow while it
// waits) and goes when its token is due; a follower refuses at once,
// without waiting and without spending a token. Manual clock: the release
// time is exact.
func TestQoSHoldsWritesBeforeRaft(t *testing.T) {
	c := newSimCluster(t, 7)
	for _, id := range members {
		c.start(id, newMemory(t, simVolumeSize))
	}
	leader := c.leader()
	if err := c.write(leader, 0, 1); err != nil {
		t.Fatal(err)
	}
	lim := qos.Limits{WriteIOPS: qos.Limit{Rate: 10, Burst: 1}} // one write per 100 ms
	for _, v := range c.vols {
		if err := v.SetQoS(lim); err != nil {
			t.Fatal(err)
		}
	}
	lv := c.vols[leader]
	before := lv.Group().Status().LastIndex
	// Two writes at one instant: the first takes the burst, the second
	// waits exactly 100 ms.
	var first, second asyncErr
	lv.WriteAtAsync(bytes.Repeat([]byte{2}, 4096), 4096, 0, first.set)
	lv.WriteAtAsync(bytes.Repeat([]byte{3}, 4096), 8192, 0, second.set)
	c.run(90 * time.Millisecond)
	if first.get() != nil || second.done() {
		t.Fatalf("after 90ms: first write %v, second (throttled for 100ms) %v", first.get(), second.get())
	}
	if got := lv.Group().Status().LastIndex; got != before+1 {
		t.Fatalf("the throttled write reached Raft while it waited: last index %d → %d", before, got)
	}
	c.runUntilReal(time.Second, "the throttled write completes", second.done)
	if err := second.get(); err != nil {
		t.Fatal(err)
	}
	s := lv.Counters().QoS().Stats(qos.Write)
	if s != (qos.Stats{Throttled: 1, Waited: 100 * time.Millisecond}) {
		t.Fatalf("leader's counters %+v, want one write throttled for 100ms", s)
	}
	// A follower refuses the write (ANA inaccessible) at once, limits or not.
	for id, v := range c.vols {
		if id == leader {
			continue
		}
		var ferr error = errPending
		v.WriteAtAsync(make([]byte, 4096), 0, 0, func(err error) { ferr = err })
		if !errors.Is(ferr, backend.ErrInaccessible) {
			t.Fatalf("follower %d: write gave %v at once, want ErrInaccessible", id, ferr)
		}
		if s := v.Counters().QoS().Stats(qos.Write); s.Throttled != 0 {
			t.Fatalf("follower %d throttled: %+v", id, s)
		}
	}
}

// TestQoSDefersReadsAndTrims: the asynchronous read and trim wait their
// turn too, and come back with their data and results.
func TestQoSDefersReadsAndTrims(t *testing.T) {
	c := newSimCluster(t, 11)
	for _, id := range members {
		c.start(id, newMemory(t, simVolumeSize))
	}
	leader := c.leader()
	lv := c.vols[leader]
	if err := c.write(leader, 3, 9); err != nil {
		t.Fatal(err)
	}
	if err := lv.SetQoS(qos.Limits{IOPS: qos.Limit{Rate: 20, Burst: 1}}); err != nil { // 50 ms apart
		t.Fatal(err)
	}
	if got, want := lv.QoS(), (qos.Limits{IOPS: qos.Limit{Rate: 20, Burst: 1}}); got != want {
		t.Fatalf("QoS() = %v, want %v", got, want)
	}
	buf := make([]byte, 4096)
	var r1, r2, tr asyncErr
	start := c.clock.Now()
	lv.ReadAtAsync(buf, 3*4096, r1.set)
	lv.ReadAtAsync(buf, 3*4096, r2.set)
	lv.TrimAsync(0, 4096, tr.set)
	c.runUntilReal(time.Second, "the first read", r1.done)
	c.runUntilReal(time.Second, "the throttled read", r2.done)
	if d := c.clock.Since(start); r2.get() != nil || d < 50*time.Millisecond {
		t.Fatalf("second read: %v after %v, want success after its 50ms", r2.get(), d)
	}
	if !bytes.Equal(buf, bytes.Repeat([]byte{9}, 4096)) {
		t.Fatal("the throttled read returned the wrong data")
	}
	c.runUntilReal(time.Second, "the throttled trim", tr.done)
	if d := c.clock.Since(start); tr.get() != nil || d < 100*time.Millisecond {
		t.Fatalf("trim: %v after %v, want success after its 100ms", tr.get(), d)
	}
	if s := lv.Counters().QoS().Stats(qos.Read); s.Throttled != 1 {
		t.Fatalf("read counters %+v", s)
	}
	if err := lv.SetQoS(qos.Limits{Bytes: qos.Limit{Burst: 1}}); !errors.Is(err, qos.ErrInvalid) {
		t.Fatalf("SetQoS of a burst without a rate: %v", err)
	}
}

// TestQoSSyncPathsWait: ReadAt, WriteAt and WriteZeroes wait on their
// caller's goroutine (a target worker).
func TestQoSSyncPathsWait(t *testing.T) {
	v := newQoSNode(t, 1)[0]
	if err := v.SetQoS(qos.Limits{IOPS: qos.Limit{Rate: 50, Burst: 1}}); err != nil { // 20 ms apart
		t.Fatal(err)
	}
	ctx := context.Background()
	buf := make([]byte, 4096)
	start := time.Now()
	for i := range 6 {
		var err error
		switch i % 3 {
		case 0:
			err = v.WriteAt(ctx, buf, 0, 0)
		case 1:
			err = v.ReadAt(ctx, buf, 0)
		default:
			err = v.WriteZeroes(ctx, 0, 4096)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The sixth cannot start before five intervals after the first; a
	// command that took longer than an interval lets the next go at once.
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("6 commands at 50 IOPS (burst 1) took %v, want at least 100ms", d)
	}
	r, w := v.Counters().QoS().Stats(qos.Read), v.Counters().QoS().Stats(qos.Write)
	if r.Throttled == 0 && w.Throttled == 0 {
		t.Fatalf("nothing throttled: read %+v write %+v", r, w)
	}
}

// TestQoSNewLeaderEnforcesAtOnce: every replica holds the limits (the
// cluster sets them on every node), so the node that takes over the lead
// throttles its first commands past the burst.
func TestQoSNewLeaderEnforcesAtOnce(t *testing.T) {
	c := newSimCluster(t, 5)
	for _, id := range members {
		c.start(id, newMemory(t, simVolumeSize))
	}
	old := c.leader()
	for _, v := range c.vols {
		if err := v.SetQoS(qos.Limits{IOPS: qos.Limit{Rate: 10, Burst: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	next := members[0]
	if next == old {
		next = members[1]
	}
	c.vols[old].Group().TransferLeadership(next)
	c.runUntil(5*time.Second, "the new leader", func() bool { return c.vols[next].Group().IsLeader() })
	nv := c.vols[next]
	var first, second asyncErr
	nv.WriteAtAsync(make([]byte, 4096), 0, 0, first.set)
	nv.WriteAtAsync(make([]byte, 4096), 4096, 0, second.set)
	c.run(50 * time.Millisecond)
	if first.get() != nil || second.done() {
		t.Fatalf("on the new leader after 50ms: first %v, second %v (want held for 100ms)", first.get(), second.get())
	}
	c.runUntilReal(time.Second, "the held write", second.done)
	if err := second.get(); err != nil {
		t.Fatal(err)
	}
}

// asyncErr is an asynchronous command's result: its callback may run on
// the throttle's goroutine (a deferred read whose barrier completes at
// once), so the test reads it under a lock.
type asyncErr struct {
	mu  sync.Mutex
	err error
	ok  bool
}

func (a *asyncErr) set(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err, a.ok = err, true
}

func (a *asyncErr) done() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ok
}

// get returns the result, errPending before the callback.
func (a *asyncErr) get() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ok {
		return errPending
	}
	return a.err
}

// runUntilReal is runUntil giving the process real time between the
// simulated milliseconds: the throttle lets a held command go from its own
// goroutine, which a loaded machine may not schedule before a simulated
// second has run.
func (c *simCluster) runUntilReal(limit time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := c.clock.Now().Add(limit)
	for !cond() {
		if !c.clock.Now().Before(deadline) {
			c.t.Fatalf("not within %v: %s", limit, what)
		}
		c.run(time.Millisecond)
		time.Sleep(200 * time.Microsecond)
	}
}
