package replication

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/pmem"
)

var testEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// testLogger discards logs unless REPLICATION_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("REPLICATION_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// simCluster is three manual Hosts on a SimNetwork, driven by the test's
// goroutine.
type simCluster struct {
	t       testing.TB
	clock   *clock.Manual
	net     *SimNetwork
	members []NodeID
	regions map[NodeID]*pmem.Fake
	hosts   map[NodeID]*Host
	locals  map[NodeID]*blockSM // each node's state, kept across crashes
	vols    map[NodeID]*blockSM // those of the nodes running
	cfg     func(*Config)       // adjusts each host's config
	wrap    func(NodeID, Transport) Transport
}

const testVolumeSize = 256 << 10

func newSimCluster(t testing.TB, seed uint64, adjust func(*Config)) *simCluster {
	clk := clock.NewManual(testEpoch)
	c := &simCluster{t: t, clock: clk, net: NewSimNetwork(seed, clk), members: []NodeID{1, 2, 3},
		regions: map[NodeID]*pmem.Fake{}, hosts: map[NodeID]*Host{}, locals: map[NodeID]*blockSM{},
		vols: map[NodeID]*blockSM{}, cfg: adjust}
	for _, id := range c.members {
		c.regions[id] = pmem.NewFake(4096+1<<20, int64(seed)*7+int64(id))
		c.locals[id] = newBlockSM(testVolumeSize)
	}
	return c
}

// start opens node id's host and joins volume group 1.
func (c *simCluster) start(id NodeID) {
	c.t.Helper()
	var tr Transport = c.net.Endpoint(id)
	if c.wrap != nil {
		tr = c.wrap(id, tr)
	}
	cfg := Config{NodeID: id, LogRegion: c.regions[id], Clock: c.clock, Logger: testLogger().With("node", id),
		Transport: tr, Manual: true, TickInterval: 10 * time.Millisecond}
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	h, err := NewHost(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		c.t.Fatal(err)
	}
	v, err := addBlockSM(h, 1, c.members, c.locals[id])
	if err != nil {
		c.t.Fatal(err)
	}
	c.hosts[id], c.vols[id] = h, v
}

func (c *simCluster) startAll() {
	for _, id := range c.members {
		c.start(id)
	}
}

// crash abandons node id's host and keeps its region's crash image.
func (c *simCluster) crash(id NodeID) {
	c.net.Crash(id)
	c.regions[id] = c.regions[id].CrashRegion()
	delete(c.hosts, id)
	delete(c.vols, id)
}

// run advances simulated time by d in 1 ms steps, delivering and polling.
func (c *simCluster) run(d time.Duration) {
	end := c.clock.Now().Add(d)
	for c.clock.Now().Before(end) {
		c.settle()
		c.clock.Advance(time.Millisecond)
	}
	c.settle()
}

func (c *simCluster) settle() {
	for range 10000 {
		busy := c.net.Deliver() > 0
		for _, id := range c.members {
			if h := c.hosts[id]; h != nil {
				busy = h.Poll() || busy
			}
		}
		if !busy {
			return
		}
	}
	c.t.Fatal("cluster did not settle")
}

// runUntil runs until cond holds, failing after limit.
func (c *simCluster) runUntil(limit time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := c.clock.Now().Add(limit)
	for !cond() {
		if !c.clock.Now().Before(deadline) {
			c.t.Fatalf("not within %v: %s", limit, what)
		}
		c.run(time.Millisecond)
	}
}

// leader waits for a node that leads and has committed in its term.
func (c *simCluster) leader() NodeID {
	c.t.Helper()
	var leader NodeID
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

// write writes one block of b at block blk through node id and waits.
func (c *simCluster) write(id NodeID, blk int64, b byte) error {
	var result error = errPending
	c.vols[id].WriteAtAsync(bytes.Repeat([]byte{b}, 4096), blk*4096, func(err error) { result = err })
	c.runUntil(5*time.Second, "write completes", func() bool { return result != errPending })
	return result
}

// read reads block blk through node id and waits.
func (c *simCluster) read(id NodeID, blk int64) ([]byte, error) {
	buf := make([]byte, 4096)
	var result error = errPending
	c.vols[id].ReadAtAsync(buf, blk*4096, func(err error) { result = err })
	c.runUntil(5*time.Second, "read completes", func() bool { return result != errPending })
	return buf, result
}

var errPending = errors.New("test: pending")
