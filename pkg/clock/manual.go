package clock

import (
	"container/heap"
	"fmt"
	"sync"
	"time"
)

// Manual is a Clock whose time moves only when Advance is called. It is the
// clock of every deterministic test.
//
// Advance fires the timers and tickers that fall due in time order; timers due
// at the same instant fire in the order they were scheduled. A fired value is
// delivered with a non-blocking send on a channel of capacity one, as package
// time does: a receiver that has not drained the previous value misses ticks.
//
// A Manual is safe for concurrent use.
type Manual struct {
	mu struct {
		sync.Mutex
		// now is the current time. Invariant: every queued waiter has
		// when > now after Advance returns.
		now time.Time
		// queue holds the active timers and tickers, earliest first.
		queue waiterQueue
		// sequence orders waiters that fall due at the same instant.
		sequence uint64
	}
	// changed is signalled whenever the queue grows, for BlockUntil.
	changed *sync.Cond
}

// NewManual returns a Manual clock reading start.
func NewManual(start time.Time) *Manual {
	m := &Manual{}
	m.mu.now = start
	m.changed = sync.NewCond(&m.mu)
	return m
}

// Now returns the clock's current time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.now
}

// Since returns Now().Sub(t).
func (m *Manual) Since(t time.Time) time.Duration { return m.Now().Sub(t) }

// Advance moves the clock forward by d, firing every timer and ticker that
// falls due on the way, in time order. A ticker due several times within d is
// rescheduled each time; since its channel holds one value, the extra ticks are
// dropped as with a slow receiver. Advance panics if d is negative: time does
// not run backwards.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("clock: Advance(%v): negative duration", d))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	target := m.mu.now.Add(d)
	for len(m.mu.queue) > 0 && !m.mu.queue[0].when.After(target) {
		w := m.mu.queue[0]
		m.mu.now = w.when
		w.fire(m.mu.now)
		if w.period > 0 {
			w.when = w.when.Add(w.period)
			w.sequence = m.nextSequenceLocked()
			heap.Fix(&m.mu.queue, w.index)
		} else {
			heap.Remove(&m.mu.queue, w.index)
		}
	}
	m.mu.now = target
}

// NextDeadline returns when the earliest active timer or ticker falls due, and
// false when none is active. A simulator that wants to handle one event at a
// time advances to it: m.Advance(deadline.Sub(m.Now())). (Advancing past
// several deadlines at once leaves several channels ready, and a select over
// them picks one at random.)
func (m *Manual) NextDeadline() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.mu.queue) == 0 {
		return time.Time{}, false
	}
	return m.mu.queue[0].when, true
}

// Waiters returns the number of active timers and tickers.
func (m *Manual) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.queue)
}

// BlockUntil blocks until at least n timers and tickers are active. Tests use
// it to wait until the code under test has armed its timer before advancing
// the clock past it.
func (m *Manual) BlockUntil(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.mu.queue) < n {
		m.changed.Wait()
	}
}

// NewTicker returns a ticker firing every d of manual time. It panics if
// d <= 0.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic(fmt.Sprintf("clock: NewTicker(%v): non-positive interval", d))
	}
	w := &waiter{clock: m, channel: make(chan time.Time, 1), period: d, index: -1}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scheduleLocked(w, d)
	return manualTicker{w: w}
}

// NewTimer returns a timer firing once after d of manual time. With d <= 0
// it fires before NewTimer returns.
func (m *Manual) NewTimer(d time.Duration) Timer {
	w := &waiter{clock: m, channel: make(chan time.Time, 1), index: -1}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scheduleLocked(w, d)
	return manualTimer{w: w}
}

func (m *Manual) nextSequenceLocked() uint64 {
	m.mu.sequence++
	return m.mu.sequence
}

// scheduleLocked queues w to fire at now+d, or fires it at once when d <= 0
// and w is a timer. w must not be queued.
func (m *Manual) scheduleLocked(w *waiter, d time.Duration) {
	if d <= 0 && w.period == 0 {
		w.fire(m.mu.now)
		return
	}
	w.when = m.mu.now.Add(d)
	w.sequence = m.nextSequenceLocked()
	heap.Push(&m.mu.queue, w)
	m.changed.Broadcast()
}

// unscheduleLocked removes w from the queue and discards an undelivered
// value. It reports whether w was queued.
func (m *Manual) unscheduleLocked(w *waiter) bool {
	active := w.index >= 0
	if active {
		heap.Remove(&m.mu.queue, w.index)
	}
	select {
	case <-w.channel:
	default:
	}
	return active
}

// waiter is a timer or ticker (period > 0) of a Manual clock.
type waiter struct {
	clock   *Manual
	channel chan time.Time
	period  time.Duration
	// when, sequence and index are protected by clock.mu. index is the
	// position in the queue, or -1 when not queued.
	when     time.Time
	sequence uint64
	index    int
}

// fire delivers now without blocking; a full channel means the receiver has
// not consumed the previous value and this one is dropped.
func (w *waiter) fire(now time.Time) {
	select {
	case w.channel <- now:
	default:
	}
}

type manualTicker struct{ w *waiter }

func (t manualTicker) C() <-chan time.Time { return t.w.channel }

func (t manualTicker) Stop() {
	t.w.clock.mu.Lock()
	defer t.w.clock.mu.Unlock()
	t.w.clock.unscheduleLocked(t.w)
}

type manualTimer struct{ w *waiter }

func (t manualTimer) C() <-chan time.Time { return t.w.channel }

func (t manualTimer) Stop() bool {
	t.w.clock.mu.Lock()
	defer t.w.clock.mu.Unlock()
	return t.w.clock.unscheduleLocked(t.w)
}

func (t manualTimer) Reset(d time.Duration) bool {
	m := t.w.clock
	m.mu.Lock()
	defer m.mu.Unlock()
	active := m.unscheduleLocked(t.w)
	m.scheduleLocked(t.w, d)
	return active
}

// waiterQueue is a min-heap of waiters ordered by (when, sequence).
type waiterQueue []*waiter

func (q waiterQueue) Len() int { return len(q) }

func (q waiterQueue) Less(i, j int) bool {
	if !q[i].when.Equal(q[j].when) {
		return q[i].when.Before(q[j].when)
	}
	return q[i].sequence < q[j].sequence
}

func (q waiterQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}

func (q *waiterQueue) Push(x any) {
	w := x.(*waiter)
	w.index = len(*q)
	*q = append(*q, w)
}

func (q *waiterQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*q = old[:len(old)-1]
	return w
}
