package volume

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/pmem"
	"basalt/replication"
)

// The harness: three replication.Hosts, each with a Volume of group 1,
// either on a replication.SimNetwork driven by the test's goroutine
// (simCluster, Manual mode) or on loopback TCP with the real clock
// (tcpCluster).

type nodeID = replication.NodeID

var members = []nodeID{1, 2, 3}

// testLogger discards logs unless VOLUME_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("VOLUME_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newMemory(t testing.TB, size int64) *backend.Memory {
	t.Helper()
	mem, err := backend.NewMemory(size, 4096)
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

const simVolumeSize = 256 << 10

// simCluster is three manual Hosts on a SimNetwork.
type simCluster struct {
	t       testing.TB
	clock   *clock.Manual
	net     *replication.SimNetwork
	regions map[nodeID]*pmem.Fake
	hosts   map[nodeID]*replication.Host
	vols    map[nodeID]*Volume
}

func newSimCluster(t testing.TB, seed uint64) *simCluster {
	clk := clock.NewManual(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	c := &simCluster{t: t, clock: clk, net: replication.NewSimNetwork(seed, clk), regions: map[nodeID]*pmem.Fake{},
		hosts: map[nodeID]*replication.Host{}, vols: map[nodeID]*Volume{}}
	for _, id := range members {
		c.regions[id] = pmem.NewFake(4096+1<<20, int64(seed)*7+int64(id))
	}
	return c
}

// start opens node id's host and joins group 1 as a volume over local.
func (c *simCluster) start(id nodeID, local backend.Backend) {
	c.t.Helper()
	h, err := replication.NewHost(replication.Config{NodeID: id, LogRegion: c.regions[id], Clock: c.clock,
		Logger: testLogger().With("node", id), Transport: c.net.Endpoint(id), Manual: true,
		TickInterval: 10 * time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		c.t.Fatal(err)
	}
	v, err := Add(h, 1, members, local)
	if err != nil {
		c.t.Fatal(err)
	}
	c.hosts[id], c.vols[id] = h, v
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
		for _, h := range c.hosts {
			busy = h.Poll() || busy
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

// leader waits for a node that leads the group.
func (c *simCluster) leader() nodeID {
	c.t.Helper()
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

var errPending = errors.New("test: pending")

// write writes one block of b at block blk through node id and waits.
func (c *simCluster) write(id nodeID, blk int64, b byte) error {
	var result error = errPending
	c.vols[id].WriteAtAsync(bytes.Repeat([]byte{b}, 4096), blk*4096, 0, func(err error) { result = err })
	c.runUntil(5*time.Second, "write completes", func() bool { return result != errPending })
	return result
}

// read reads block blk through node id and waits.
func (c *simCluster) read(id nodeID, blk int64) ([]byte, error) {
	buf := make([]byte, 4096)
	var result error = errPending
	c.vols[id].ReadAtAsync(buf, blk*4096, func(err error) { result = err })
	c.runUntil(5*time.Second, "read completes", func() bool { return result != errPending })
	return buf, result
}

const tcpVolumeSize = 4 << 20

// tcpCluster is three goroutine-mode Hosts on loopback TCP.
type tcpCluster struct {
	t      testing.TB
	locals map[nodeID]*backend.Memory
	hosts  map[nodeID]*replication.Host
	vols   map[nodeID]*Volume
}

func newTCPCluster(t testing.TB, regionSize int) *tcpCluster {
	c := &tcpCluster{t: t, locals: map[nodeID]*backend.Memory{}, hosts: map[nodeID]*replication.Host{},
		vols: map[nodeID]*Volume{}}
	for _, id := range members {
		c.locals[id] = newMemory(t, tcpVolumeSize)
		h, err := replication.NewHost(replication.Config{NodeID: id, Listen: "127.0.0.1:0",
			LogRegion: pmem.NewFake(4096+regionSize, int64(id)), Logger: testLogger().With("node", id)})
		if err != nil {
			t.Fatal(err)
		}
		c.hosts[id] = h
	}
	t.Cleanup(func() {
		for _, h := range c.hosts {
			_ = h.Close()
		}
	})
	for a, ha := range c.hosts {
		for b, hb := range c.hosts {
			if a != b {
				ha.SetPeer(b, hb.Addr().String())
			}
		}
	}
	for id, h := range c.hosts {
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		v, err := Add(h, 1, members, c.locals[id])
		if err != nil {
			t.Fatal(err)
		}
		c.vols[id] = v
	}
	return c
}

func (c *tcpCluster) leader(limit time.Duration) (nodeID, bool) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for id, v := range c.vols {
			if v.Group().IsLeader() {
				return id, true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, false
}
