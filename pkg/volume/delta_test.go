package volume

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/clock"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
	"basalt/pkg/store"
	"basalt/replication"
)

// deltaCluster is three manual Hosts on a SimNetwork whose replicas are
// pkg/store volumes staging by reference on MemDrives (Simulated: the test
// runs their writers), with every node's transport counting what it sends
// to each peer.
type deltaCluster struct {
	t      *testing.T
	clock  *clock.Manual
	net    *replication.SimNetwork
	hosts  map[nodeID]*replication.Host
	stores map[nodeID]*store.Store
	vols   map[nodeID]*Volume
	sent   map[nodeID]*sentCounter // bytes sent to each node
}

// sentCounter counts the bytes sent to one node: entry payloads in
// messages, and snapshot bodies.
type sentCounter struct{ entries, snapshot atomic.Int64 }

func (s *sentCounter) total() int64 { return s.entries.Load() + s.snapshot.Load() }

// countingTransport counts what its Transport sends to each node.
type countingTransport struct {
	replication.Transport
	sent map[nodeID]*sentCounter
}

func (c countingTransport) Send(group replication.GroupID, msgs []raftpb.Message) {
	for i := range msgs {
		if s := c.sent[nodeID(msgs[i].To)]; s != nil {
			for _, e := range msgs[i].Entries {
				s.entries.Add(int64(len(e.Data)))
			}
		}
	}
	c.Transport.Send(group, msgs)
}

func (c countingTransport) SendSnapshot(group replication.GroupID, m raftpb.Message, body func(io.Writer) error, done func(error)) {
	s := c.sent[nodeID(m.To)]
	c.Transport.SendSnapshot(group, m, func(w io.Writer) error {
		return body(&countingWriter{w: w, n: &s.snapshot})
	}, done)
}

// countingWriter counts bytes and passes the receiver's base on.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.n.Add(int64(n))
	return n, err
}

func (w *countingWriter) ReceiverBase() (replication.SnapshotBase, bool) {
	if bw, ok := w.w.(replication.SnapshotBaseWriter); ok {
		return bw.ReceiverBase()
	}
	return replication.SnapshotBase{}, false
}

const (
	deltaVolumeSize = 16 << 20
	deltaRegionSize = 16 << 20
)

func newDeltaCluster(t *testing.T, seed uint64) *deltaCluster {
	clk := clock.NewManual(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	c := &deltaCluster{t: t, clock: clk, net: replication.NewSimNetwork(seed, clk), hosts: map[nodeID]*replication.Host{},
		stores: map[nodeID]*store.Store{}, vols: map[nodeID]*Volume{}, sent: map[nodeID]*sentCounter{}}
	for _, id := range members {
		c.sent[id] = &sentCounter{}
	}
	for _, id := range members {
		h, err := replication.NewHost(replication.Config{NodeID: id, LogRegion: pmem.NewFake(4096+deltaRegionSize, int64(id)),
			Clock: clk, Logger: testLogger().With("node", id), Manual: true, TickInterval: 10 * time.Millisecond,
			Transport:        countingTransport{Transport: c.net.Endpoint(id), sent: c.sent},
			CompactionMargin: 8, RetainBytes: -1}) // compact past a follower soon: it needs a snapshot
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		st := newDeltaStore(t, clk)
		local, err := st.CreateVolume("v", deltaVolumeSize)
		if err != nil {
			t.Fatal(err)
		}
		v, err := Add(h, 1, members, local)
		if err != nil {
			t.Fatal(err)
		}
		c.hosts[id], c.stores[id], c.vols[id] = h, st, v
	}
	return c
}

func newDeltaStore(t *testing.T, clk clock.Clock) *store.Store {
	db, err := meta.Open(meta.Options{InMemory: true, MemTableSize: 2 << 20, BlockCacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	opts := store.Options{Meta: db, StageByReference: true, Simulated: true, ChunkSize: 16 << 10,
		SegmentStripes: 8, Clock: clk, Logger: testLogger()}
	for range 3 {
		opts.Drives = append(opts.Drives, disk.NewMem(2*deltaVolumeSize))
	}
	st, err := store.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// step advances the clock by a millisecond and runs everything until idle.
func (c *deltaCluster) step() {
	c.clock.Advance(time.Millisecond)
	for range 10000 {
		busy := c.net.Deliver() > 0
		for _, id := range members {
			busy = c.hosts[id].Poll() || busy
			c.stores[id].Work()
		}
		if !busy {
			return
		}
	}
	c.t.Fatal("cluster did not settle")
}

func (c *deltaCluster) runUntil(limit time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := c.clock.Now().Add(limit)
	for !cond() {
		if !c.clock.Now().Before(deadline) {
			c.t.Fatalf("not within %v: %s", limit, what)
		}
		c.step()
	}
}

func (c *deltaCluster) leader() nodeID {
	var leader nodeID
	c.runUntil(5*time.Second, "a leader", func() bool {
		for id, v := range c.vols {
			if v.Group().IsLeader() {
				leader = id
				return true
			}
		}
		return false
	})
	return leader
}

// write writes p at off through node id and waits.
func (c *deltaCluster) write(id nodeID, p []byte, off int64) {
	c.t.Helper()
	var result error = errPending
	c.vols[id].WriteAtAsync(p, off, 0, func(err error) { result = err })
	c.runUntil(5*time.Second, "a write completes", func() bool { return result != errPending })
	if result != nil {
		c.t.Fatal(result)
	}
}

// trim trims [off, off+n) through node id and waits.
func (c *deltaCluster) trim(id nodeID, off, n int64) {
	c.t.Helper()
	var result error = errPending
	c.vols[id].TrimAsync(off, n, func(err error) { result = err })
	c.runUntil(5*time.Second, "a trim completes", func() bool { return result != errPending })
	if result != nil {
		c.t.Fatal(result)
	}
}

// replica reads node id's whole local replica.
func (c *deltaCluster) replica(id nodeID) []byte {
	c.t.Helper()
	b := make([]byte, deltaVolumeSize)
	if err := c.vols[id].Local().ReadAt(context.Background(), b, 0); err != nil {
		c.t.Fatal(err)
	}
	return b
}

// deltaSeed draws the test's seed, or replays VOLUME_DELTA_SEED.
func deltaSeed(t *testing.T) uint64 {
	seed := rand.Uint64()
	if s := os.Getenv("VOLUME_DELTA_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (replay: VOLUME_DELTA_SEED=%d)", seed, seed)
	return seed
}

// TestCutOffFollowerGetsOnlyWhatChanged fills a 16 MiB volume, cuts a
// follower off while W random 4 KiB blocks are written (and a few ranges
// trimmed), with the leader compacting its log past the follower, and lets
// it return: it catches up by a delta snapshot, the bytes sent to it
// (snapshot and entries) stay within 1.5 times the bytes written meanwhile,
// and its replica equals the leader's, block for block. With the delta off
// (SetChangeLimit(0)) the same run streams the whole volume.
func TestCutOffFollowerGetsOnlyWhatChanged(t *testing.T) {
	const w = 192 // blocks written while the follower is away: 768 KiB of 16 MiB
	seed := deltaSeed(t)
	for _, delta := range []bool{true, false} {
		t.Run(map[bool]string{true: "delta", false: "delta off"}[delta], func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			c := newDeltaCluster(t, seed)
			if !delta {
				for _, v := range c.vols {
					v.SetChangeLimit(0)
				}
			}
			leader := c.leader()
			fill := make([]byte, 1<<20)
			for off := int64(0); off < deltaVolumeSize; off += int64(len(fill)) {
				for i := range fill {
					fill[i] = byte(rng.Uint32())
				}
				c.write(leader, fill, off)
			}
			follower := members[int(leader)%3]
			c.runUntil(5*time.Second, "the follower applies the fill", func() bool {
				return c.vols[follower].Group().Status().Applied >= c.vols[leader].Group().Status().Commit
			})
			var others []nodeID
			for _, id := range members {
				if id != follower {
					others = append(others, id)
				}
			}
			c.net.Isolate(follower, others...)
			before := c.sent[follower].total()
			written := int64(0)
			block := make([]byte, 4096)
			for i := range w {
				for j := range block {
					block[j] = byte(rng.Uint32())
				}
				off := rng.Int64N(deltaVolumeSize/4096) * 4096
				c.write(leader, block, off)
				written += int64(len(block))
				if i%64 == 63 { // a trim now and then: the delta must delete it too
					c.trim(leader, rng.Int64N(deltaVolumeSize/4096-4)*4096, 4*4096)
				}
			}
			c.runUntil(5*time.Second, "the leader compacts past the follower", func() bool {
				st := c.vols[leader].Group().Status()
				return st.FirstIndex > c.vols[follower].Group().Status().Applied+1
			})
			before = c.sent[follower].total() // what the partition dropped does not count
			snapBefore, entriesBefore := c.sent[follower].snapshot.Load(), c.sent[follower].entries.Load()
			c.net.Heal()
			start := c.clock.Now()
			c.runUntil(20*time.Second, "the follower catches up", func() bool {
				return c.vols[follower].Group().Status().SnapshotsReceived > 0 &&
					c.vols[follower].Group().Status().Applied >= c.vols[leader].Group().Status().Commit
			})
			elapsed := c.clock.Since(start)
			sent := c.sent[follower].total() - before
			ratio := float64(sent) / float64(written)
			t.Logf("written %d bytes while cut off; sent to the follower %d (snapshot %d, entries %d): %.3fx; "+
				"caught up in %v simulated", written, sent, c.sent[follower].snapshot.Load()-snapBefore,
				c.sent[follower].entries.Load()-entriesBefore, ratio, elapsed)
			if got := c.vols[leader].Group().Status().SnapshotBytesSent; got != uint64(c.sent[follower].snapshot.Load()) {
				t.Errorf("leader's status counts %d snapshot bytes, the transport %d", got, c.sent[follower].snapshot.Load())
			}
			if delta && ratio > 1.5 {
				t.Errorf("sent %.2fx the bytes written, want at most 1.5x", ratio)
			}
			if !delta && ratio < 10 {
				t.Errorf("with the delta off, sent only %.2fx the bytes written: the test does not tell", ratio)
			}
			want, got := c.replica(leader), c.replica(follower)
			for off := 0; off < len(want); off += 4096 {
				if !bytes.Equal(want[off:off+4096], got[off:off+4096]) {
					t.Fatalf("block %d differs between the leader and the follower", off/4096)
				}
			}
		})
	}
}
