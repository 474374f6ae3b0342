package replication

import (
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/pmem"
)

// laggingSM is a state machine whose applied entries become durable only
// while it is not held: AppliedIndex stays where it was when hold was set,
// as a replica whose flushes are slow (or a follower far behind) does, so
// its group may not compact past it.
type laggingSM struct {
	faultySM
	hold    bool
	durable uint64
}

func (s *laggingSM) AppliedIndex() uint64 {
	if !s.hold {
		s.durable = s.applied
	}
	return s.durable
}

// TestCheckpointAtTheLimitFreesTheBuffer: a busy group whose entries
// cannot become durable fills a small write buffer (256 KiB) to the
// admission limit while it holds the oldest pin; an idle group, whose log
// is compacted, holds the pin just above it. Then the busy group's entries
// become durable and it compacts: the idle group now holds the oldest pin
// in a full buffer, the busy group's queued writes take the little a
// release frees, and the releaser asks the idle group to checkpoint. That
// checkpoint is what frees the buffer: it must be written, and the busy
// group must go on committing, many times the buffer, in a fixed number of
// Poll rounds.
//
//   - "at the limit": the checkpoint must use the reserve the admission
//     limit keeps. Before, it found no room under the limit and gave up: the
//     busy group committed nothing more in 4,000 rounds.
//   - "no room for one round": other loops' admitted bytes take all the room
//     for the one round the request is first served; the request must stand
//     and be tried again. Before, the request was used up and the releaser
//     never asked again at that pin: nothing more was committed.
func TestCheckpointAtTheLimitFreesTheBuffer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noRoom bool // when the request is first served
	}{{"at the limit", false}, {"no room for one round", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := fillToTheLimit(t)
			// The busy group's entries become durable: it compacts, the idle
			// group holds the oldest pin and must checkpoint for anything to
			// be freed.
			f.busySM.hold = false
			load := &loadGroup{g: f.busy}
			asked := false
			for range 4000 {
				load.fill()
				if tc.noRoom && !asked && f.idle.checkpoint.Load() {
					asked = true
					pin, taken := f.idle.storage.pin.Load(), f.h.space.size
					f.h.space.admitted.Add(taken)
					f.round()
					f.h.space.admitted.Add(-taken)
					if f.idle.storage.pin.Load() != pin {
						t.Fatal("the idle group checkpointed with no room in the buffer")
					}
				}
				f.round()
				if load.failed != nil {
					t.Fatal(load.failed)
				}
			}
			if tc.noRoom && !asked {
				t.Fatal("the idle group was never asked to checkpoint")
			}
			if f.small.done != f.small.queued || f.small.failed != 0 {
				t.Errorf("of the %d small writes that waited for space, %d completed, %d failed", f.waited,
					f.small.done-(f.small.queued-f.waited), f.small.failed)
			}
			t.Logf("the busy group committed %d KiB in 4000 rounds after its entries became durable", load.committed>>10)
			if load.committed < 8*checkpointRegion {
				t.Fatalf("the busy group committed %d KiB after its entries became durable, want at least %d KiB "+
					"(8 times the buffer): idle group pin %d, busy group pin %d, %+v", load.committed>>10,
					8*checkpointRegion>>10, f.idle.storage.pin.Load(), f.busy.storage.pin.Load(), f.h.Stats())
			}
		})
	}
}

const checkpointRegion = 256 << 10

// fullBuffer is a Manual Host whose write buffer a busy group has filled to
// the admission limit, while an idle group holds the pin right above its
// own; small writes wait for space at the busy group.
type fullBuffer struct {
	h          *Host
	busy, idle *Group
	busySM     *laggingSM
	round      func()
	small      struct{ queued, done, failed int }
	waited     int
}

func fillToTheLimit(t *testing.T) *fullBuffer {
	t.Helper()
	clk := clock.NewManual(testEpoch)
	h, err := NewHost(Config{NodeID: 1, LogRegion: pmem.NewFake(4096+checkpointRegion, 3), Clock: clk,
		Logger: testLogger(), Transport: NewSimNetwork(1, clk).Endpoint(1), Manual: true,
		TickInterval: time.Millisecond, CompactionMargin: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	f := &fullBuffer{h: h, busySM: &laggingSM{hold: true}}
	f.round = func() {
		clk.Advance(time.Millisecond)
		h.Poll()
	}
	if f.busy, err = h.AddGroup(1, []NodeID{1}, f.busySM); err != nil { // first: the oldest pin
		t.Fatal(err)
	}
	if f.idle, err = h.AddGroup(2, []NodeID{1}, &faultySM{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; !f.busy.IsLeader() || !f.idle.IsLeader(); i++ {
		if i > 10000 {
			t.Fatal("the one-member groups never led")
		}
		f.round()
	}
	// The idle group compacts what it has (its first leader's empty entry),
	// as it does when asked under pressure: from then on only a checkpoint
	// can move its pin.
	f.idle.requestCheckpoint()
	f.round()
	if st := f.idle.storage; len(st.ents) != 0 || st.snapIndex != 2 {
		t.Fatalf("the idle group's log: snapshot %d, %d entries; want compacted at 2", st.snapIndex, len(st.ents))
	}
	f.fill(t)
	st := h.Stats()
	if st.Used < h.space.limit || st.AdmissionWaits == 0 || f.waited < 100 {
		t.Fatalf("the buffer is not at the admission limit (%d), or writes did not wait (%d of %d): %+v",
			h.space.limit, f.waited, f.small.queued, st)
	}
	if p, q := f.idle.storage.pin.Load(), f.busy.storage.pin.Load(); p <= q || p > q+8 {
		t.Fatalf("the idle group's pin %d is not right above the busy group's %d", p, q)
	}
	t.Logf("full: %d of %d bytes used, admission limit %d, pins %d and %d", st.Used, st.Size, h.space.limit,
		f.busy.storage.pin.Load(), f.idle.storage.pin.Load())
	return f
}

// fill has the busy group fill the buffer to the admission limit, one write
// at a time, the last ones taking exactly the room left (a mix of sizes
// fills it as closely); nothing can be freed while it holds the oldest pin
// and its entries cannot be compacted. Then 200 small writes queue: they
// take what room is left and wait, as they will take what a release frees
// before the idle group looks.
func (f *fullBuffer) fill(t *testing.T) {
	t.Helper()
	write := func(size int) {
		t.Helper()
		var result error = errPending
		f.busy.ProposeAsync(make([]byte, size), func(err error) { result = err })
		for i := 0; result == errPending; i++ {
			if i > 1000 {
				t.Fatalf("a write of %d bytes never completed: %+v", size, f.h.Stats())
			}
			f.round()
		}
		if result != nil {
			t.Fatal(result)
		}
	}
	const overhead = recordHeaderSize + 8 + entryHeaderSize + proposalIDSize // a record of one empty write
	for {
		room := f.h.space.limit - f.h.buf.Used() - f.h.space.admitted.Load()
		if room < overhead {
			break
		}
		write(min(loadSize, int(room)-overhead))
	}
	for range 200 {
		f.small.queued++
		f.busy.ProposeAsync(nil, func(err error) {
			f.small.done++
			if err != nil {
				f.small.failed++
			}
		})
	}
	for range 200 {
		f.round()
	}
	f.waited = f.small.queued - f.small.done
}
