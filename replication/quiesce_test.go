package replication

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// countingTransport counts what a host sends: group messages and node
// heartbeats (group 0), apart.
type countingTransport struct {
	Transport
	group, node *atomic.Int64
}

func (t countingTransport) Send(group GroupID, msgs []raftpb.Message) {
	if group == 0 {
		t.node.Add(int64(len(msgs)))
	} else {
		t.group.Add(int64(len(msgs)))
	}
	t.Transport.Send(group, msgs)
}

// quiesceCluster is a simCluster whose hosts' sends are counted.
type quiesceCluster struct {
	*simCluster
	group, node atomic.Int64
}

func newQuiesceCluster(t *testing.T, seed uint64, adjust func(*Config)) *quiesceCluster {
	q := &quiesceCluster{simCluster: newSimCluster(t, seed, adjust)}
	q.wrap = func(_ NodeID, tr Transport) Transport {
		return countingTransport{Transport: tr, group: &q.group, node: &q.node}
	}
	q.startAll()
	return q
}

// electionTimeout of the sim cluster's hosts: 10 ticks of 10 ms.
const simElectionTimeout = 100 * time.Millisecond

// allQuiesced reports whether every running member of the group is
// quiesced.
func (c *quiesceCluster) allQuiesced() bool {
	for _, v := range c.vols {
		if !v.Group().Status().Quiesced {
			return false
		}
	}
	return len(c.vols) > 0
}

func (c *quiesceCluster) waitQuiesced(what string) {
	c.t.Helper()
	c.runUntil(2*time.Second, what, c.allQuiesced)
}

// quiesceSeed draws a fresh seed per run (BASALT_QUIESCE_FIRST replays).
func quiesceSeed(t *testing.T) uint64 {
	first, _ := freshSeeds(t, "BASALT_QUIESCE", 1)
	return first
}

// TestIdleGroupQuiesces: once a write is done, every member quiesces, and
// for 200 ticks after that the group sends no message at all, while the
// hosts' node heartbeats go on; with quiescence disabled the same idle
// stretch costs heartbeats every tick.
func TestIdleGroupQuiesces(t *testing.T) {
	seed := quiesceSeed(t)
	idle := func(disable bool) (group, node int64) {
		c := newQuiesceCluster(t, seed, func(cfg *Config) { cfg.DisableQuiesce = disable })
		leader := c.leader()
		if err := c.write(leader, 0, 7); err != nil {
			t.Fatal(err)
		}
		if disable {
			c.run(500 * time.Millisecond)
			if c.allQuiesced() {
				t.Fatal("quiesced with DisableQuiesce")
			}
		} else {
			c.waitQuiesced("every member quiesces after the write")
			c.run(20 * time.Millisecond) // answers to heartbeats still in flight
			if !c.allQuiesced() {
				t.Fatal("a member woke up with nothing to do")
			}
		}
		g0, n0 := c.group.Load(), c.node.Load()
		c.run(2 * time.Second) // 200 ticks
		return c.group.Load() - g0, c.node.Load() - n0
	}
	group, node := idle(false)
	t.Logf("quiesced, 200 idle ticks: %d group messages, %d node heartbeats", group, node)
	if group != 0 {
		t.Errorf("a quiesced group sent %d messages in 200 ticks, want 0", group)
	}
	if node < 2*3*190 {
		t.Errorf("%d node heartbeats in 200 ticks from 3 hosts to 2 peers each, want about 1200", node)
	}
	awake, _ := idle(true)
	t.Logf("not quiesced, 200 idle ticks: %d group messages", awake)
	if awake < 2*200 {
		t.Errorf("with quiescence disabled the group sent only %d messages in 200 ticks", awake)
	}
}

// TestWriteWakesQuiescedGroup: a write to a quiesced leader completes, is
// on every replica, and the group quiesces again afterwards.
func TestWriteWakesQuiescedGroup(t *testing.T) {
	c := newQuiesceCluster(t, quiesceSeed(t), nil)
	leader := c.leader()
	if err := c.write(leader, 0, 1); err != nil {
		t.Fatal(err)
	}
	c.waitQuiesced("quiesced after the first write")
	for i := range int64(5) {
		if err := c.write(leader, i, byte(10+i)); err != nil {
			t.Fatalf("write %d to the quiesced leader: %v", i, err)
		}
	}
	c.waitQuiesced("quiesced again after the writes")
	for id, sm := range c.locals {
		for i := range int64(5) {
			if got := sm.bytes()[i*4096]; got != byte(10+i) {
				t.Errorf("node %v block %d: %d, want %d", id, i, got, 10+i)
			}
		}
	}
}

// TestQuiescedLeaderCrashElectsNewLeader: the leader of a quiesced group
// crashes; its followers, which tick no Raft, hear its node fall silent
// and elect a new leader, which takes writes. The silence takes one
// election timeout, the election usually at most one more (117-200 ms in
// most runs); a first election that fails (a split or refused pre-vote)
// costs another randomised timeout, as it does in a group that never
// quiesced (there 104-194 ms, and up to 333 ms in 3 of 60 runs), hence
// the bound of four election timeouts.
func TestQuiescedLeaderCrashElectsNewLeader(t *testing.T) {
	for range 3 {
		seed := quiesceSeed(t)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			c := newQuiesceCluster(t, seed, nil)
			old := c.leader()
			if err := c.write(old, 0, 1); err != nil {
				t.Fatal(err)
			}
			c.waitQuiesced("quiesced")
			c.run(time.Second)
			crashed := c.clock.Now()
			c.crash(old)
			var next NodeID
			c.runUntil(time.Second, "a new leader", func() bool {
				for id, v := range c.vols {
					if v.Group().IsLeader() {
						next = id
						return true
					}
				}
				return false
			})
			took := c.clock.Since(crashed)
			t.Logf("new leader %v %v after the quiesced leader %v crashed", next, took, old)
			if limit := 4 * simElectionTimeout; took > limit {
				t.Errorf("new leader after %v, want at most %v", took, limit)
			}
			if err := c.write(next, 1, 2); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPartitionedFollowerOfQuiescedGroupCatchesUp: a follower of a
// quiesced group is cut off; it wakes when the leader's node falls silent
// and campaigns in vain (pre-vote keeps the term), the leader takes writes
// with the other follower; once healed the follower catches up with the
// same leader and the group quiesces again.
func TestPartitionedFollowerOfQuiescedGroupCatchesUp(t *testing.T) {
	c := newQuiesceCluster(t, quiesceSeed(t), nil)
	leader := c.leader()
	if err := c.write(leader, 0, 1); err != nil {
		t.Fatal(err)
	}
	c.waitQuiesced("quiesced")
	cut := c.members[int(leader)%3]
	c.net.Isolate(cut, c.othersOf(cut)...)
	c.runUntil(time.Second, "the cut-off follower wakes", func() bool { return !c.vols[cut].Group().Status().Quiesced })
	term := c.vols[leader].Group().Status().Term
	for i := range int64(8) {
		if err := c.write(leader, i, byte(20+i)); err != nil {
			t.Fatal(err)
		}
	}
	c.run(time.Second)
	c.net.Heal()
	want := c.vols[leader].Group().Status().Applied
	c.runUntil(2*time.Second, "the follower catches up", func() bool { return c.vols[cut].Group().Status().Applied >= want })
	c.waitQuiesced("quiesced again after the heal")
	if s := c.vols[leader].Group().Status(); s.Leader != leader || s.Term != term {
		t.Errorf("leader %v term %d after the heal, want %v term %d (no disruption)", s.Leader, s.Term, leader, term)
	}
	if !bytes.Equal(c.locals[cut].bytes(), c.locals[leader].bytes()) {
		t.Error("the healed follower's replica differs from the leader's")
	}
}

func (c *simCluster) othersOf(id NodeID) []NodeID {
	var out []NodeID
	for _, m := range c.members {
		if m != id {
			out = append(out, m)
		}
	}
	return out
}

// TestReadOnQuiescedLeader: a quiesced leader holds no lease; a read wakes
// the group and confirms leadership with a ReadIndex round (group messages
// go out) and returns the last write. A quiesced leader cut off from both
// followers serves no read at all once they elected another leader, which
// took a newer write, and it steps down.
func TestReadOnQuiescedLeader(t *testing.T) {
	c := newQuiesceCluster(t, quiesceSeed(t), nil)
	leader := c.leader()
	if err := c.write(leader, 3, 9); err != nil {
		t.Fatal(err)
	}
	if _, err := c.read(leader, 3); err != nil { // takes a lease
		t.Fatal(err)
	}
	if c.vols[leader].Group().lease.Load() == nil {
		t.Fatal("no lease after a read")
	}
	c.waitQuiesced("quiesced")
	if s := c.vols[leader].Group().Status(); !s.LeaseUntil.IsZero() || c.vols[leader].Group().lease.Load() != nil {
		t.Fatalf("a quiesced leader holds a lease until %v", s.LeaseUntil)
	}
	sent := c.group.Load()
	got, err := c.read(leader, 3)
	if err != nil || got[0] != 9 {
		t.Fatalf("read on the quiesced leader: %d, %v; want 9", got[0], err)
	}
	if c.group.Load() == sent {
		t.Error("the read on a quiesced leader sent no message: it did not confirm its leadership")
	}
	c.waitQuiesced("quiesced again after the read")

	c.net.Isolate(leader, c.othersOf(leader)...)
	var next NodeID
	c.runUntil(time.Second, "the majority elects another leader", func() bool {
		for id, v := range c.vols {
			if id != leader && v.Group().IsLeader() {
				next = id
				return true
			}
		}
		return false
	})
	if err := c.write(next, 3, 10); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var result error = errPending
	c.vols[leader].ReadAtAsync(buf, 3*4096, func(err error) { result = err })
	c.runUntil(2*time.Second, "the cut-off leader answers the read", func() bool { return result != errPending })
	if result == nil {
		t.Fatalf("the cut-off old leader served a read (%d) after another leader took a newer write", buf[0])
	}
	c.runUntil(time.Second, "the cut-off leader steps down", func() bool { return !c.vols[leader].Group().IsLeader() })
}

// TestMetadataGroupStaysAwake: a group named in AlwaysAwake never
// quiesces.
func TestMetadataGroupStaysAwake(t *testing.T) {
	c := newQuiesceCluster(t, quiesceSeed(t), func(cfg *Config) { cfg.AlwaysAwake = []GroupID{1} })
	leader := c.leader()
	if err := c.write(leader, 0, 1); err != nil {
		t.Fatal(err)
	}
	c.run(time.Second)
	for id, v := range c.vols {
		if v.Group().Status().Quiesced {
			t.Errorf("node %v: group 1 quiesced though it is AlwaysAwake", id)
		}
	}
}

// TestNodeHeartbeatOnlyOnGroupZero: group 0 carries node heartbeats and
// nothing else; anything else on it is refused.
func TestNodeHeartbeatOnlyOnGroupZero(t *testing.T) {
	c := newSimCluster(t, 1, nil)
	c.startAll()
	h := c.hosts[1]
	hh := hostHandler{h}
	hh.HandleMessage(0, raftpb.Message{Type: raftpb.MsgHeartbeat, From: 2, To: 1}, simSource{})
	if got := h.Stats().Rejected[RejectType]; got != 0 {
		t.Fatalf("a node heartbeat was refused (%d)", got)
	}
	if !h.live.heardWithin(2, time.Millisecond) {
		t.Error("a node heartbeat did not count as hearing from its sender")
	}
	hh.HandleMessage(0, raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1, Term: 1}, simSource{})
	if got := h.Stats().Rejected[RejectType]; got != 1 {
		t.Errorf("an append on group 0: %d refusals of its type, want 1", got)
	}
}

// TestTCPQuiescedLeaderLossFailsOverWithinTwoSeconds: three goroutine-mode
// hosts on loopback TCP quiesce their idle group (the node heartbeats go as
// group-0 message frames); closing the quiesced leader's host, the others
// elect a leader that takes a write within 2 s.
func TestTCPQuiescedLeaderLossFailsOverWithinTwoSeconds(t *testing.T) {
	c := newTCPCluster(t, 8<<20, nil)
	leader, ok := c.leader(5 * time.Second)
	if !ok {
		t.Fatal("no leader elected")
	}
	ctx := context.Background()
	if err := c.vols[leader].WriteAt(ctx, block(0), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for quiet := false; !quiet; {
		if time.Now().After(deadline) {
			t.Fatal("the idle group did not quiesce on every host within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
		quiet = true
		for _, v := range c.vols {
			quiet = quiet && v.Group().Status().Quiesced
		}
	}
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	c.stop(leader)
	for {
		if time.Since(killed) > 5*time.Second {
			t.Fatal("no write succeeded within 5 s of losing the quiesced leader")
		}
		id, ok := c.leader(50 * time.Millisecond)
		if !ok {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.vols[id].WriteAt(wctx, block(1), 4096)
		cancel()
		if err == nil {
			break
		}
	}
	failover := time.Since(killed)
	t.Logf("failover from a quiesced leader: %v", failover)
	if failover > 2*time.Second {
		t.Errorf("failover took %v, want under 2 s", failover)
	}
}
