package qos

import (
	"context"
	"errors"
	"testing"
	"time"

	"basalt/pkg/clock"
)

// The limiter's tests run on a manual clock: every wait is computed, so each
// is asserted to the nanosecond.

func newManual() *clock.Manual { return clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

func newTest(t *testing.T, l Limits) (*Throttle, *clock.Manual) {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	clk := newManual()
	th := NewThrottle(clk, nil, 0)
	th.Set(l)
	return th, clk
}

// waits reserves n commands of size bytes in direction d at the current
// instant and returns their waits.
func waits(th *Throttle, d Dir, n, size int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = th.Reserve(d, size)
	}
	return out
}

func TestZeroLimitsAreUnlimited(t *testing.T) {
	th, clk := newTest(t, Limits{})
	for range 100000 {
		if w := th.Reserve(Write, 1<<20); w != 0 {
			t.Fatalf("an unlimited throttle made a command wait %v", w)
		}
	}
	th.Set(Limits{ReadIOPS: Limit{Rate: 10}})
	th.Set(Limits{}) // cleared again
	if w := th.Reserve(Read, 4096); w != 0 || th.active.Load() {
		t.Fatalf("after clearing the limits: wait %v, active %v", w, th.active.Load())
	}
	if s := th.Counters().Stats(Write); s != (Stats{}) {
		t.Fatalf("unlimited commands counted as throttled: %+v", s)
	}
	_ = clk
}

func TestIOPSLimitAndDefaultBurst(t *testing.T) {
	th, clk := newTest(t, Limits{IOPS: Limit{Rate: 100}})
	// A full bucket of one second's worth passes at once, then one command
	// every 10 ms.
	for i, w := range waits(th, Read, 100, 4096) {
		if w != 0 {
			t.Fatalf("command %d of the burst waited %v", i, w)
		}
	}
	for i, w := range waits(th, Write, 3, 4096) {
		if want := time.Duration(i+1) * 10 * time.Millisecond; w != want {
			t.Fatalf("command %d past the burst waits %v, want %v", i, w, want)
		}
	}
	// Idle long enough, the bucket is full again (and never fuller).
	clk.Advance(10 * time.Second)
	for i, w := range waits(th, Read, 101, 0) {
		if (i < 100) != (w == 0) {
			t.Fatalf("after idling: command %d waits %v", i, w)
		}
	}
	s := th.Counters().Stats(Write)
	if s.Throttled != 3 || s.Waited != 60*time.Millisecond || s.Overruns != 0 {
		t.Fatalf("write counters %+v, want 3 throttled for 60ms", s)
	}
}

func TestExplicitBurst(t *testing.T) {
	th, _ := newTest(t, Limits{WriteIOPS: Limit{Rate: 1000, Burst: 10}})
	for i, w := range waits(th, Write, 13, 4096) {
		want := time.Duration(max(0, i-9)) * time.Millisecond
		if w != want {
			t.Fatalf("command %d waits %v, want %v", i, w, want)
		}
	}
}

func TestBandwidthCountsBytes(t *testing.T) {
	th, clk := newTest(t, Limits{Bytes: Limit{Rate: 1_000_000, Burst: 4096}})
	const ns = time.Nanosecond
	if w := th.Reserve(Write, 4096); w != 0 {
		t.Fatalf("a write within the burst waits %v", w)
	}
	if w := th.Reserve(Write, 4096); w != 4096*time.Microsecond {
		t.Fatalf("the next 4096 bytes wait %v, want 4.096ms", w)
	}
	if w := th.Reserve(Read, 8192); w != (4096+8192)*time.Microsecond {
		t.Fatalf("8192 bytes more wait %v, want 12.288ms", w)
	}
	// A command larger than the burst passes, after the time its bytes
	// take; then the bucket is in its debt.
	clk.Advance(time.Hour)
	th.Set(Limits{Bytes: Limit{Rate: 10_000_000, Burst: 4096}})
	if w := th.Reserve(Write, 1<<20); w != time.Duration(1<<20-4096)*100*ns {
		t.Fatalf("1 MiB against a 4 KiB burst waits %v", w)
	}
	// Commands without bytes take nothing from a bandwidth limit.
	if w := th.Reserve(Write, 0); w != 0 {
		t.Fatalf("a command of no bytes waits %v on a bandwidth limit", w)
	}
}

func TestReadAndWriteLimitsAreSeparate(t *testing.T) {
	th, _ := newTest(t, Limits{ReadIOPS: Limit{Rate: 10, Burst: 1}, WriteBytes: Limit{Rate: 4096, Burst: 4096}})
	waits(th, Read, 1, 4096)
	if w := th.Reserve(Read, 4096); w != 100*time.Millisecond {
		t.Fatalf("a read past the read limit waits %v", w)
	}
	if w := th.Reserve(Write, 4096); w != 0 {
		t.Fatalf("a write waits %v for the read limit", w)
	}
	if w := th.Reserve(Write, 4096); w != time.Second {
		t.Fatalf("a write past the write bandwidth waits %v", w)
	}
	if w := th.Reserve(Read, 1<<20); w != 200*time.Millisecond {
		t.Fatalf("a large read waits %v for the write bandwidth or bytes", w)
	}
	// The combined limit takes from both directions.
	th.Set(Limits{IOPS: Limit{Rate: 10, Burst: 2}})
	if a, b, c := th.Reserve(Read, 0), th.Reserve(Write, 0), th.Reserve(Read, 0); a != 0 || b != 0 || c != 100*time.Millisecond {
		t.Fatalf("combined limit: waits %v %v %v, want 0 0 100ms", a, b, c)
	}
}

func TestRateIsExactOverManyCommands(t *testing.T) {
	// 3 per second does not divide a second in nanoseconds: the remainder
	// carries, so command 3k+1 goes at exactly k seconds.
	th := NewThrottle(newManual(), nil, time.Hour)
	th.Set(Limits{ReadIOPS: Limit{Rate: 3, Burst: 1}})
	w := waits(th, Read, 3001, 0)
	for k := range 1001 {
		if got := w[3*k]; got != time.Duration(k)*time.Second {
			t.Fatalf("command %d waits %v, want %ds", 3*k, got, k)
		}
	}
}

func TestOnlineChange(t *testing.T) {
	th, clk := newTest(t, Limits{WriteIOPS: Limit{Rate: 100, Burst: 1}})
	waits(th, Write, 1, 0)
	if w := th.Reserve(Write, 0); w != 10*time.Millisecond {
		t.Fatalf("wait %v before the change", w)
	}
	// The bucket owes two tokens (20 ms at 100/s); at 1000/s that is 2 ms,
	// and the next command waits the debt plus its own token, less the
	// burst of one.
	th.Set(Limits{WriteIOPS: Limit{Rate: 1000, Burst: 1}})
	if w := th.Reserve(Write, 0); w != 2*time.Millisecond {
		t.Fatalf("wait %v after raising the limit, want 2ms", w)
	}
	// A change of another limit leaves this bucket alone.
	th.Set(Limits{WriteIOPS: Limit{Rate: 1000, Burst: 1}, ReadIOPS: Limit{Rate: 5}})
	if w := th.Reserve(Write, 0); w != 3*time.Millisecond {
		t.Fatalf("wait %v after changing another limit, want 3ms", w)
	}
	// Lowering it: the debt (4 tokens) now takes 4 s at 1/s.
	th.Set(Limits{WriteIOPS: Limit{Rate: 1, Burst: 1}, ReadIOPS: Limit{Rate: 5}})
	clk.Advance(0)
	if got := th.Limits().WriteIOPS.Rate; got != 1 {
		t.Fatalf("limits in force: %v", th.Limits())
	}
	// The debt is capped at MaxWait plus the burst: the next command
	// would wait 4 s, and waits the bound instead.
	if w := th.Reserve(Write, 0); w != MaxWait {
		t.Fatalf("wait %v after lowering the limit, want the bound %v", w, MaxWait)
	}
	// Removing the limit lets everything through at once.
	th.Set(Limits{ReadIOPS: Limit{Rate: 5}})
	if w := th.Reserve(Write, 0); w != 0 {
		t.Fatalf("wait %v once the write limit is gone", w)
	}
}

func TestWaitIsBounded(t *testing.T) {
	th, clk := newTest(t, Limits{ReadIOPS: Limit{Rate: 1, Burst: 1}})
	w := waits(th, Read, 5, 0)
	want := []time.Duration{0, time.Second, time.Second, time.Second, time.Second}
	for i := range w {
		if w[i] != want[i] {
			t.Fatalf("waits %v, want %v", w, want)
		}
	}
	if s := th.Counters().Stats(Read); s.Overruns != 3 || s.Throttled != 4 || s.Waited != 4*time.Second {
		t.Fatalf("counters %+v, want 3 overruns of 4 throttled", s)
	}
	// The debt was forgiven past the bound, not carried: a second later
	// the bucket owes exactly what the last command's release left.
	clk.Advance(time.Second)
	if w := th.Reserve(Read, 0); w != time.Second {
		t.Fatalf("a second later: wait %v, want 1s", w)
	}
}

func TestWaitBlocksUntilRelease(t *testing.T) {
	th, clk := newTest(t, Limits{ReadIOPS: Limit{Rate: 10, Burst: 1}})
	if err := th.Wait(context.Background(), Read, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- th.Wait(context.Background(), Read, 0) }()
	clk.BlockUntil(1)
	clk.Advance(99 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before the release", err)
	case <-time.After(10 * time.Millisecond):
	}
	clk.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A canceled context ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- th.Wait(ctx, Read, 0) }()
	clk.BlockUntil(1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a canceled context: %v", err)
	}
}

func TestDeferResumesInReleaseOrder(t *testing.T) {
	th, clk := newTest(t, Limits{ReadIOPS: Limit{Rate: 10, Burst: 1}, WriteIOPS: Limit{Rate: 100, Burst: 1}})
	order := make(chan string, 8)
	resume := func(s string) func() { return func() { order <- s } }
	if th.Defer(Read, 0, resume("r0")) || th.Defer(Write, 0, resume("w0")) {
		t.Fatal("commands within the burst deferred")
	}
	// r1 goes at 100 ms, w1 at 10 ms, w2 at 20 ms: w1 arrives last but
	// goes to the head of the queue.
	for _, c := range []struct {
		d    Dir
		name string
	}{{Read, "r1"}, {Write, "w1"}, {Write, "w2"}} {
		if !th.Defer(c.d, 0, resume(c.name)) {
			t.Fatalf("%s not deferred", c.name)
		}
	}
	expect := func(at time.Duration, want ...string) {
		t.Helper()
		for _, w := range want {
			select {
			case got := <-order:
				if got != w {
					t.Fatalf("at %v: resumed %s, want %s", at, got, w)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("at %v: %s not resumed", at, w)
			}
		}
		select {
		case got := <-order:
			t.Fatalf("at %v: %s resumed early", at, got)
		case <-time.After(5 * time.Millisecond):
		}
	}
	step := func(to time.Duration, want ...string) {
		waitArmed(t, clk)
		clk.Advance(to)
		expect(to, want...)
	}
	step(10*time.Millisecond, "w1")
	step(10*time.Millisecond, "w2")
	step(80*time.Millisecond, "r1")
	deadline := time.Now().Add(5 * time.Second)
	for th.Queued() != 0 || th.running() {
		if time.Now().After(deadline) {
			t.Fatal("the queue's goroutine did not stop")
		}
		time.Sleep(time.Millisecond)
	}
}

// waitArmed waits until the throttle's goroutine has armed its timer.
func waitArmed(t *testing.T, clk *clock.Manual) {
	t.Helper()
	clk.BlockUntil(1)
}

func (t *Throttle) running() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.running
}

func TestValidate(t *testing.T) {
	for _, l := range []Limits{
		{IOPS: Limit{Burst: 5}},
		{WriteBytes: Limit{Rate: MaxRate + 1}},
		{ReadIOPS: Limit{Rate: 1, Burst: MaxRate + 1}},
	} {
		if err := l.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", l, err)
		}
	}
	ok := Limits{IOPS: Limit{Rate: 20000}, Bytes: Limit{Rate: 400_000_000, Burst: 1 << 30}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := ok.String(); s != "iops=20000 bytes_per_second=400000000/1073741824" {
		t.Fatalf("String: %q", s)
	}
}

func TestExtremeLimitsDoNotOverflow(t *testing.T) {
	th, clk := newTest(t, Limits{Bytes: Limit{Rate: 1, Burst: 1}, IOPS: Limit{Rate: MaxRate, Burst: MaxRate}})
	for range 10 {
		if w := th.Reserve(Write, 1<<40); w < 0 || w > MaxWait {
			t.Fatalf("wait %v outside [0, MaxWait]", w)
		}
		clk.Advance(time.Hour)
	}
}

func TestHugeBurstAtLowRateDoesNotOverflow(t *testing.T) {
	th, clk := newTest(t, Limits{ReadIOPS: Limit{Rate: 1, Burst: MaxRate}, WriteBytes: Limit{Rate: 1, Burst: MaxRate}})
	for i := range 1000 {
		if w := th.Reserve(Read, 0); w != 0 {
			t.Fatalf("command %d within a burst of 2^50 waits %v", i, w)
		}
		if w := th.Reserve(Write, 1<<20); w != 0 {
			t.Fatalf("write %d within a burst of 2^50 bytes waits %v", i, w)
		}
	}
	th.Set(Limits{ReadIOPS: Limit{Rate: 1, Burst: 1}, WriteBytes: Limit{Rate: 1, Burst: MaxRate}})
	clk.Advance(time.Second)
	if w := th.Reserve(Read, 0); w < 0 || w > MaxWait {
		t.Fatalf("after lowering the burst: wait %v", w)
	}
}
