package qos

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/clock"
)

// MaxWait is the default bound on a throttled command's wait (doc.go, "The
// bound on waiting"): far below the Linux NVMe host's 30 s command timeout,
// so that a limit never makes a host abort a command and reset its
// controller.
const MaxWait = time.Second

// Counters count what a throttle did, per direction, all atomics (the
// metrics read them at scrape time). The zero value is ready.
type Counters struct {
	dir [NumDirs]dirCounters
}

type dirCounters struct {
	throttled atomic.Uint64 // commands that had to wait
	waited    atomic.Int64  // nanoseconds they were scheduled to wait, in total
	overruns  atomic.Uint64 // commands let through at MaxWait, their limit exceeded
}

// Stats are one direction's counts.
type Stats struct {
	// Throttled is how many commands had to wait, and Waited the total of
	// their waits (as scheduled when each arrived).
	Throttled uint64
	Waited    time.Duration
	// Overruns is how many commands went after MaxWait although their
	// limit would have kept them longer.
	Overruns uint64
}

// Stats returns d's counts; each is read atomically, not all at one
// instant.
func (c *Counters) Stats(d Dir) Stats {
	m := &c.dir[d]
	return Stats{Throttled: m.throttled.Load(), Waited: time.Duration(m.waited.Load()), Overruns: m.overruns.Load()}
}

// Throttle is one volume's limits and buckets. Its zero value is not
// usable: NewThrottle makes one, unlimited until Set. It is safe for
// concurrent use.
type Throttle struct {
	clock    clock.Clock
	epoch    time.Time
	maxWait  int64 // ns
	counters *Counters
	// active is false while no limit is set: then a command costs one
	// atomic load.
	active atomic.Bool
	// timers are idle timers for Wait, stopped.
	timers sync.Pool

	mu struct {
		sync.Mutex
		limits  Limits
		buckets [numKinds]bucket
		// queue holds Defer's commands until their release, earliest
		// first; running is set while the goroutine serving it runs.
		queue   deferQueue
		seq     uint64
		running bool
	}
	// kick wakes the queue's goroutine when a command goes to the head of
	// the queue (capacity 1).
	kick chan struct{}
}

// NewThrottle returns an unlimited throttle reading clk that counts into
// counters (nil: its own) and bounds waits by maxWait (0: MaxWait).
func NewThrottle(clk clock.Clock, counters *Counters, maxWait time.Duration) *Throttle {
	if counters == nil {
		counters = &Counters{}
	}
	if maxWait <= 0 {
		maxWait = MaxWait
	}
	maxWait = min(maxWait, maxSpan)
	t := &Throttle{clock: clk, epoch: clk.Now(), maxWait: int64(maxWait), counters: counters,
		kick: make(chan struct{}, 1)}
	t.timers.New = func() any {
		tm := clk.NewTimer(time.Hour)
		tm.Stop()
		return tm
	}
	return t
}

// Counters returns the throttle's counters.
func (t *Throttle) Counters() *Counters { return t.counters }

// Limits returns the limits in force.
func (t *Throttle) Limits() Limits {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.limits
}

// Set puts l in force at once, for every command that arrives after it
// (commands already waiting keep their release times). A bucket whose
// limit changes keeps its debt (bucket.set); the others are untouched. l
// must be valid (Limits.Validate); an invalid limit is clamped to MaxRate.
func (t *Throttle) Set(l Limits) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	old, next := t.mu.limits.all(), l.all()
	for k := range numKinds {
		lim := *next[k]
		lim.Rate, lim.Burst = min(lim.Rate, MaxRate), min(lim.Burst, MaxRate)
		if lim.Rate == 0 {
			lim.Burst = 0
		}
		if lim != *old[k] {
			t.mu.buckets[k].set(lim, now, t.maxWait)
			*old[k] = lim
		}
	}
	t.active.Store(!t.mu.limits.IsZero())
}

// now returns the throttle's time in nanoseconds since its epoch.
func (t *Throttle) now() int64 { return int64(t.clock.Since(t.epoch)) }

// reserveLocked takes a command of n bytes in direction d from its buckets
// and returns how long it must wait (0: none) from now, the throttle's
// time it read, counting it.
func (t *Throttle) reserveLocked(d Dir, n int) (wait time.Duration, now int64) {
	now = t.now()
	b := &t.mu.buckets
	cost := uint64(max(n, 0))
	iops, bytes := kindReadIOPS, kindReadBytes
	if d == Write {
		iops, bytes = kindWriteIOPS, kindWriteBytes
	}
	release := max(b[kindIOPS].reserve(now, 1), b[iops].reserve(now, 1),
		b[kindBytes].reserve(now, cost), b[bytes].reserve(now, cost))
	if release <= now {
		return 0, now
	}
	c := &t.counters.dir[d]
	if release-now > t.maxWait {
		release = now + t.maxWait
		for _, k := range [4]kind{kindIOPS, iops, kindBytes, bytes} {
			b[k].forgive(release)
		}
		c.overruns.Add(1)
	}
	c.throttled.Add(1)
	c.waited.Add(release - now)
	return time.Duration(release - now), now
}

// Reserve takes a command of n bytes in direction d from the buckets and
// returns how long it must wait before it goes (0: at once), at most the
// throttle's bound. The caller waits; Wait and Defer do it for it.
func (t *Throttle) Reserve(d Dir, n int) time.Duration {
	if !t.active.Load() {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	wait, _ := t.reserveLocked(d, n)
	return wait
}

// Wait blocks until a command of n bytes in direction d may go, or until
// ctx ends (then it returns ctx's error, and the command's tokens stay
// spent).
func (t *Throttle) Wait(ctx context.Context, d Dir, n int) error {
	wait := t.Reserve(d, n)
	if wait == 0 {
		return nil
	}
	tm := t.timers.Get().(clock.Timer)
	tm.Reset(wait)
	select {
	case <-tm.C():
		t.timers.Put(tm)
		return nil
	case <-ctx.Done():
		tm.Stop()
		t.timers.Put(tm)
		return ctx.Err()
	}
}

// Defer is Wait for a caller that must not block: it returns false when a
// command of n bytes in direction d may go at once (the caller goes on),
// else true, and then the throttle calls resume, on a goroutine of its
// own, once the command may go. resume must not block for long: later
// commands wait behind it.
func (t *Throttle) Defer(d Dir, n int, resume func()) bool {
	if !t.active.Load() {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	wait, now := t.reserveLocked(d, n)
	if wait == 0 {
		return false
	}
	t.mu.seq++
	head := t.mu.queue.push(deferred{release: now + int64(wait), seq: t.mu.seq, resume: resume})
	switch {
	case !t.mu.running:
		t.mu.running = true
		go t.serve()
	case head:
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// serve resumes the deferred commands as they fall due, and returns once
// the queue is empty.
func (t *Throttle) serve() {
	tm := t.timers.Get().(clock.Timer)
	defer t.timers.Put(tm)
	for {
		t.mu.Lock()
		if len(t.mu.queue) == 0 {
			t.mu.running = false
			t.mu.Unlock()
			return
		}
		head, now := t.mu.queue[0], t.now()
		if head.release <= now {
			t.mu.queue.pop()
			t.mu.Unlock()
			head.resume()
			continue
		}
		t.mu.Unlock()
		tm.Reset(time.Duration(head.release - now))
		select {
		case <-tm.C():
		case <-t.kick:
			tm.Stop()
		}
	}
}

// Queued returns how many deferred commands wait.
func (t *Throttle) Queued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.mu.queue)
}

// deferred is a command Defer holds until release.
type deferred struct {
	release int64
	seq     uint64
	resume  func()
}

// deferQueue is a binary min-heap of deferred commands by (release, seq),
// kept by hand so that pushing and popping allocate nothing once the slice
// has grown.
type deferQueue []deferred

func (q deferQueue) less(i, j int) bool {
	if q[i].release != q[j].release {
		return q[i].release < q[j].release
	}
	return q[i].seq < q[j].seq
}

// push adds x and reports whether it is now the earliest.
func (q *deferQueue) push(x deferred) bool {
	*q = append(*q, x)
	h := *q
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return i == 0
}

// pop removes the earliest command.
func (q *deferQueue) pop() {
	h := *q
	n := len(h) - 1
	h[0] = h[n]
	h[n] = deferred{}
	h = h[:n]
	for i := 0; ; {
		l, s := 2*i+1, i
		if l < n && h.less(l, s) {
			s = l
		}
		if r := l + 1; r < n && h.less(r, s) {
			s = r
		}
		if s == i {
			break
		}
		h[i], h[s] = h[s], h[i]
		i = s
	}
	*q = h
}
