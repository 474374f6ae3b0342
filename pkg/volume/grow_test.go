package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/replication"
)

// growable is a local replica that can grow: a Memory backend of the
// largest size, showing only its first size bytes.
type growable struct {
	*backend.Memory
	size atomic.Int64
}

func newGrowable(t testing.TB, size, max int64) *growable {
	mem, err := backend.NewMemory(max, 4096)
	if err != nil {
		t.Fatal(err)
	}
	g := &growable{Memory: mem}
	g.size.Store(size)
	return g
}

func (g *growable) Size() int64 { return g.size.Load() }

func (g *growable) WriteAt(ctx context.Context, p []byte, off int64, f backend.WriteFlags) error {
	if off+int64(len(p)) > g.Size() {
		return fmt.Errorf("growable: write at %d beyond %d: %w", off, g.Size(), backend.ErrOutOfRange)
	}
	return g.Memory.WriteAt(ctx, p, off, f)
}

// TestVolumeGrow: Grow refuses sizes the local replica does not hold and
// misaligned ones, never shrinks, and once grown the range checks of I/O
// and of applied entries take the new end.
func TestVolumeGrow(t *testing.T) {
	ctx := context.Background()
	local := newGrowable(t, 64<<10, 1<<20)
	v := newVolume(local, clock.Real())
	tail := applyEntry(opWrite, 64<<10, bytes.Repeat([]byte{7}, 4096))
	if err := v.Apply(ctx, 1, tail); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("applying a write past the end before Grow: %v", err)
	}
	local.size.Store(256 << 10)
	cases := []struct {
		name  string
		size  int64
		want  error
		after int64
	}{
		{"beyond the local replica", 512 << 10, ErrReplicaTooSmall, 64 << 10},
		{"misaligned", 128<<10 + 512, backend.ErrMisaligned, 64 << 10},
		{"smaller: no shrink", 32 << 10, nil, 64 << 10},
		{"same size", 64 << 10, nil, 64 << 10},
		{"grow", 256 << 10, nil, 256 << 10},
		{"again, smaller", 128 << 10, nil, 256 << 10},
	}
	for _, c := range cases {
		err := v.Grow(c.size)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: Grow(%d) = %v, want %v", c.name, c.size, err, c.want)
		}
		if v.Size() != c.after {
			t.Errorf("%s: Size() = %d, want %d", c.name, v.Size(), c.after)
		}
	}
	if err := v.check(256<<10-4096, 4096); err != nil {
		t.Errorf("the new last block: %v", err)
	}
	if err := v.check(256<<10, 4096); !errors.Is(err, backend.ErrOutOfRange) {
		t.Errorf("past the new end: %v", err)
	}
	if err := v.Apply(ctx, 2, tail); err != nil {
		t.Fatalf("applying a write to the new tail: %v", err)
	}
	got := make([]byte, 4096)
	if err := local.ReadAt(ctx, got, 64<<10); err != nil || got[0] != 7 {
		t.Fatalf("the new tail reads %d (%v)", got[0], err)
	}
}

// TestVolumeGrowDuringApply grows a volume step by step while a goroutine
// applies writes below the size it sees (the race detector checks the
// size).
func TestVolumeGrowDuringApply(t *testing.T) {
	local := newGrowable(t, 4096, 1<<20)
	v := newVolume(local, clock.Real())
	stop := make(chan struct{})
	errs := make(chan error, 1)
	var applied atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { errs <- applyUntil(v, &applied, stop) })
	for size := int64(8192); size <= 1<<20; size *= 2 {
		for start := applied.Load(); applied.Load() < start+10 && len(errs) == 0; {
			runtime.Gosched() // let it apply at this size
		}
		local.size.Store(size)
		if err := v.Grow(size); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// applyUntil applies one-block writes below v's current size, counting
// them in applied, until stop or an error.
func applyUntil(v *Volume, applied *atomic.Int64, stop <-chan struct{}) error {
	data := bytes.Repeat([]byte{1}, 4096)
	for i := uint64(1); ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		off := int64(i*4096) % v.Size()
		if err := v.Apply(context.Background(), i, applyEntry(opWrite, off, data)); err != nil {
			return err
		}
		applied.Add(1)
	}
}

// TestReplicatedVolumeGrows grows the three replicas of a simulated group,
// then the volumes, and writes the new last block through the leader: every
// replica holds it, and the old data.
func TestReplicatedVolumeGrows(t *testing.T) {
	const small, large = simVolumeSize, 2 * simVolumeSize
	c := newSimCluster(t, 31)
	locals := map[nodeID]*growable{}
	for _, id := range members {
		locals[id] = newGrowable(t, small, large)
		c.start(id, locals[id])
	}
	leader := c.leader()
	if err := c.write(leader, 0, 1); err != nil {
		t.Fatal(err)
	}
	last := int64(large/4096 - 1)
	if err := c.write(leader, last, 2); !errors.Is(err, backend.ErrOutOfRange) {
		t.Fatalf("write past the end before growing: %v", err)
	}
	for _, id := range members {
		locals[id].size.Store(large)
		if err := c.vols[id].Grow(large); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.write(leader, last, 2); err != nil {
		t.Fatalf("writing the new last block: %v", err)
	}
	if b, err := c.read(leader, last); err != nil || b[0] != 2 {
		t.Fatalf("reading the new last block: %d %v", b[0], err)
	}
	commit := c.vols[leader].Group().Status().Commit
	c.runUntil(5*time.Second, "followers apply", func() bool {
		for _, v := range c.vols {
			if v.Group().Status().Applied < commit {
				return false
			}
		}
		return true
	})
	buf := make([]byte, 4096)
	for id, l := range locals {
		for blk, want := range map[int64]byte{0: 1, last: 2} {
			if err := l.ReadAt(context.Background(), buf, blk*4096); err != nil || buf[0] != want {
				t.Errorf("node %v block %d: %d (%v), want %d", id, blk, buf[0], err, want)
			}
		}
	}
}

// applyEntry encodes an operation as Apply gets it: without the proposal
// ID.
func applyEntry(kind opKind, off int64, data []byte) []byte {
	return encodeOp(kind, off, int64(len(data)), data)[replication.ProposalHeaderSize:]
}
