package volume

import (
	"context"
	"errors"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
)

// Each latency lands in the first bucket whose bound it does not exceed
// (Prometheus's le), and beyond the last bound in the overflow bucket.
func TestBucketOfMatchesTheBounds(t *testing.T) {
	if got := BucketBound(LatencyBuckets - 1); got != 3276800*time.Microsecond {
		t.Fatalf("the last bound is %v, want 3.2768s", got)
	}
	for _, tt := range []struct {
		d    time.Duration
		want int
	}{{0, 0}, {time.Nanosecond, 0}, {time.Hour, LatencyBuckets}} {
		if got := bucketOf(tt.d); got != tt.want {
			t.Errorf("bucketOf(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
	for i := range LatencyBuckets {
		b := BucketBound(i)
		if got := bucketOf(b); got != i {
			t.Errorf("bucketOf(%v) = %d, want %d", b, got, i)
		}
		if got := bucketOf(b + 1); got != i+1 {
			t.Errorf("bucketOf(%v+1ns) = %d, want %d", b, got, i+1)
		}
		if i > 0 {
			if got := bucketOf(BucketBound(i-1) + 1); got != i {
				t.Errorf("bucketOf(just above bound %d) = %d, want %d", i-1, got, i)
			}
		}
	}
}

// failingWrites fails every write; asyncMemory completes writes at once.
type failingWrites struct{ backend.Backend }

func (failingWrites) WriteAt(context.Context, []byte, int64, backend.WriteFlags) error {
	return backend.ErrWriteFault
}

type asyncMemory struct {
	*backend.Memory
	clk *clock.Manual
}

func (m asyncMemory) AsyncWrites() bool { return true }
func (m asyncMemory) WriteAtAsync(p []byte, off int64, f backend.WriteFlags, done func(error)) {
	m.clk.Advance(60 * time.Microsecond)
	done(m.WriteAt(context.Background(), p, off, f))
}

// Counted counts every op of a plain backend: completed ops and their
// bytes, failures, and every latency; Instrument leaves a Volume as it is.
func TestCountedCountsAPlainBackend(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := newMemory(t, 1<<20)
	c := Instrument(asyncMemory{mem, clk}, clk)
	ctx := context.Background()
	buf := make([]byte, 8192)
	for range 3 {
		if err := c.WriteAt(ctx, buf, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	var async error = errPending
	aw, ok := backend.AsAsyncWriter(c)
	if !ok {
		t.Fatal("a counted asynchronous backend lost AsyncWriter")
	}
	aw.WriteAtAsync(buf[:4096], 0, 0, func(err error) { async = err })
	if async != nil {
		t.Fatalf("asynchronous write: %v", async)
	}
	_ = c.ReadAt(ctx, buf[:4096], 4096)
	_ = c.Flush(ctx)
	_ = c.Trim(ctx, 0, 4096)
	_ = c.WriteZeroes(ctx, 0, 4096)
	f := Instrument(failingWrites{mem}, clk)
	if err := f.WriteAt(ctx, buf, 0, 0); !errors.Is(err, backend.ErrWriteFault) {
		t.Fatalf("error not passed through: %v", err)
	}
	w := c.Counters().Stats(OpWrite)
	if w.Ops != 4 || w.Errors != 0 || w.Bytes != 3*8192+4096 || w.Count() != 4 {
		t.Errorf("writes: %+v", w)
	}
	if w.Buckets[0] != 3 || w.Buckets[bucketOf(60*time.Microsecond)] != 1 || w.LatencySum != 60*time.Microsecond {
		t.Errorf("write latencies: %v, sum %v", w.Buckets, w.LatencySum)
	}
	for op, want := range map[Op]uint64{OpRead: 1, OpFlush: 1, OpTrim: 1, OpWriteZeroes: 1} {
		if s := c.Counters().Stats(op); s.Ops != want || s.Count() != want {
			t.Errorf("%v: %+v", op, s)
		}
	}
	if r := c.Counters().Stats(OpRead); r.Bytes != 4096 {
		t.Errorf("read bytes %d", r.Bytes)
	}
	if s := f.Counters().Stats(OpWrite); s.Errors != 1 || s.Ops != 0 || s.Bytes != 0 || s.Count() != 1 {
		t.Errorf("failed write: %+v", s)
	}
	v := newVolume(mem, clk)
	if Instrument(v, clk) != Instrumented(v) {
		t.Error("Instrument wrapped a Volume, which counts itself")
	}
}

// Counting allocates nothing: not a synchronous op, not an asynchronous
// write's completion (pooled).
func TestCountingAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops objects at random under the race detector")
	}
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := Instrument(asyncMemory{newMemory(t, 1<<20), clk}, clk)
	aw, _ := backend.AsAsyncWriter(c)
	buf := make([]byte, 4096)
	ctx := context.Background()
	done := func(error) {}
	if n := testing.AllocsPerRun(100, func() { _ = c.WriteAt(ctx, buf, 0, 0) }); n != 0 {
		t.Errorf("a counted WriteAt allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { aw.WriteAtAsync(buf, 0, 0, done) }); n != 0 {
		t.Errorf("a counted WriteAtAsync allocates %v times", n)
	}
}

// A replicated volume counts its I/O as the target sees it: the leader's
// writes and reads with their bytes, a follower's refusals as errors.
func TestVolumeCountsItsIO(t *testing.T) {
	c := newSimCluster(t, 41)
	for _, id := range members {
		c.start(id, newMemory(t, simVolumeSize))
	}
	leader := c.leader()
	for i := range int64(5) {
		if err := c.write(leader, i, byte(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.read(leader, 0); err != nil {
		t.Fatal(err)
	}
	follower := leader%3 + 1
	c.run(50 * time.Millisecond)
	if err := c.write(follower, 0, 1); err == nil {
		t.Fatal("a follower accepted a write")
	}
	lw, lr := c.vols[leader].Counters().Stats(OpWrite), c.vols[leader].Counters().Stats(OpRead)
	if lw.Ops != 5 || lw.Bytes != 5*4096 || lw.Errors != 0 || lw.Count() != 5 {
		t.Errorf("leader's writes: %+v", lw)
	}
	if lr.Ops != 1 || lr.Bytes != 4096 || lr.Count() != 1 {
		t.Errorf("leader's reads: %+v", lr)
	}
	if fw := c.vols[follower].Counters().Stats(OpWrite); fw.Ops != 0 || fw.Errors != 1 || fw.Bytes != 0 {
		t.Errorf("follower's writes: %+v", fw)
	}
}
