package store

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// scrubRig is a synchronous rig (no writer goroutine, so the scrubber's
// timer is the only one on the manual clock) on fault drives, with volume
// "a" holding n destaged blocks.
func scrubRig(t *testing.T, n int) (*rig, *Volume, []uint64) {
	t.Helper()
	cfg := defaultRigConfig()
	cfg.faults = true
	cfg.opts.synchronous = true
	r := newRig(t, cfg)
	v, err := r.s.CreateVolume("a", 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	tags := make([]uint64, n)
	for i := range tags {
		tags[i] = uint64(i + 1)
	}
	for i := 0; i < n; i += 16 {
		writeTags(t, v, uint64(i), tags[i:min(i+16, n)]...)
		r.s.w.work() // synchronous: the test runs the writer
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if r.clock.Waiters() != 0 {
		t.Fatalf("%d timers armed before the scrubber", r.clock.Waiters())
	}
	return r, v, tags
}

// writtenStripes counts the stripes of the segments in use.
func writtenStripes(s *Store) uint64 {
	var n uint64
	for _, g := range s.segs {
		if g.getState() != meta.SegmentFree {
			n += uint64(g.written.Load())
		}
	}
	return n
}

// waitFor polls cond (the scrubber runs on its own goroutine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 1_000_000 {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func startScrubber(t *testing.T, r *rig, opts ScrubOptions) *Scrubber {
	t.Helper()
	sc, err := NewScrubber(r.s, opts)
	if err != nil {
		t.Fatal(err)
	}
	sc.Start()
	t.Cleanup(sc.Close)
	return sc
}

func TestScheduledScrubRepairsAFlippedBit(t *testing.T) {
	r, v, tags := scrubRig(t, 100)
	at := blockLocation(t, r, v, 42)
	block := disk.AlignedBuffer(BlockSize)
	if _, err := r.inner(at.drive).ReadAt(block, at.offset); err != nil {
		t.Fatal(err)
	}
	good := bytes.Clone(block)
	block[1234] ^= 0x10 // bit rot on the medium
	if _, err := r.inner(at.drive).WriteAt(block, at.offset); err != nil {
		t.Fatal(err)
	}
	sc := startScrubber(t, r, ScrubOptions{Interval: time.Hour})
	r.clock.BlockUntil(1)
	if st := sc.Status(); !st.Enabled || st.InProgress || !st.NextDue.Equal(testEpoch.Add(time.Hour)) {
		t.Fatalf("before the first tick: %+v", st)
	}
	r.clock.Advance(time.Hour - time.Second)
	if st := sc.Status(); st.InProgress || st.Passes != 0 {
		t.Fatalf("a pass started before its time: %+v", st)
	}
	r.clock.Advance(time.Second)
	waitFor(t, "the first pass", func() bool { return sc.Status().Passes == 1 })
	st := sc.Status()
	if st.Last.Stripes != writtenStripes(r.s) || st.Last.Bad != 1 || st.Last.Repaired != 1 ||
		st.Last.Unrecoverable != 0 || !st.LastCompleted.Equal(testEpoch.Add(time.Hour)) || st.InProgress {
		t.Fatalf("after the pass: %+v (%d stripes written)", st, writtenStripes(r.s))
	}
	if !st.NextDue.Equal(testEpoch.Add(2 * time.Hour)) {
		t.Fatalf("next pass due %v", st.NextDue)
	}
	if _, err := r.inner(at.drive).ReadAt(block, at.offset); err != nil || !bytes.Equal(block, good) {
		t.Fatalf("the flipped block was not rewritten (%v)", err)
	}
	// A read that flips bits in flight is repaired too (the drive's copy
	// is rewritten, the next pass finds it clean).
	r.fault[at.drive].AddRule(disk.Rule{Op: disk.OpRead, Fault: disk.FaultBitFlip, Offset: at.offset,
		Length: BlockSize, Count: 1})
	r.clock.BlockUntil(1)
	r.clock.Advance(time.Hour)
	waitFor(t, "the second pass", func() bool { return sc.Status().Passes == 2 })
	if st := sc.Status(); st.Last.Bad != 1 || st.Last.Repaired != 1 || st.Total.Repaired != 2 {
		t.Fatalf("second pass: %+v", st)
	}
	checkAll(t, v, tags)
}

func TestScheduledScrubRespectsItsRate(t *testing.T) {
	r, _, _ := scrubRig(t, 300)
	stripeBytes := int64(r.s.lay.drives) * int64(r.s.lay.chunkSize)
	rate := stripeBytes / 2 // one stripe every 2 s
	sc := startScrubber(t, r, ScrubOptions{Interval: time.Hour, BytesPerSecond: rate})
	r.clock.BlockUntil(1)
	r.clock.Advance(time.Hour)
	start := r.clock.Now()
	total := writtenStripes(r.s)
	for sc.Status().Passes == 0 {
		r.clock.BlockUntil(1)
		st := sc.Status()
		if st.Passes > 0 {
			break
		}
		elapsed := r.clock.Since(start)
		if limit := uint64(elapsed/(2*time.Second)) + 1; st.Pass.Stripes > limit {
			t.Fatalf("%d stripes scrubbed in %v at %d bytes/s (%d bytes a stripe): the limit is %d",
				st.Pass.Stripes, elapsed, rate, stripeBytes, limit)
		}
		if st.Fraction < 0 || st.Fraction > 1 || !st.InProgress {
			t.Fatalf("progress %+v", st)
		}
		r.clock.Advance(500 * time.Millisecond)
	}
	took := sc.Status().LastCompleted.Sub(start)
	if want := time.Duration(total-1) * 2 * time.Second; took < want || total < 4 {
		t.Fatalf("%d stripes scrubbed in %v of simulated time; at the rate it takes at least %v", total, took, want)
	}
}

func TestScrubScheduleDisabledNeverScrubs(t *testing.T) {
	r, _, _ := scrubRig(t, 50)
	reads := func() (n uint64) {
		for _, d := range r.s.Stats().Drives {
			n += d.Reads
		}
		return n
	}
	before := reads()
	sc := startScrubber(t, r, ScrubOptions{Interval: 0})
	for range 100 {
		r.clock.Advance(24 * time.Hour)
	}
	st := sc.Status()
	if st.Enabled || st.InProgress || st.Passes != 0 || !st.NextDue.IsZero() || r.clock.Waiters() != 0 ||
		reads() != before {
		t.Fatalf("disabled schedule: %+v, %d timers, %d drive reads", st, r.clock.Waiters(), reads()-before)
	}
	if _, err := NewScrubber(r.s, ScrubOptions{Interval: -time.Second}); err == nil {
		t.Fatal("a negative interval was accepted")
	}
}

// memScrubState is a ScrubStateStore in memory.
type memScrubState struct {
	mu    sync.Mutex
	st    ScrubState
	ok    bool
	saves int
}

func (m *memScrubState) LoadScrub() (ScrubState, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st, m.ok, nil
}

func (m *memScrubState) SaveScrub(st ScrubState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st, m.ok = st, true
	m.saves++
	return nil
}

func TestScrubPassResumesAfterRestart(t *testing.T) {
	r, _, _ := scrubRig(t, 300)
	state := &memScrubState{}
	stripeBytes := int64(r.s.lay.drives) * int64(r.s.lay.chunkSize)
	opts := ScrubOptions{Interval: time.Hour, BytesPerSecond: stripeBytes, State: state}
	sc, err := NewScrubber(r.s, opts)
	if err != nil {
		t.Fatal(err)
	}
	sc.Start()
	r.clock.BlockUntil(1)
	r.clock.Advance(time.Hour)
	for sc.Status().Cursor < 3 {
		r.clock.BlockUntil(1)
		r.clock.Advance(time.Second)
	}
	r.clock.BlockUntil(1)
	sc.Close()
	saved, _, _ := state.LoadScrub()
	if saved.PassStarted.IsZero() || saved.Cursor < 3 || saved.Pass.Stripes == 0 {
		t.Fatalf("saved state of a pass in progress: %+v", saved)
	}
	// The restarted schedule resumes at once, at the saved segment.
	sc2 := startScrubber(t, r, opts)
	if st := sc2.Status(); !st.InProgress || st.Cursor != saved.Cursor || st.Fraction <= 0 {
		t.Fatalf("restarted: %+v", st)
	}
	for sc2.Status().Passes == 0 {
		r.clock.BlockUntil(1)
		r.clock.Advance(time.Second)
	}
	if st := sc2.Status(); st.Last.Stripes != writtenStripes(r.s) || st.Total.Stripes >= st.Last.Stripes {
		t.Fatalf("resumed pass: %+v; %d stripes written", st, writtenStripes(r.s))
	}
}
