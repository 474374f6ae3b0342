package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/pmem"
	"basalt/replication"
)

// lossy is a local replica that has lost some blocks beyond its own
// repair: reading a range that holds one is backend.ErrMedia, as a store
// answers when more of a stripe is lost than its parity covers. Writing a
// block makes it readable again (a store writes it elsewhere).
type lossy struct {
	*backend.Memory
	mu   sync.Mutex
	lost map[int64]bool // block offsets
}

func newLossy(t testing.TB, size int64) *lossy {
	return &lossy{Memory: newMemory(t, size), lost: map[int64]bool{}}
}

func (l *lossy) lose(off int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost[off] = true
}

func (l *lossy) isLost(off int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost[off]
}

func (l *lossy) ReadAt(ctx context.Context, p []byte, off int64) error {
	l.mu.Lock()
	for at := off; at < off+int64(len(p)); at += 4096 {
		if l.lost[at] {
			l.mu.Unlock()
			return fmt.Errorf("test: block at %d lost beyond parity: %w", at, backend.ErrMedia)
		}
	}
	l.mu.Unlock()
	return l.Memory.ReadAt(ctx, p, off)
}

func (l *lossy) WriteAt(ctx context.Context, p []byte, off int64, f backend.WriteFlags) error {
	if err := l.Memory.WriteAt(ctx, p, off, f); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for at := off; at < off+int64(len(p)); at += 4096 {
		delete(l.lost, at)
	}
	return nil
}

// lossyCluster is tcpCluster over lossy replicas, each Volume reading
// from the others' replicas in process (ReadReplica) as pkg/node does
// over HTTP.
type lossyCluster struct {
	t      *testing.T
	locals map[nodeID]*lossy
	hosts  map[nodeID]*replication.Host
	vols   map[nodeID]*Volume
	// peerCalls counts the PeerReader's calls; before, when set, runs in
	// each call once the other replica has been read.
	peerCalls atomic.Int64
	before    atomic.Pointer[func()]
}

func newLossyCluster(t *testing.T) *lossyCluster {
	c := &lossyCluster{t: t, locals: map[nodeID]*lossy{}, hosts: map[nodeID]*replication.Host{},
		vols: map[nodeID]*Volume{}}
	for _, id := range members {
		c.locals[id] = newLossy(t, tcpVolumeSize)
		h, err := replication.NewHost(replication.Config{NodeID: id, Listen: "127.0.0.1:0",
			LogRegion: pmem.NewFake(4096+16<<20, int64(id)), Logger: testLogger().With("node", id)})
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

// peerReader returns node self's PeerReader: the other voters' replicas,
// in turn.
func (c *lossyCluster) peerReader(self nodeID) PeerReader {
	return func(ctx context.Context, group replication.GroupID, off int64, n int, minIndex uint64) ([]byte, uint64, error) {
		c.peerCalls.Add(1)
		var errs []error
		for _, id := range c.vols[self].Group().Members().Voters {
			if id == self {
				continue
			}
			buf := make([]byte, n)
			hi, err := c.vols[id].ReadReplica(ctx, buf, off, minIndex)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if f := c.before.Load(); f != nil {
				(*f)()
			}
			return buf, hi, nil
		}
		return nil, 0, errors.Join(errs...)
	}
}

func (c *lossyCluster) setPeerReaders() {
	for id, v := range c.vols {
		v.SetPeerReader(c.peerReader(id), testLogger())
	}
}

func (c *lossyCluster) leader() (nodeID, *Volume) {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for id, v := range c.vols {
			if v.Group().IsLeader() {
				return id, v
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatal("no leader")
	return 0, nil
}

// eventually waits up to 5 s for cond.
func (c *lossyCluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sumStats adds every replica's repair counts.
func (c *lossyCluster) sumStats() RepairStats {
	var s RepairStats
	for _, v := range c.vols {
		r := v.RepairStats()
		s.Proposed, s.Written, s.Skipped, s.Failed = s.Proposed+r.Proposed, s.Written+r.Written,
			s.Skipped+r.Skipped, s.Failed+r.Failed
	}
	return s
}

func pattern(blocks int, seed byte) []byte {
	p := make([]byte, blocks*4096)
	for i := range p {
		p[i] = seed + byte(i/4096)
	}
	return p
}

// TestReadLostBeyondParityIsServedByAPeerAndRepaired: a block the leader's
// replica has lost makes a three-block read a media error while no
// PeerReader is set; with one, the read returns the other replicas' bytes,
// the repair is proposed and written on every replica, the leader's block
// is readable again, and the next read is served locally.
func TestReadLostBeyondParityIsServedByAPeerAndRepaired(t *testing.T) {
	c := newLossyCluster(t)
	id, v := c.leader()
	ctx := context.Background()
	want := pattern(3, 0x40)
	if err := v.WriteAt(ctx, want, 4*4096, 0); err != nil {
		t.Fatal(err)
	}
	c.locals[id].lose(5 * 4096)
	got := make([]byte, len(want))
	if err := v.ReadAt(ctx, got, 4*4096); !errors.Is(err, backend.ErrMedia) {
		t.Fatalf("read without a PeerReader: %v, want ErrMedia", err)
	}
	c.setPeerReaders()
	if err := v.ReadAt(ctx, got, 4*4096); err != nil {
		t.Fatalf("read with a PeerReader: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the read from a peer returned other bytes than were written")
	}
	if n := v.Counters().PeerRepairs(); n != 1 {
		t.Fatalf("PeerRepairs = %d, want 1", n)
	}
	c.eventually("the repair written on every replica", func() bool { return c.sumStats().Written == 3 })
	if s := c.sumStats(); s.Proposed != 1 || s.Skipped != 0 || s.Failed != 0 {
		t.Fatalf("repair stats %+v, want one proposed, none skipped or failed", s)
	}
	if c.locals[id].isLost(5 * 4096) {
		t.Fatal("the leader's lost block is still lost after the repair")
	}
	calls := c.peerCalls.Load()
	clear(got)
	if err := v.ReadAt(ctx, got, 4*4096); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after the repair: %v (equal %v)", err, bytes.Equal(got, want))
	}
	if c.peerCalls.Load() != calls || v.Counters().PeerRepairs() != 1 {
		t.Fatal("the read after the repair went to a peer, not the local replica")
	}
	for other, l := range c.locals {
		have := make([]byte, len(want))
		if err := l.Memory.ReadAt(ctx, have, 4*4096); err != nil || !bytes.Equal(have, want) {
			t.Errorf("replica %v after the repair: %v, equal %v", other, err, bytes.Equal(have, want))
		}
	}
}

// TestReadAtAsyncLostBlockIsServedByAPeer: the asynchronous read, whose
// local read runs on the group's loop, reads from a peer on a goroutine of
// its own and calls done with the peer's bytes.
func TestReadAtAsyncLostBlockIsServedByAPeer(t *testing.T) {
	c := newLossyCluster(t)
	id, v := c.leader()
	want := pattern(2, 0x90)
	if err := v.WriteAt(context.Background(), want, 0, 0); err != nil {
		t.Fatal(err)
	}
	c.locals[id].lose(4096)
	c.setPeerReaders()
	got := make([]byte, len(want))
	done := make(chan error, 1)
	v.ReadAtAsync(got, 0, func(err error) { done <- err })
	select {
	case err := <-done:
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("asynchronous read: %v, equal %v", err, bytes.Equal(got, want))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the asynchronous read did not complete")
	}
	c.eventually("the repair written on every replica", func() bool { return c.sumStats().Written == 3 })
	if c.locals[id].isLost(4096) {
		t.Fatal("the lost block is still lost after the repair")
	}
}

// TestRepairSkipsARangeWrittenSinceItsBase: a write to the range commits
// after the peer read and before the repair; every replica skips the
// repair, and the newer data stay.
func TestRepairSkipsARangeWrittenSinceItsBase(t *testing.T) {
	c := newLossyCluster(t)
	id, v := c.leader()
	ctx := context.Background()
	old, newer := pattern(1, 0x11), pattern(1, 0x77)
	if err := v.WriteAt(ctx, old, 8*4096, 0); err != nil {
		t.Fatal(err)
	}
	c.locals[id].lose(8 * 4096)
	var once sync.Once
	f := func() {
		once.Do(func() {
			if err := v.WriteAt(ctx, newer, 8*4096, 0); err != nil {
				t.Errorf("the write during the peer read: %v", err)
			}
		})
	}
	c.before.Store(&f)
	c.setPeerReaders()
	got := make([]byte, 4096)
	if err := v.ReadAt(ctx, got, 8*4096); err != nil {
		t.Fatalf("read with a PeerReader: %v", err)
	}
	if !bytes.Equal(got, old) && !bytes.Equal(got, newer) {
		t.Fatal("the read returned neither the old nor the new data")
	}
	c.eventually("the repair applied on every replica", func() bool { return c.sumStats().Skipped == 3 })
	if s := c.sumStats(); s.Proposed != 1 || s.Written != 0 {
		t.Fatalf("repair stats %+v, want one proposed, none written", s)
	}
	for other, l := range c.locals {
		have := make([]byte, 4096)
		if err := l.Memory.ReadAt(ctx, have, 8*4096); err != nil || !bytes.Equal(have, newer) {
			t.Errorf("replica %v after the skipped repair: %v, holds the newer data: %v", other, err,
				bytes.Equal(have, newer))
		}
	}
	if err := v.ReadAt(ctx, got, 8*4096); err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("read after the skipped repair: %v, newer %v", err, bytes.Equal(got, newer))
	}
}

// TestApplyRepairWritesOnlyWhatTheChangeLogProvesUnchanged drives Apply
// directly: a repair is written when no entry after its base touched its
// range, skipped when one did, and skipped when the change log does not
// reach back to its base.
func TestApplyRepairWritesOnlyWhatTheChangeLogProvesUnchanged(t *testing.T) {
	local := newMemory(t, 1<<20)
	v := newVolume(local, clock.NewManual(time.Unix(0, 0)))
	ctx := context.Background()
	apply := func(index uint64, entry []byte) {
		t.Helper()
		if err := v.Apply(ctx, index, entry[replication.ProposalHeaderSize:]); err != nil {
			t.Fatalf("apply %d: %v", index, err)
		}
	}
	block := func(b byte) []byte { return bytes.Repeat([]byte{b}, 4096) }
	read := func(off int64) byte {
		p := make([]byte, 4096)
		if err := local.ReadAt(ctx, p, off); err != nil {
			t.Fatal(err)
		}
		return p[0]
	}
	apply(10, encodeOp(opWrite, 0, 4096, block(1)))               // the change log starts: floor 9
	apply(11, encodeRepair(4096, 5, block(2)))                    // base 5 is below the floor: skipped
	apply(12, encodeOp(opWrite, 8192, 4096, block(3)))            // changes block 2
	apply(13, encodeRepair(8192, 11, block(4)))                   // block 2 changed at 12 > 11: skipped
	apply(14, encodeRepair(4096, 10, block(5)))                   // block 1 unchanged since 10: written
	apply(15, encodeRepair(0, 10, block(6)))                      // block 0 written at 10, not after: written
	apply(16, encodeRepair(0, 13, append(block(7), block(8)...))) // blocks 0, 1: repaired at 15, 14: skipped
	for off, want := range map[int64]byte{0: 6, 4096: 5, 8192: 3} {
		if got := read(off); got != want {
			t.Errorf("block at %d holds %d, want %d", off, got, want)
		}
	}
	if s := v.RepairStats(); s.Written != 2 || s.Skipped != 3 || s.Failed != 0 {
		t.Errorf("repair stats %+v, want 2 written, 3 skipped", s)
	}
	if got := v.applied.Load(); got != 16 {
		t.Errorf("applied index %d after the repairs, want 16", got)
	}
}

// TestRepairOpRoundTrip: a repair keeps its base index and data; one too
// short for its base or with the wrong data length is corrupt.
func TestRepairOpRoundTrip(t *testing.T) {
	data := bytes.Repeat([]byte{0xCD}, 8192)
	entry := encodeRepair(4096, 77, data)[replication.ProposalHeaderSize:]
	o, err := decodeOp(entry)
	if err != nil {
		t.Fatal(err)
	}
	if o.kind != opRepair || o.offset != 4096 || o.length != 8192 || o.base != 77 || !bytes.Equal(o.data, data) {
		t.Fatalf("decoded %v at %d of %d, base %d", o.kind, o.offset, o.length, o.base)
	}
	for name, b := range map[string][]byte{
		"no base":     entry[:opHeaderSize+4],
		"data short":  entry[:len(entry)-1],
		"data longer": append(bytes.Clone(entry), 0),
	} {
		if _, err := decodeOp(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// TestReadReplicaWaitsForTheIndexAskedFor: a replica that has not applied
// minIndex answers ErrReplicaBehind once the context ends; one that has
// reads its local replica.
func TestReadReplicaWaitsForTheIndexAskedFor(t *testing.T) {
	c := newLossyCluster(t)
	_, v := c.leader()
	ctx := context.Background()
	want := pattern(1, 0x21)
	if err := v.WriteAt(ctx, want, 0, 0); err != nil {
		t.Fatal(err)
	}
	applied := v.AppliedThrough()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := v.ReadReplica(short, make([]byte, 4096), 0, applied+1000); !errors.Is(err, ErrReplicaBehind) {
		t.Fatalf("ReadReplica far ahead: %v, want ErrReplicaBehind", err)
	}
	for id, f := range c.vols {
		got := make([]byte, 4096)
		hi, err := f.ReadReplica(ctx, got, 0, applied)
		if err != nil || !bytes.Equal(got, want) || hi < applied {
			t.Errorf("ReadReplica on %v: %v, equal %v, reflects at most %d (asked %d)", id, err,
				bytes.Equal(got, want), hi, applied)
		}
	}
	if _, err := v.ReadReplica(ctx, make([]byte, 100), 0, 0); !errors.Is(err, backend.ErrMisaligned) {
		t.Errorf("misaligned ReadReplica: %v", err)
	}
}

// TestPeerBytesAheadOfTheLeaderAreNotServed: bytes another replica read
// reflecting entries this leader has not applied (and never will, here)
// are not returned: the read answers its media error once the wait for
// them runs out, so no later local read could see an older value.
func TestPeerBytesAheadOfTheLeaderAreNotServed(t *testing.T) {
	c := newLossyCluster(t)
	id, v := c.leader()
	ctx := context.Background()
	if err := v.WriteAt(ctx, pattern(1, 1), 0, 0); err != nil {
		t.Fatal(err)
	}
	c.locals[id].lose(0)
	v.SetPeerReader(func(context.Context, replication.GroupID, int64, int, uint64) ([]byte, uint64, error) {
		return pattern(1, 2), v.AppliedThrough() + 1000, nil
	}, testLogger())
	start := time.Now()
	if err := v.ReadAt(ctx, make([]byte, 4096), 0); !errors.Is(err, backend.ErrMedia) {
		t.Fatalf("read with a peer ahead of the leader: %v, want ErrMedia", err)
	}
	if d := time.Since(start); d < catchUpWait {
		t.Fatalf("gave up after %v, before the catch-up wait of %v", d, catchUpWait)
	}
	if s := v.RepairStats(); s.Proposed != 0 || v.Counters().PeerRepairs() != 0 {
		t.Fatalf("bytes not served were counted or repaired: %+v, %d", s, v.Counters().PeerRepairs())
	}
}
