package tcp

import (
	"container/heap"
	"errors"
	"sync"
	"time"

	"basalt/pkg/clock"
)

// Phases of a connection before it carries commands. The watchdog closes a
// connection that stays in phaseICReq longer than Options.ICReqTimeout, or
// in phaseConnect (ICResp sent, no Connect succeeded) longer than
// Options.ConnectTimeout.
const (
	phaseICReq uint32 = iota
	phaseConnect
	phaseConnected
	phaseExpired
)

// Reasons the watchdog closes a connection.
var (
	// ErrICReqTimeout: no valid ICReq within Options.ICReqTimeout.
	ErrICReqTimeout = errors.New("tcp: no ICReq in time")
	// ErrConnectTimeout: no Connect succeeded within
	// Options.ConnectTimeout of the ICResp.
	ErrConnectTimeout = errors.New("tcp: no Connect in time")
	// ErrH2CDataTimeout: the data an R2T asked for did not all arrive
	// within Options.H2CDataTimeout (the specification names no FES for
	// it, so the connection is closed without a C2HTermReq).
	ErrH2CDataTimeout = errors.New("tcp: H2C data not received in time")
)

// deadline is a queue's place in the watchdog's heap (queue.deadline),
// protected by the watchdog's lock. index is -1 when not queued.
type deadline struct {
	when  time.Time
	phase uint32
	index int
}

// watchdog enforces the handshake deadlines of one Listener's
// connections with one goroutine and one timer, whatever their number:
// an idle connection costs no goroutine or timer of its own.
type watchdog struct {
	clock clock.Clock
	kick  chan struct{} // capacity 1: the earliest deadline changed
	done  <-chan struct{}
	mu    struct {
		sync.Mutex
		heap deadlineHeap
	}
}

func newWatchdog(c clock.Clock, done <-chan struct{}) *watchdog {
	return &watchdog{clock: c, kick: make(chan struct{}, 1), done: done}
}

// arm gives q a deadline d from now for phase, replacing any other.
func (w *watchdog) arm(q *queue, phase uint32, d time.Duration) {
	if w == nil {
		return
	}
	w.mu.Lock()
	q.deadline.when, q.deadline.phase = w.clock.Now().Add(d), phase
	if q.deadline.index >= 0 {
		heap.Fix(&w.mu.heap, q.deadline.index)
	} else {
		heap.Push(&w.mu.heap, q)
	}
	first := w.mu.heap[0] == q
	w.mu.Unlock()
	if first {
		notify(w.kick)
	}
}

// disarm removes q's deadline, if any.
func (w *watchdog) disarm(q *queue) {
	if w == nil {
		return
	}
	w.mu.Lock()
	first := false
	if i := q.deadline.index; i >= 0 {
		first = i == 0
		heap.Remove(&w.mu.heap, i)
	}
	w.mu.Unlock()
	if first {
		notify(w.kick)
	}
}

// run is the watchdog goroutine; it returns when done is closed. Its timer
// exists only while some connection has a deadline.
func (w *watchdog) run() {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var fire <-chan time.Time
		w.mu.Lock()
		if len(w.mu.heap) > 0 {
			d := w.mu.heap[0].deadline.when.Sub(w.clock.Now())
			if timer == nil {
				timer = w.clock.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			fire = timer.C()
		} else if timer != nil {
			timer.Stop()
		}
		w.mu.Unlock()
		select {
		case <-fire:
			w.expireDue()
		case <-w.kick:
		case <-w.done:
			return
		}
	}
}

// expireDue takes the queues whose deadline has passed off the heap and
// expires them.
func (w *watchdog) expireDue() {
	now := w.clock.Now()
	var due []*queue
	w.mu.Lock()
	for len(w.mu.heap) > 0 && !w.mu.heap[0].deadline.when.After(now) {
		q := heap.Pop(&w.mu.heap).(*queue)
		due = append(due, q)
	}
	phases := make([]uint32, len(due))
	for i, q := range due {
		phases[i] = q.deadline.phase
	}
	w.mu.Unlock()
	for i, q := range due {
		q.expire(phases[i])
	}
}

// deadlineHeap is a min-heap of queues by deadline.
type deadlineHeap []*queue

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline.when.Before(h[j].deadline.when) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].deadline.index = i
	h[j].deadline.index = j
}

func (h *deadlineHeap) Push(x any) {
	q := x.(*queue)
	q.deadline.index = len(*h)
	*h = append(*h, q)
}

func (h *deadlineHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	q.deadline.index = -1
	*h = old[:len(old)-1]
	return q
}
