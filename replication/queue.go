package replication

import "sync"

// queueInitial is the room an empty queue makes when an item arrives: it
// doubles from there, up to the queue's bound.
const queueInitial = 8

// queue is a bounded FIFO from any goroutine to a group's loop: the inbox
// of Raft messages, the proposals, the read barriers. It holds at most size
// items; put refuses beyond, putWait waits for room.
//
// Its memory is proportional to use: it holds two buffers, the one put
// appends to and the one the loop steps from, which take and done swap, so
// that neither side allocates once they have grown to the traffic's peak;
// they start empty, grow on demand, and a quiesced group gives them back
// (release). A channel of the same bound would cost its whole buffer with
// every group whether or not the group is ever busy (1,024 inbound
// messages are 176 KiB), and a node holds hundreds or thousands of idle
// groups.
type queue[T any] struct {
	size int
	// ready holds a token while items may hold what the loop has not taken
	// (put signals when it queues into an empty buffer).
	ready chan struct{}
	// room holds a token when take made room and putWait may have a waiter
	// (a waiter that queues and leaves room passes the token on).
	room  chan struct{}
	mu    sync.Mutex
	items []T // queued, oldest first
	spare []T // the buffer the last take returned, once done with it
}

func (q *queue[T]) init(size int) {
	q.size = size
	q.ready = make(chan struct{}, 1)
	q.room = make(chan struct{}, 1)
}

// put queues v unless the queue is full, and reports whether it did.
func (q *queue[T]) put(v T) bool {
	ok, _ := q.putLeft(v)
	return ok
}

// putLeft is put that also reports whether room is left after v.
func (q *queue[T]) putLeft(v T) (ok, left bool) {
	q.mu.Lock()
	n := len(q.items)
	if n >= q.size {
		q.mu.Unlock()
		return false, false
	}
	if q.items == nil {
		q.items = make([]T, 0, min(queueInitial, q.size))
	}
	q.items = append(q.items, v)
	q.mu.Unlock()
	if n == 0 {
		signal(q.ready)
	}
	return true, n+1 < q.size
}

// putWait queues v, waiting for room while the queue is full, until a or b
// is closed (either may be nil); it reports whether it queued v.
func (q *queue[T]) putWait(v T, a, b <-chan struct{}) bool {
	for waited := false; ; waited = true {
		ok, left := q.putLeft(v)
		if ok {
			if waited && left {
				signal(q.room) // another waiter may fit too
			}
			return true
		}
		select {
		case <-q.room:
		case <-a:
			return false
		case <-b:
			return false
		}
	}
}

// take returns what is queued, oldest first, or nil; the caller hands the
// slice back with done once it has handled the items. It runs on the loop,
// or once the loop has finished, on whoever fails what is left.
func (q *queue[T]) take() []T {
	q.mu.Lock()
	items := q.items
	if len(items) == 0 {
		q.mu.Unlock()
		return nil
	}
	q.items, q.spare = q.spare[:0], nil
	q.mu.Unlock()
	signal(q.room)
	return items
}

// done takes back a slice take returned, its items handled: it drops their
// references and keeps the buffer for the next swap.
func (q *queue[T]) done(items []T) {
	clear(items)
	q.mu.Lock()
	if q.spare == nil {
		q.spare = items[:0]
	}
	q.mu.Unlock()
}

// release gives back the memory of an idle queue: the spare buffer, and
// put's buffer if it is empty.
func (q *queue[T]) release() {
	q.mu.Lock()
	q.spare = nil
	if len(q.items) == 0 {
		q.items = nil
	}
	q.mu.Unlock()
}

// held reports whether the queue holds a buffer (tests).
func (q *queue[T]) held() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.items != nil || q.spare != nil
}

// len returns how many items are queued, not yet taken.
func (q *queue[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// signal leaves a token in ch (capacity 1) unless one is there.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
