package volume

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
	"basalt/pkg/store"
	"basalt/replication"
)

// newStoreLocal returns a volume of size bytes on a store of its own, on
// memory drives and in-memory metadata.
func newStoreLocal(t *testing.T, c *simCluster, size int64) (*store.Store, *store.Volume) {
	t.Helper()
	db, err := meta.Open(meta.Options{InMemory: true, MemTableSize: 2 << 20, BlockCacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	opts := store.Options{Meta: db, Buffer: pmem.NewFake(512<<10, 1), Simulated: true, ChunkSize: 16 << 10, SegmentStripes: 4, Clock: c.clock,
		Logger: testLogger()}
	for range 3 {
		opts.Drives = append(opts.Drives, disk.NewMem(8<<20))
	}
	st, err := store.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	local, err := st.CreateVolume("v", size)
	if err != nil {
		t.Fatal(err)
	}
	return st, local
}

// do runs fn, which blocks on the group, while the cluster runs.
func (c *simCluster) do(fn func() error) error {
	c.t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	var err error
	c.runUntil(10*time.Second, "the call returns", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	return err
}

// readStore reads block blk of the named store volume.
func readStore(t *testing.T, st *store.Store, name string, blk int64) []byte {
	t.Helper()
	h, err := st.Volume(name)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if err := h.ReadAt(context.Background(), buf, blk*4096); err != nil {
		t.Fatal(err)
	}
	return buf
}

// TestSnapshotOpsReachEveryReplica: a snapshot, a rollback and a deletion
// proposed on the leader apply on every replica at the same log index: each
// replica's snapshot holds the writes before it and none after, the
// rollback brings every replica back to it, and the leader refuses a name
// taken or missing.
func TestSnapshotOpsReachEveryReplica(t *testing.T) {
	c := newSimCluster(t, 7)
	stores := map[nodeID]*store.Store{}
	for _, id := range members {
		st, local := newStoreLocal(t, c, simVolumeSize)
		stores[id] = st
		c.start(id, local)
	}
	l := c.leader()
	ctx := context.Background()
	if err := c.write(l, 0, 'a'); err != nil {
		t.Fatal(err)
	}
	if err := c.do(func() error { return c.vols[l].CreateSnapshot(ctx, "s1") }); err != nil {
		t.Fatal(err)
	}
	if err := c.write(l, 0, 'b'); err != nil {
		t.Fatal(err)
	}
	err := c.do(func() error { return c.vols[l].CreateSnapshot(ctx, "s1") })
	if !errors.Is(err, ErrSnapshotExists) {
		t.Fatalf("a second s1: %v, want ErrSnapshotExists", err)
	}
	if err := c.do(func() error { return c.vols[l].Rollback(ctx, "nope") }); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("rollback to a missing snapshot: %v, want ErrNoSnapshot", err)
	}
	c.runUntil(5*time.Second, "every replica applies the second write", func() bool {
		for _, id := range members {
			if readStore(t, stores[id], "v", 0)[0] != 'b' {
				return false
			}
		}
		return true
	})
	for _, id := range members {
		if got := readStore(t, stores[id], "v@s1", 0); !bytes.Equal(got, bytes.Repeat([]byte{'a'}, 4096)) {
			t.Fatalf("node %d: the snapshot reads %q..., want the write before it", id, got[:4])
		}
		if names, err := c.vols[id].Snapshots(); err != nil || !slices.Equal(names, []string{"s1"}) {
			t.Fatalf("node %d: Snapshots = %v, %v", id, names, err)
		}
	}
	if err := c.do(func() error { return c.vols[l].Rollback(ctx, "s1") }); err != nil {
		t.Fatal(err)
	}
	c.runUntil(5*time.Second, "every replica rolls back", func() bool {
		for _, id := range members {
			if readStore(t, stores[id], "v", 0)[0] != 'a' {
				return false
			}
		}
		return true
	})
	if err := c.do(func() error { return c.vols[l].DeleteSnapshot(ctx, "s1") }); err != nil {
		t.Fatal(err)
	}
	c.runUntil(5*time.Second, "every replica deletes the snapshot", func() bool {
		for _, id := range members {
			if names, _ := c.vols[id].Snapshots(); len(names) != 0 {
				return false
			}
		}
		return true
	})
}

// TestNamedOpEncoding: a snapshot operation round-trips and a malformed one
// is corrupt.
func TestNamedOpEncoding(t *testing.T) {
	for _, kind := range []opKind{opSnapshot, opDeleteSnapshot, opRollback} {
		o, err := decodeOp(encodeNamed(kind, "nightly")[replication.ProposalHeaderSize:])
		if err != nil || o.kind != kind || string(o.data) != "nightly" {
			t.Fatalf("%v: decoded %+v, %v", kind, o, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty name": encodeNamed(opSnapshot, ""),
		"separator":  encodeNamed(opSnapshot, "a@b"),
		"offset":     encodeOp(opRollback, 4096, 1, []byte("x")),
		"length":     encodeOp(opDeleteSnapshot, 0, 3, []byte("x")),
	} {
		if _, err := decodeOp(b[replication.ProposalHeaderSize:]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// TestSnapshotOpsOnStagedReplica: on a store that stages by reference (a
// cluster node's), a snapshot holds the staged writes before it, a
// rollback undoes the ones after it, and both leave the replica durable
// up to their index.
func TestSnapshotOpsOnStagedReplica(t *testing.T) {
	n := newStagedNode(t)
	n.write(t, 0, 'a')
	run := func(fn func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		for i := 0; ; i++ {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				return
			default:
			}
			if i > 100000 {
				t.Fatal("the operation never completed")
			}
			n.poll()
		}
	}
	ctx := context.Background()
	run(func() error { return n.vol.CreateSnapshot(ctx, "s1") })
	if applied := n.vol.applied.Load(); n.vol.AppliedIndex() != applied {
		t.Fatalf("after the snapshot the durable index is %d, applied %d", n.vol.AppliedIndex(), applied)
	}
	n.write(t, 0, 'b')
	if got := readStore(t, n.store, "v@s1", 0); got[0] != 'a' {
		t.Fatalf("the snapshot reads %q, want a", got[0])
	}
	run(func() error { return n.vol.Rollback(ctx, "s1") })
	if got := readStore(t, n.store, "v", 0); got[0] != 'a' {
		t.Fatalf("after the rollback the volume reads %q, want a", got[0])
	}
}
