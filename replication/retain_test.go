package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"basalt/pkg/clock"
	"basalt/pkg/pmem"
)

// retainingSM keeps a reference to the data of every entry Apply passes it,
// as a replica that stages blocks straight from the log does, and makes
// them "durable" only when the test says so (release): its AppliedIndex is
// the highest index released, and Checkpoint releases everything. check
// verifies that every reference it still holds reads what was proposed and
// lies in the log region.
type retainingSM struct {
	region   []byte
	held     []heldRef
	applied  uint64
	durable  uint64
	releases int // ReleaseLog calls
	// lag, if set, is how many applied entries a Checkpoint leaves
	// referenced (a replica that cannot make everything durable at once).
	lag func() uint64
}

type heldRef struct {
	index uint64
	data  []byte // the reference Apply passed
	want  []byte // a copy, taken at Apply
}

func (s *retainingSM) Apply(_ context.Context, index uint64, data []byte) error {
	s.held = append(s.held, heldRef{index: index, data: data, want: bytes.Clone(data)})
	s.applied = index
	return nil
}

func (s *retainingSM) AppliedIndex() uint64 { return s.durable }

func (s *retainingSM) Checkpoint(context.Context) (uint64, error) {
	keep := uint64(0)
	if s.lag != nil {
		keep = min(s.applied, s.lag())
	}
	s.release(s.applied - keep)
	return s.durable, nil
}

func (s *retainingSM) ReleaseLog(context.Context) error {
	s.releases++
	s.release(s.applied)
	return nil
}

func (s *retainingSM) Snapshot(io.Writer) error { return nil }

func (s *retainingSM) Restore(_ io.Reader, index uint64) error {
	s.release(s.applied)
	s.applied, s.durable = index, index
	return nil
}

// release drops the references up to index and reports them durable.
func (s *retainingSM) release(index uint64) {
	i := 0
	for i < len(s.held) && s.held[i].index <= index {
		i++
	}
	s.held = s.held[i:]
	s.durable = max(s.durable, index)
}

// check reports the first reference that no longer reads what was
// proposed, or that does not alias the log region.
func (s *retainingSM) check() error {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(s.region)))
	hi := lo + uintptr(len(s.region))
	for _, r := range s.held {
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(r.data))); p < lo || p+uintptr(len(r.data)) > hi {
			return fmt.Errorf("entry %d's data is not in the log region", r.index)
		}
		if !bytes.Equal(r.data, r.want) {
			return fmt.Errorf("entry %d's data changed under a reference the state machine still holds", r.index)
		}
	}
	return nil
}

// TestRetainedEntriesStayValidUntilReleased: a state machine that keeps
// references to what Apply passed it, and releases them only now and then,
// shares a small log region (128 KiB) with a busy group, so that the region
// wraps many times, compactions run under pressure and the releaser asks the
// lagging group to checkpoint. Every reference it holds must keep reading
// what was proposed and lie in the log region, and ReleaseLog must come
// before the group is removed. Seeded: fresh seeds every run, printed
// (BASALT_RETAIN_FIRST replays them, BASALT_RETAIN_SEEDS runs more).
func TestRetainedEntriesStayValidUntilReleased(t *testing.T) {
	first, n := freshSeeds(t, "BASALT_RETAIN", 3)
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { retainRun(t, seed) })
	}
}

func retainRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	clk := clock.NewManual(testEpoch)
	region := pmem.NewFake(4096+128<<10, int64(seed))
	h, err := NewHost(Config{NodeID: 1, LogRegion: region, Clock: clk, Logger: testLogger(),
		Transport: NewSimNetwork(1, clk).Endpoint(1), Manual: true, TickInterval: time.Millisecond,
		CompactionMargin: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	sm := &retainingSM{region: region.Bytes(), lag: func() uint64 { return uint64(rng.IntN(3)) }}
	g, err := h.AddGroup(1, []NodeID{1}, sm)
	if err != nil {
		t.Fatal(err)
	}
	busy, err := h.AddGroup(2, []NodeID{1}, &faultySM{})
	if err != nil {
		t.Fatal(err)
	}
	other := &loadGroup{g: busy}
	next, committed := uint64(0), 0
	for round := 0; committed < 400; round++ {
		if round > 40000 {
			t.Fatalf("seed %d: %d entries committed in %d rounds", seed, committed, round)
		}
		other.fill()
		if g.IsLeader() && rng.IntN(2) == 0 {
			next++
			data := make([]byte, 512+rng.IntN(2048))
			binary.LittleEndian.PutUint64(data, next)
			for i := 8; i < len(data); i++ {
				data[i] = byte(rng.Uint32())
			}
			g.ProposeAsync(data, func(err error) {
				if err == nil {
					committed++
				}
			})
		}
		if rng.IntN(50) == 0 { // the replica destages what it holds, up to a point
			sm.release(sm.applied - min(sm.applied, uint64(rng.IntN(16))))
		}
		clk.Advance(time.Millisecond)
		h.Poll()
		if err := sm.check(); err != nil {
			t.Fatalf("seed %d, round %d: %v", seed, round, err)
		}
	}
	if st := h.Stats(); st.AppendSize < 4*128<<10 {
		t.Fatalf("seed %d: %d bytes appended: the test did not wrap the log region", seed, st.AppendSize)
	}
	if err := h.RemoveGroup(1); err != nil {
		t.Fatal(err)
	}
	if sm.releases != 1 || len(sm.held) != 0 {
		t.Fatalf("seed %d: after RemoveGroup: %d ReleaseLog calls, %d references held", seed, sm.releases, len(sm.held))
	}
}
