package disk

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// uringQueue runs I/O requests through one ring for many goroutines.
//
// A request takes a slot (a bounded pool: a caller waits for one when all
// are in flight), queues an SQE whose user_data is the slot index, and parks
// on the slot's channel. Submission is batched: the first goroutine to find
// no submitter active becomes the flusher and calls io_uring_enter until no
// published SQE is left unsubmitted, submitting the SQEs that others queued
// meanwhile in the same calls; the others only queue and park.
//
// One reaper goroutine per queue waits for completions (on the ring's
// eventfd in Go's netpoller, or in a blocking io_uring_enter), reaps every
// posted CQE and sends each result to its slot's channel.
//
// The slot holds a reference to the request's buffer until its completion is
// reaped: the kernel writes into it until then. Close refuses new requests,
// lets the ones in flight complete (their buffers stay the kernel's until
// it posts their CQEs), stops the reaper and unmaps the ring.
type uringQueue struct {
	ring  *uring
	slots []uringSlot
	free  chan uint32   // indexes of idle slots
	quit  chan struct{} // closed by Close: wakes goroutines waiting for a slot
	// reaped is closed by the reaper when it exits.
	reaped chan struct{}

	mu       sync.Mutex // the submission side: the SQ ring and the fields below
	flushing bool       // a goroutine is in the submit loop
	closing  bool       // Close has queued its NOP; nothing more may be queued

	inflight atomic.Int32 // requests submitted and not reaped
}

// uringSlot is one request's place in the queue.
type uringSlot struct {
	done chan int32 // the CQE's res; buffered, one send per request
	// buf is the request's buffer, referenced while the kernel owns it so
	// the collector keeps it. Storing it here also makes every buffer
	// passed to do escape to the heap, where Go never moves memory (a
	// goroutine stack can move when it grows).
	buf []byte
}

// uringCloseTag is the user_data of the NOP with which Close wakes the reaper.
const uringCloseTag = ^uint64(0)

// uringMaxLen caps one SQE's length (the field is 32 bits); longer requests
// are split by the caller's loop.
const uringMaxLen = 1 << 30

// newURingQueue sets up a ring for depth concurrent requests. With eventfd
// the reaper waits in the netpoller, otherwise in io_uring_enter.
func newURingQueue(depth int, eventfd bool) (*uringQueue, error) {
	if depth < 1 || depth > 4096 {
		return nil, fmt.Errorf("disk: io_uring queue depth %d is not in [1, 4096]", depth)
	}
	// Twice the depth, rounded up to a power of two: room for every request
	// and Close's NOP, and a completion ring (twice as large again by
	// default) that can never overflow.
	entries := uint32(1)
	for entries < uint32(2*depth) {
		entries <<= 1
	}
	r, err := newURing(entries, eventfd)
	if err != nil {
		return nil, err
	}
	q := &uringQueue{ring: r, slots: make([]uringSlot, depth), free: make(chan uint32, depth),
		quit: make(chan struct{}), reaped: make(chan struct{})}
	for i := range q.slots {
		q.slots[i].done = make(chan int32, 1)
		q.free <- uint32(i)
	}
	go q.reaper()
	return q, nil
}

// do runs one request (uringOpRead or uringOpWrite of len(p) bytes at off
// on fd; 0 < len(p) <= uringMaxLen) and returns the CQE's result: the
// bytes transferred, or a negated errno. It fails with ErrClosed, having
// done nothing, once Close has begun.
func (q *uringQueue) do(op uint8, fd int32, p []byte, off int64) (int32, error) {
	var idx uint32
	select {
	case idx = <-q.free:
	case <-q.quit:
		return 0, ErrClosed
	}
	s := &q.slots[idx]
	s.buf = p
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		s.buf = nil
		q.free <- idx
		return 0, ErrClosed
	}
	q.inflight.Add(1)
	q.ring.queue(op, fd, unsafe.Pointer(unsafe.SliceData(p)), uint32(len(p)), off, uint64(idx))
	q.submitLocked()
	res := <-s.done
	s.buf = nil
	q.free <- idx
	return res, nil
}

// submitLocked submits the queued SQEs unless another goroutine is at it,
// and unlocks q.mu. The submit loop runs with q.mu released, so SQEs queued
// meanwhile go in the same or the next io_uring_enter.
func (q *uringQueue) submitLocked() {
	if q.flushing {
		q.mu.Unlock()
		return
	}
	q.flushing = true
	for {
		n := q.ring.unsubmitted()
		if n == 0 {
			break
		}
		q.mu.Unlock()
		err := q.ring.submit(n)
		q.mu.Lock()
		if err == 0 {
			continue
		}
		if err == syscall.EAGAIN || err == syscall.EBUSY {
			// Out of kernel memory for now: let completions drain, retry.
			q.mu.Unlock()
			runtime.Gosched()
			q.mu.Lock()
			continue
		}
		// The ring is ours and well formed, so any other error is a bug;
		// carrying on would leave the kernel writing into buffers that
		// their callers have been told are free.
		panic(fmt.Sprintf("disk: io_uring_enter submitting %d requests: %v", n, err))
	}
	q.flushing = false
	q.mu.Unlock()
}

// reaper delivers completions until Close's NOP has completed and no request
// is in flight.
func (q *uringQueue) reaper() {
	defer close(q.reaped)
	var sawClose bool
	deliver := func(userData uint64, res int32) {
		if userData == uringCloseTag {
			sawClose = true
			return
		}
		q.inflight.Add(-1)
		q.slots[userData].done <- res
	}
	var counter [8]byte
	for {
		q.ring.reap(deliver)
		if sawClose && q.inflight.Load() == 0 {
			return
		}
		if q.ring.eventfd != nil {
			// Parks in the netpoller until the kernel posts a completion;
			// reading resets the counter. The read comes after the reap
			// above, so a completion posted in between is not missed.
			if _, err := q.ring.eventfd.Read(counter[:]); err != nil {
				panic(fmt.Sprintf("disk: reading the io_uring eventfd: %v", err))
			}
			continue
		}
		if _, err := q.ring.enter(0, 1, uringEnterGetEvents); err != nil {
			panic(fmt.Sprintf("disk: io_uring_enter waiting for completions: %v", err))
		}
	}
}

// close refuses new requests, waits for those in flight, stops the reaper
// and releases the ring. Only the first call does anything.
func (q *uringQueue) close() {
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		<-q.reaped
		return
	}
	q.closing = true
	close(q.quit)
	// There is always a free SQE: at most depth requests are queued and
	// the ring holds twice as many.
	q.ring.queue(uringOpNop, -1, nil, 0, 0, uringCloseTag)
	q.submitLocked()
	<-q.reaped
	q.ring.close()
}
