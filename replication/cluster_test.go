package replication

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/cache"
	"basalt/pkg/pmem"
)

// isANA reports whether err is one that pkg/volume maps to an ANA state
// (pkg/volume/errors.go): this node does not, or may no longer, lead.
func isANA(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader) || errors.Is(err, ErrStopped) ||
		errors.Is(err, ErrProposalDropped)
}

// TestPartitionedLeaderStopsServingWhileMajorityCarriesOn isolates the
// leader: its writes never succeed, the other two elect a leader that
// accepts writes, the old leader refuses reads once the new one has written
// (its lease has expired: no stale read), steps down, and after the
// partition heals it catches up.
func TestPartitionedLeaderStopsServingWhileMajorityCarriesOn(t *testing.T) {
	for _, lease := range []bool{true, false} {
		t.Run(map[bool]string{true: "lease", false: "read-index"}[lease], func(t *testing.T) {
			c := newSimCluster(t, 3, func(cfg *Config) { cfg.DisableLease = !lease })
			c.startAll()
			old := c.leader()
			if err := c.write(old, 0, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := c.read(old, 0); err != nil { // takes a lease
				t.Fatal(err)
			}
			var others []NodeID
			for _, id := range c.members {
				if id != old {
					others = append(others, id)
				}
			}
			c.net.Isolate(old, others...)
			var isolatedWrite error = errPending
			c.vols[old].WriteAtAsync(bytes.Repeat([]byte{9}, 4096), 4096, func(err error) { isolatedWrite = err })

			var next NodeID
			c.runUntil(5*time.Second, "a new leader among the majority", func() bool {
				for _, id := range others {
					if c.vols[id].Group().IsLeader() {
						next = id
						return true
					}
				}
				return false
			})
			if err := c.write(next, 0, 2); err != nil {
				t.Fatalf("the majority's leader refused a write: %v", err)
			}
			data, err := c.read(old, 0)
			if err == nil {
				t.Fatalf("the isolated old leader served a read (%d) after the new leader wrote", data[0])
			}
			if !isANA(err) {
				t.Fatalf("isolated old leader's read: %v, want an ANA error", err)
			}
			c.runUntil(5*time.Second, "the old leader steps down", func() bool { return !c.vols[old].Group().IsLeader() })
			if err := c.write(old, 2, 3); !isANA(err) {
				t.Fatalf("write on the isolated node: %v, want an ANA error", err)
			}
			if isolatedWrite == nil {
				t.Fatal("a write on the isolated leader was acknowledged")
			}
			c.net.Heal()
			c.runUntil(5*time.Second, "the old leader catches up", func() bool {
				return c.vols[old].Group().Status().Applied == c.vols[next].Group().Status().Commit
			})
			got := make([]byte, 4096)
			if err := c.locals[old].readLocal(got, 0); err != nil || got[0] != 2 {
				t.Fatalf("old leader's replica holds %d (%v) after catching up, want 2", got[0], err)
			}
		})
	}
}

// TestFollowerBehindCompactionCatchesUpBySnapshot stops a follower, writes
// enough for the others to compact their logs past it, restarts it, and
// checks that it catches up by a streamed snapshot and then from the log.
func TestFollowerBehindCompactionCatchesUpBySnapshot(t *testing.T) {
	c := newSimCluster(t, 5, func(cfg *Config) { cfg.CompactionMargin, cfg.RetainBytes = 4, -1 })
	c.startAll()
	leader := c.leader()
	follower := c.members[(int(leader))%3]
	c.crash(follower)
	for i := range int64(40) {
		if err := c.write(leader, i%64, byte(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	st := c.vols[leader].Group().Status()
	if st.FirstIndex <= 10 {
		t.Fatalf("leader did not compact: first index %d", st.FirstIndex)
	}
	c.start(follower)
	c.runUntil(5*time.Second, "the follower catches up", func() bool {
		return c.vols[follower].Group().Status().Applied == c.vols[leader].Group().Status().Commit
	})
	if err := c.write(leader, 63, 0xEE); err != nil {
		t.Fatal(err)
	}
	c.run(50 * time.Millisecond)
	if got := c.vols[follower].Group().Status().SnapshotsReceived; got == 0 {
		t.Fatal("the follower caught up without a snapshot")
	}
	if got := c.vols[leader].Group().Status().SnapshotsSent; got == 0 {
		t.Fatal("the leader reports no snapshot sent")
	}
	want, got := c.locals[leader].bytes(), c.locals[follower].bytes()
	if !bytes.Equal(got, want) {
		t.Fatal("the follower's replica differs from the leader's after the snapshot")
	}
}

// TestWholeClusterRestartKeepsAcknowledgedWrites crashes all three nodes
// (persistent-memory crash images) and restarts them: every acknowledged
// write reads back.
func TestWholeClusterRestartKeepsAcknowledgedWrites(t *testing.T) {
	c := newSimCluster(t, 9, nil)
	c.startAll()
	leader := c.leader()
	for i := range int64(20) {
		if err := c.write(leader, i, byte(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range c.members {
		c.crash(id)
	}
	c.startAll()
	leader = c.leader()
	for i := range int64(20) {
		data, err := c.read(leader, i)
		if err != nil || data[0] != byte(100+i) {
			t.Fatalf("block %d after restart: %d, %v; want %d", i, data[0], err, 100+i)
		}
	}
}

// persistChecker is a transport that checks, for every response a node
// sends, that what the response vouches for is already durable: the node's
// region, recovered from its persisted bytes alone, holds the acknowledged
// entries (MsgAppResp) or the vote (MsgVoteResp).
type persistChecker struct {
	Transport
	t       *testing.T
	region  *pmem.Fake
	checked *int
}

func (p persistChecker) Send(group GroupID, msgs []raftpb.Message) {
	for _, m := range msgs {
		if m.Reject || (m.Type != raftpb.MsgAppResp && m.Type != raftpb.MsgVoteResp) {
			continue
		}
		buf, err := cache.Open(pmem.NewFakeImage(p.region.Persisted(), 0), cache.Options{})
		if err != nil {
			p.t.Fatal(err)
		}
		logs, err := recoverLogs(buf)
		if err != nil {
			p.t.Fatal(err)
		}
		s := logs[group]
		switch {
		case m.Type == raftpb.MsgAppResp && (s == nil || s.lastIndex() < m.Index):
			p.t.Errorf("%v acknowledged entry %d before persisting it", NodeID(m.From), m.Index)
		case m.Type == raftpb.MsgVoteResp && (s == nil || s.hard.Vote != m.To || s.hard.Term != m.Term):
			p.t.Errorf("%v granted a vote in term %d before persisting it", NodeID(m.From), m.Term)
		}
		*p.checked++
	}
	p.Transport.Send(group, msgs)
}

// TestResponsesLeaveOnlyAfterPersist checks the Ready order: append and vote
// responses are sent only once the entries and vote they vouch for are
// durable in the write buffer (while the leader's appends may leave before
// its own persist).
func TestResponsesLeaveOnlyAfterPersist(t *testing.T) {
	c := newSimCluster(t, 11, nil)
	checked := 0
	c.wrap = func(id NodeID, tr Transport) Transport {
		return persistChecker{Transport: tr, t: t, region: c.regions[id], checked: &checked}
	}
	c.startAll()
	leader := c.leader()
	for i := range int64(10) {
		if err := c.write(leader, i, byte(i)); err != nil {
			t.Fatal(err)
		}
	}
	if checked < 20 {
		t.Fatalf("only %d responses checked", checked)
	}
}

// TestFollowerRefusesIOWithANAErrors: a follower refuses reads, writes
// and trims at once with ErrNotLeader (which pkg/volume wraps with
// backend.ErrInaccessible: its own test checks that).
func TestFollowerRefusesIOWithANAErrors(t *testing.T) {
	c := newSimCluster(t, 13, nil)
	c.startAll()
	leader := c.leader()
	c.run(50 * time.Millisecond) // followers learn the leader
	for _, id := range c.members {
		if id == leader {
			continue
		}
		v := c.vols[id]
		var errs []error
		v.WriteAtAsync(make([]byte, 4096), 0, func(err error) { errs = append(errs, err) })
		v.TrimAsync(0, 4096, func(err error) { errs = append(errs, err) })
		v.ReadAtAsync(make([]byte, 4096), 0, func(err error) { errs = append(errs, err) })
		if len(errs) != 3 {
			t.Fatalf("%v: %d of 3 requests failed at once", id, len(errs))
		}
		for _, err := range errs {
			if !errors.Is(err, ErrNotLeader) {
				t.Errorf("%v: %v, want ErrNotLeader", id, err)
			}
		}
		if v.Group().Leader() != leader {
			t.Errorf("%v says the leader is %v, want %v", id, v.Group().Leader(), leader)
		}
	}
}

// TestIdleGroupDoesNotPinSharedBuffer runs a busy and an idle group on
// hosts whose write buffers hold a few times less than the busy group
// writes: the idle group's old records would pin the buffer (Release frees a
// prefix), so the releaser asks it to checkpoint, and the busy group never
// waits for space. Then every node crashes and both groups recover.
func TestIdleGroupDoesNotPinSharedBuffer(t *testing.T) {
	c := newSimCluster(t, 17, func(cfg *Config) { cfg.CompactionMargin = 8 })
	for _, id := range c.members {
		c.regions[id] = pmem.NewFake(4096+256<<10, int64(id))
	}
	c.startAll()
	idle := map[NodeID]*blockSM{}
	idleLocals := map[NodeID]*blockSM{}
	for _, id := range c.members {
		mem := newBlockSM(testVolumeSize)
		v, err := addBlockSM(c.hosts[id], 2, c.members, mem)
		if err != nil {
			t.Fatal(err)
		}
		idle[id], idleLocals[id] = v, mem
	}
	var idleLeader NodeID
	c.runUntil(5*time.Second, "a leader for the idle group", func() bool {
		for id, v := range idle {
			if v.Group().IsLeader() {
				idleLeader = id
				return true
			}
		}
		return false
	})
	var idleWrite error = errPending
	idle[idleLeader].WriteAtAsync(bytes.Repeat([]byte{0x5A}, 4096), 0, func(err error) { idleWrite = err })
	c.runUntil(time.Second, "the idle group's write", func() bool { return idleWrite != errPending })
	if idleWrite != nil {
		t.Fatal(idleWrite)
	}
	leader := c.leader()
	for i := range 300 { // 300 x 4 KiB: several times the 256 KiB buffer
		if err := c.write(leader, int64(i%64), byte(i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for _, id := range c.members {
		st := c.hosts[id].Stats()
		if st.SpaceWaits > 0 || st.Used*4 > st.Size*3 {
			t.Errorf("%v: buffer %d of %d bytes used, %d waits for space", id, st.Used, st.Size, st.SpaceWaits)
		}
	}
	for _, id := range c.members {
		c.crash(id)
	}
	c.startAll()
	for _, id := range c.members {
		mem := idleLocals[id]
		if _, err := addBlockSM(c.hosts[id], 2, c.members, mem); err != nil {
			t.Fatal(err)
		}
	}
	leader = c.leader()
	data, err := c.read(leader, int64(299%64))
	if err != nil || data[0] != byte(299%256) {
		t.Fatalf("busy group after restart: %d, %v", data[0], err)
	}
	got := make([]byte, 4096)
	if err := idleLocals[idleLeader].readLocal(got, 0); err != nil || got[0] != 0x5A {
		t.Fatalf("idle group's replica: %d, %v", got[0], err)
	}
}
