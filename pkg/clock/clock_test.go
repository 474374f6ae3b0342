package clock

import (
	"sync"
	"testing"
	"time"
)

var epoch = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// receive returns the pending value on c, failing the test when there is none.
func receive(t *testing.T, c <-chan time.Time) time.Time {
	t.Helper()
	select {
	case v := <-c:
		return v
	default:
		t.Fatal("expected a value on the channel, found none")
		return time.Time{}
	}
}

func expectEmpty(t *testing.T, c <-chan time.Time) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("expected no value, received %v", v)
	default:
	}
}

func TestManualNowAndSinceFollowAdvance(t *testing.T) {
	m := NewManual(epoch)
	if got := m.Now(); !got.Equal(epoch) {
		t.Fatalf("Now() = %v, want %v", got, epoch)
	}
	m.Advance(1500 * time.Millisecond)
	if got := m.Since(epoch); got != 1500*time.Millisecond {
		t.Fatalf("Since(epoch) = %v, want 1.5s", got)
	}
}

func TestManualAdvanceNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Advance(-1) did not panic")
		}
	}()
	NewManual(epoch).Advance(-1)
}

// Timers created in any order fire with their own due time, and only once they
// are due.
func TestManualTimersFireAtTheirDueTime(t *testing.T) {
	m := NewManual(epoch)
	delays := []time.Duration{3 * time.Second, time.Second, 2 * time.Second, 5 * time.Second}
	timers := make([]Timer, len(delays))
	for i, d := range delays {
		timers[i] = m.NewTimer(d)
	}
	m.Advance(3 * time.Second)
	for i, d := range delays {
		if d > 3*time.Second {
			expectEmpty(t, timers[i].C())
			continue
		}
		if got := receive(t, timers[i].C()); !got.Equal(epoch.Add(d)) {
			t.Errorf("timer %d fired with %v, want %v", i, got, epoch.Add(d))
		}
	}
	if m.Waiters() != 1 {
		t.Fatalf("Waiters() = %d, want 1", m.Waiters())
	}
	m.Advance(2 * time.Second)
	if got := receive(t, timers[3].C()); !got.Equal(epoch.Add(5 * time.Second)) {
		t.Fatalf("last timer fired with %v", got)
	}
}

func TestManualTimerWithNonPositiveDelayFiresImmediately(t *testing.T) {
	m := NewManual(epoch)
	for _, d := range []time.Duration{0, -time.Second} {
		timer := m.NewTimer(d)
		if got := receive(t, timer.C()); !got.Equal(epoch) {
			t.Fatalf("NewTimer(%v) fired with %v, want %v", d, got, epoch)
		}
		if timer.Stop() {
			t.Fatalf("Stop after firing returned true")
		}
	}
}

func TestManualTimerStopAndReset(t *testing.T) {
	tests := []struct {
		name       string
		run        func(m *Manual, timer Timer) bool
		wantResult bool
		wantFire   bool
	}{
		{"stop active timer", func(m *Manual, tm Timer) bool { return tm.Stop() }, true, false},
		{"stop twice", func(m *Manual, tm Timer) bool { tm.Stop(); return tm.Stop() }, false, false},
		{"stop after due discards value", func(m *Manual, tm Timer) bool {
			m.Advance(time.Second)
			return tm.Stop()
		}, false, false},
		{"reset active timer", func(m *Manual, tm Timer) bool { return tm.Reset(500 * time.Millisecond) }, true, true},
		{"reset fired timer", func(m *Manual, tm Timer) bool {
			m.Advance(time.Second)
			return tm.Reset(500 * time.Millisecond)
		}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewManual(epoch)
			timer := m.NewTimer(time.Second)
			if got := tt.run(m, timer); got != tt.wantResult {
				t.Fatalf("result = %v, want %v", got, tt.wantResult)
			}
			expectEmpty(t, timer.C())
			m.Advance(10 * time.Second)
			select {
			case <-timer.C():
				if !tt.wantFire {
					t.Fatal("stopped timer fired")
				}
			default:
				if tt.wantFire {
					t.Fatal("reset timer did not fire")
				}
			}
		})
	}
}

// A ticker interleaves with a timer in time order, and a receiver that does
// not drain the channel misses ticks instead of queuing them.
func TestManualTickerPeriodAndDroppedTicks(t *testing.T) {
	m := NewManual(epoch)
	ticker := m.NewTicker(time.Second)
	for i := 1; i <= 3; i++ {
		m.Advance(time.Second)
		if got := receive(t, ticker.C()); !got.Equal(epoch.Add(time.Duration(i) * time.Second)) {
			t.Fatalf("tick %d = %v", i, got)
		}
	}
	m.Advance(5 * time.Second) // ticks at 4s..8s; only the first fits in the channel
	if got := receive(t, ticker.C()); !got.Equal(epoch.Add(4 * time.Second)) {
		t.Fatalf("kept tick = %v, want 4s", got)
	}
	expectEmpty(t, ticker.C())
	ticker.Stop()
	m.Advance(10 * time.Second)
	expectEmpty(t, ticker.C())
	if m.Waiters() != 0 {
		t.Fatalf("Waiters() = %d after Stop, want 0", m.Waiters())
	}
}

func TestManualNewTickerNonPositivePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewTicker(0) did not panic")
		}
	}()
	NewManual(epoch).NewTicker(0)
}

// BlockUntil lets a test wait until another goroutine has armed its timer, so
// the Advance that follows is certain to fire it.
func TestManualBlockUntilWaitsForArmedTimer(t *testing.T) {
	m := NewManual(epoch)
	var wg sync.WaitGroup
	fired := make(chan time.Time, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		timer := m.NewTimer(time.Minute)
		fired <- <-timer.C()
	}()
	m.BlockUntil(1)
	m.Advance(time.Minute)
	wg.Wait()
	if got := <-fired; !got.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("fired at %v", got)
	}
}

func TestRealClockTimerAndTicker(t *testing.T) {
	c := Real()
	start := c.Now()
	timer := c.NewTimer(time.Millisecond)
	<-timer.C()
	if c.Since(start) < time.Millisecond {
		t.Fatal("real timer fired early")
	}
	if timer.Stop() {
		t.Fatal("Stop on fired timer returned true")
	}
	if timer.Reset(time.Hour) {
		t.Fatal("Reset on fired timer returned true")
	}
	if !timer.Stop() {
		t.Fatal("Stop on re-armed timer returned false")
	}
	ticker := c.NewTicker(time.Millisecond)
	<-ticker.C()
	<-ticker.C()
	ticker.Stop()
}

// Stepping from deadline to deadline delivers one event per step, in time
// order, interleaving a ticker with timers.
func TestManualNextDeadlineStepsThroughEventsInOrder(t *testing.T) {
	m := NewManual(epoch)
	if _, ok := m.NextDeadline(); ok {
		t.Fatal("NextDeadline reported a deadline with nothing armed")
	}
	ticker := m.NewTicker(2 * time.Second)
	late := m.NewTimer(3 * time.Second)
	early := m.NewTimer(time.Second)
	type event struct {
		name string
		at   time.Duration
	}
	want := []event{{"early", time.Second}, {"tick", 2 * time.Second}, {"late", 3 * time.Second},
		{"tick", 4 * time.Second}, {"tick", 6 * time.Second}}
	for _, w := range want {
		deadline, ok := m.NextDeadline()
		if !ok {
			t.Fatal("no deadline")
		}
		m.Advance(deadline.Sub(m.Now()))
		var got event
		select {
		case v := <-early.C():
			got = event{"early", v.Sub(epoch)}
		case v := <-late.C():
			got = event{"late", v.Sub(epoch)}
		case v := <-ticker.C():
			got = event{"tick", v.Sub(epoch)}
		}
		if got != w {
			t.Fatalf("got %v, want %v", got, w)
		}
	}
}
