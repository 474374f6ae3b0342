package volume

import (
	"bytes"
	"context"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
	"basalt/pkg/store"
	"basalt/replication"
)

// stagedNode is one manual Host whose one-voter group 1 is a Volume over a
// real store staging by reference (Simulated: it destages only when the
// test calls Work).
type stagedNode struct {
	clock *clock.Manual
	host  *replication.Host
	store *store.Store
	vol   *Volume
}

func newStagedNode(t *testing.T) *stagedNode {
	clk := clock.NewManual(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	h, err := replication.NewHost(replication.Config{NodeID: 1, LogRegion: pmem.NewFake(4096+4<<20, 1), Clock: clk,
		Logger: testLogger(), Transport: replication.NewSimNetwork(1, clk).Endpoint(1), Manual: true,
		TickInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	db, err := meta.Open(meta.Options{InMemory: true, MemTableSize: 2 << 20, BlockCacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	opts := store.Options{Meta: db, StageByReference: true, Simulated: true, ChunkSize: 16 << 10,
		SegmentStripes: 4, Clock: clk, Logger: testLogger()}
	for range 3 {
		opts.Drives = append(opts.Drives, disk.NewMem(8<<20))
	}
	st, err := store.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	local, err := st.CreateVolume("v", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Add(h, 1, []replication.NodeID{1}, local)
	if err != nil {
		t.Fatal(err)
	}
	n := &stagedNode{clock: clk, host: h, store: st, vol: v}
	for i := 0; !v.Group().IsLeader(); i++ {
		if i > 10000 {
			t.Fatal("no leader")
		}
		n.poll()
	}
	return n
}

func (n *stagedNode) poll() {
	n.clock.Advance(time.Millisecond)
	n.host.Poll()
}

// write writes block blk full of b through the Volume and waits for it.
func (n *stagedNode) write(t *testing.T, blk int64, b byte) {
	var result error
	done := false
	n.vol.WriteAtAsync(bytes.Repeat([]byte{b}, 4096), blk*4096, 0, func(err error) { result, done = err, true })
	for i := 0; !done; i++ {
		if i > 10000 {
			t.Fatal("a write never completed")
		}
		n.poll()
	}
	if result != nil {
		t.Fatal(result)
	}
}

// TestStagedReplicaIsDurableAsStripesReachTheDrives: on a store that stages
// by reference, the Volume stages applied writes without a copy (the store
// holds the Raft log's bytes), its AppliedIndex stays below the oldest
// write still staged (so the group cannot compact the log past it), rises
// as stripes reach the drives without any Checkpoint, and ReleaseLog
// destages the rest. With a copying replica the durable index would move
// only at a Checkpoint.
func TestStagedReplicaIsDurableAsStripesReachTheDrives(t *testing.T) {
	n := newStagedNode(t)
	if n.vol.stage == nil {
		t.Fatal("the Volume does not see that its store stages by reference")
	}
	for blk := range int64(40) { // 40 blocks: more than one 2x16 KiB stripe, less than the whole volume
		n.write(t, blk, byte(blk+1))
	}
	applied := n.vol.applied.Load()
	floor, ok := n.vol.stage.StagedFloor()
	if !ok || n.vol.AppliedIndex() != floor-1 || floor > applied {
		t.Fatalf("before any destage: floor %d (%v), AppliedIndex %d, applied %d: want AppliedIndex = floor-1",
			floor, ok, n.vol.AppliedIndex(), applied)
	}
	before := n.vol.AppliedIndex()
	n.store.Work() // full stripes go to the drives; the partial last one stays staged
	if after := n.vol.AppliedIndex(); after <= before || after >= applied {
		t.Fatalf("after destaging the full stripes: AppliedIndex %d (was %d), applied %d: want it between",
			after, before, applied)
	}
	for blk := range int64(40) {
		got := make([]byte, 4096)
		var result error
		done := false
		n.vol.ReadAtAsync(got, blk*4096, func(err error) { result, done = err, true })
		for i := 0; !done; i++ {
			if i > 10000 {
				t.Fatal("a read never completed")
			}
			n.poll()
		}
		if result != nil {
			t.Fatal(result)
		}
		if !bytes.Equal(got, bytes.Repeat([]byte{byte(blk + 1)}, 4096)) {
			t.Fatalf("block %d reads back wrong", blk)
		}
	}
	if err := n.vol.ReleaseLog(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.vol.stage.StagedFloor(); ok || n.vol.AppliedIndex() != applied {
		t.Fatalf("after ReleaseLog: still staged %v, AppliedIndex %d, applied %d", ok, n.vol.AppliedIndex(), applied)
	}
}
