package volume

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/replication"
)

// mapErr gives each of replication's leadership errors the backend class
// it wrapped before replication knew nothing of backends, with the same
// text, and leaves other errors alone.
func TestMapErrGivesTheBackendClasses(t *testing.T) {
	stoppedWithCause := fmt.Errorf("%w: %w", replication.ErrStopped, errors.New("apply failed"))
	tests := []struct {
		err, class error
		text       string
	}{
		{replication.ErrNotLeader, backend.ErrInaccessible, "replication: not the leader: backend: volume not accessible on this node"},
		{replication.ErrNoLeader, backend.ErrTransition, "replication: no leader, election in progress: backend: volume in transition"},
		{replication.ErrStopped, backend.ErrInaccessible, "replication: group stopped: backend: volume not accessible on this node"},
		{stoppedWithCause, backend.ErrInaccessible, ""},
		{replication.ErrProposalDropped, backend.ErrTransition, "replication: proposal dropped: backend: volume in transition"},
		{fmt.Errorf("wrapped: %w", replication.ErrNoLeader), backend.ErrTransition, ""},
	}
	for _, tt := range tests {
		got := mapErr(tt.err)
		if !errors.Is(got, tt.err) || !errors.Is(got, tt.class) {
			t.Errorf("mapErr(%v) = %v, want it to wrap %v and %v", tt.err, got, tt.err, tt.class)
		}
		if tt.text != "" && got.Error() != tt.text {
			t.Errorf("mapErr(%v) reads %q, want %q", tt.err, got, tt.text)
		}
	}
	for _, err := range []error{nil, context.Canceled, replication.ErrTooLarge, backend.ErrOutOfRange, replication.ErrClosed} {
		if got := mapErr(err); got != err {
			t.Errorf("mapErr(%v) = %v, want it unchanged", err, got)
		}
	}
}

// TestFollowerRefusesIOWithANAErrors: a follower refuses every kind of I/O
// at once with replication.ErrNotLeader wrapping backend.ErrInaccessible
// (target/status.go: ANA Inaccessible), a removed group and a volume never
// bound with ErrStopped wrapping it too. The replicas are full: a follower
// answers with the ANA error all the same, not with its own lack of space
// (the host would fail the write instead of using the leader's path).
func TestFollowerRefusesIOWithANAErrors(t *testing.T) {
	c := newSimCluster(t, 13)
	for _, id := range members {
		c.start(id, fullReplica{newMemory(t, simVolumeSize)})
	}
	leader := c.leader()
	c.run(50 * time.Millisecond) // followers learn the leader
	ctx := context.Background()
	for _, id := range members {
		if id == leader {
			continue
		}
		v := c.vols[id]
		var errs []error
		v.WriteAtAsync(make([]byte, 4096), 0, 0, func(err error) { errs = append(errs, err) })
		v.TrimAsync(0, 4096, func(err error) { errs = append(errs, err) })
		v.ReadAtAsync(make([]byte, 4096), 0, func(err error) { errs = append(errs, err) })
		if len(errs) != 3 {
			t.Fatalf("%v: %d of 3 asynchronous requests failed at once", id, len(errs))
		}
		errs = append(errs, v.WriteAt(ctx, make([]byte, 4096), 0, 0), v.ReadAt(ctx, make([]byte, 4096), 0),
			v.Flush(ctx), v.Trim(ctx, 0, 4096), v.WriteZeroes(ctx, 0, 4096))
		for i, err := range errs {
			if !errors.Is(err, replication.ErrNotLeader) || !errors.Is(err, backend.ErrInaccessible) {
				t.Errorf("%v request %d: %v, want ErrNotLeader wrapping backend.ErrInaccessible", id, i, err)
			}
		}
	}
	if err := c.hosts[leader].RemoveGroup(1); err != nil {
		t.Fatal(err)
	}
	if err := c.write(leader, 0, 1); !errors.Is(err, replication.ErrStopped) || !errors.Is(err, backend.ErrInaccessible) {
		t.Errorf("write on a removed group: %v, want ErrStopped wrapping backend.ErrInaccessible", err)
	}
	unbound := newVolume(newMemory(t, simVolumeSize), clock.Real())
	if err := unbound.Flush(ctx); !errors.Is(err, replication.ErrStopped) || !errors.Is(err, backend.ErrInaccessible) {
		t.Errorf("Flush on a volume bound to no group: %v", err)
	}
}

// New attaches a volume to a group added without a state machine, and
// refuses a group that has one.
func TestNewAttachesToAGroupAddedWithout(t *testing.T) {
	c := newSimCluster(t, 19)
	h, err := replication.NewHost(replication.Config{NodeID: 1, LogRegion: c.regions[1], Clock: c.clock,
		Logger: testLogger(), Transport: c.net.Endpoint(1), Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	g, err := h.AddGroup(1, []nodeID{1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(g, newMemory(t, simVolumeSize))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(g, newMemory(t, simVolumeSize)); !errors.Is(err, replication.ErrConfig) {
		t.Errorf("a second New on the group: %v, want ErrConfig", err)
	}
	c.hosts[1], c.vols[1] = h, v
	c.runUntil(5*time.Second, "the one member leads", func() bool { return g.IsLeader() })
	if err := c.write(1, 3, 7); err != nil {
		t.Fatal(err)
	}
	if b, err := c.read(1, 3); err != nil || b[0] != 7 {
		t.Fatalf("read back %d, %v", b[0], err)
	}
}

// fullReplica is a replica with no room for any write.
type fullReplica struct{ *backend.Memory }

func (fullReplica) CheckSpace(off, n, headroom int64) error { return backend.ErrNoSpace }
