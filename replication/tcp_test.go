package replication

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"basalt/pkg/pmem"
)

const tcpVolumeSize = 4 << 20

// tcpCluster is three goroutine-mode Hosts on loopback TCP with the real
// clock.
type tcpCluster struct {
	t       testing.TB
	regions map[NodeID]*pmem.Fake
	locals  map[NodeID]*blockSM // each node's state, kept across stops
	hosts   map[NodeID]*Host
	vols    map[NodeID]*blockSM // those of the nodes running
	adjust  func(*Config)
}

func newTCPCluster(t testing.TB, regionSize int, adjust func(*Config)) *tcpCluster {
	c := &tcpCluster{t: t, regions: map[NodeID]*pmem.Fake{}, locals: map[NodeID]*blockSM{},
		hosts: map[NodeID]*Host{}, vols: map[NodeID]*blockSM{}, adjust: adjust}
	for id := NodeID(1); id <= 3; id++ {
		c.regions[id] = pmem.NewFake(4096+regionSize, int64(id))
		c.locals[id] = newBlockSM(tcpVolumeSize)
	}
	for id := NodeID(1); id <= 3; id++ {
		c.open(id)
	}
	for id := range c.hosts {
		c.start(id)
	}
	t.Cleanup(func() {
		for _, h := range c.hosts {
			_ = h.Close()
		}
	})
	return c
}

func (c *tcpCluster) open(id NodeID) {
	cfg := Config{NodeID: id, Listen: "127.0.0.1:0", LogRegion: c.regions[id], Logger: testLogger().With("node", id)}
	if c.adjust != nil {
		c.adjust(&cfg)
	}
	h, err := NewHost(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.hosts[id] = h
}

// start tells every host the others' addresses, starts id and joins the
// volume.
func (c *tcpCluster) start(id NodeID) {
	for a, ha := range c.hosts {
		for b, hb := range c.hosts {
			if a != b {
				ha.SetPeer(b, hb.Addr().String())
			}
		}
	}
	h := c.hosts[id]
	if err := h.Start(); err != nil {
		c.t.Fatal(err)
	}
	v, err := addBlockSM(h, 1, []NodeID{1, 2, 3}, c.locals[id])
	if err != nil {
		c.t.Fatal(err)
	}
	c.vols[id] = v
}

func (c *tcpCluster) stop(id NodeID) {
	if err := c.hosts[id].Close(); err != nil {
		c.t.Fatal(err)
	}
	delete(c.hosts, id)
	delete(c.vols, id)
}

func (c *tcpCluster) leader(limit time.Duration) (NodeID, bool) {
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

func block(i int64) []byte { return bytes.Repeat([]byte(fmt.Sprintf("%07d|", i)), 512) }

// TestTCPLeaderLossWritesResumeWithinTwoSeconds writes through the leader of
// three hosts on loopback TCP, closes the leader's host, and measures the
// time until a write is acknowledged by a new leader; then every
// acknowledged write must read back there.
func TestTCPLeaderLossWritesResumeWithinTwoSeconds(t *testing.T) {
	c := newTCPCluster(t, 8<<20, nil)
	leader, ok := c.leader(5 * time.Second)
	if !ok {
		t.Fatal("no leader elected")
	}
	ctx := context.Background()
	for i := range int64(50) {
		if err := c.vols[leader].WriteAt(ctx, block(i), i*4096); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	c.stop(leader)
	var next NodeID
	for i := int64(50); ; {
		if time.Since(killed) > 10*time.Second {
			t.Fatal("no write succeeded within 10 s of losing the leader")
		}
		id, ok := c.leader(50 * time.Millisecond)
		if !ok {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.vols[id].WriteAt(wctx, block(i), i*4096)
		cancel()
		if err == nil {
			next = id
			break
		}
	}
	failover := time.Since(killed)
	t.Logf("failover: first write acknowledged by %v %v after the leader's host closed", next, failover)
	if failover > 3*time.Second {
		t.Errorf("failover took %v, want about 2 s at most", failover)
	}
	got := make([]byte, 4096)
	for i := range int64(51) {
		if err := c.vols[next].ReadAt(ctx, got, i*4096); err != nil || !bytes.Equal(got, block(i)) {
			t.Fatalf("block %d on the new leader: %q, %v", i, got[:8], err)
		}
	}
}

// TestTCPFollowerCatchesUpBySnapshot closes a follower, writes enough for the
// leader to compact past it, restarts it (on a new port) while writes go on,
// so that the snapshot streams from a replica that changes under it, and
// waits until it has caught up, by snapshot, with a replica equal to the
// leader's.
func TestTCPFollowerCatchesUpBySnapshot(t *testing.T) { followerCatchesUpBySnapshot(t, nil) }

// followerCatchesUpBySnapshot is TestTCPFollowerCatchesUpBySnapshot with
// each host's configuration adjusted (TLS).
func followerCatchesUpBySnapshot(t *testing.T, adjust func(*Config)) {
	c := newTCPCluster(t, 8<<20, func(cfg *Config) {
		cfg.CompactionMargin, cfg.RetainBytes = 8, -1
		if adjust != nil {
			adjust(cfg)
		}
	})
	leader, ok := c.leader(5 * time.Second)
	if !ok {
		t.Fatal("no leader elected")
	}
	follower := leader%3 + 1
	c.stop(follower)
	ctx := context.Background()
	for i := range int64(200) {
		if err := c.vols[leader].WriteAt(ctx, block(i), (i*97%1024)*4096); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	writer := make(chan error, 1)
	lv := c.vols[leader]
	go func() { // writes while the follower restores
		for i := int64(200); ; i++ {
			select {
			case <-stop:
				writer <- nil
				return
			default:
			}
			if err := lv.WriteAt(ctx, block(i), (i*89%1024)*4096); err != nil {
				writer <- err
				return
			}
		}
	}()
	c.open(follower)
	c.start(follower)
	deadline := time.Now().Add(10 * time.Second)
	for c.vols[follower].Group().Status().SnapshotsReceived == 0 ||
		c.vols[follower].Group().Status().Applied+100 < c.vols[leader].Group().Status().Commit {
		if time.Now().After(deadline) {
			t.Fatalf("follower stuck at %+v", c.vols[follower].Group().Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
	for c.vols[follower].Group().Status().Applied < c.vols[leader].Group().Status().Commit {
		if time.Now().After(deadline) {
			t.Fatalf("follower stuck at %+v", c.vols[follower].Group().Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	want, got := c.locals[leader].bytes(), c.locals[follower].bytes()
	if !bytes.Equal(got, want) {
		t.Fatal("replicas differ after the snapshot")
	}
}
