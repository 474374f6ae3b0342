package disk

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// ErrEngineFailed is an io_uring queue that stopped working: io_uring_enter
// failed with an error that retrying cannot cure (anything but EINTR,
// EAGAIN and EBUSY), or reading the ring's eventfd failed. The requests
// that met the failure fail with an error wrapping it and the errno, and so
// does every later request, at once; requests the kernel had already taken
// complete with their own results where the ring can still report them.
// FileDrive reports it as ErrIO wrapping ErrDriveFailed: the drive's reads
// and writes will keep failing.
var ErrEngineFailed = errors.New("disk: io_uring engine failed")

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
// eventfd in Go's netpoller, or in a blocking io_uring_enter while the
// kernel owes it one), reaps every posted CQE and sends each result to its
// slot's channel.
//
// The slot holds a reference to the request's buffer until its completion is
// reaped: the kernel writes into it until then. Close refuses new requests,
// lets the ones in flight complete (their buffers stay the kernel's until
// it posts their CQEs), stops the reaper and unmaps the ring.
//
// Failure (ErrEngineFailed) is final, and never a panic:
//   - Submitting fails: the SQEs the kernel did not consume are taken back
//     (the SQ tail rewound to the kernel's head) and their requests fail
//     with the errno; those it consumed complete through their CQEs as
//     usual. The reaper goes on until they have.
//   - Waiting for completions fails: the ring cannot be trusted to report
//     them, and nothing tells when the kernel is done with the buffers it
//     holds. The reaper fails every request still waiting, keeps their
//     buffers referenced for the life of the process (uringAbandoned, so the
//     collector never reuses that memory) and exits. Those callers get their
//     buffers back with an error while the kernel may still write into
//     them; they must drop them. The alternative, never returning, would
//     leave them blocked for good.
type uringQueue struct {
	ring  *uring
	slots []uringSlot
	free  chan uint32   // indexes of idle slots
	quit  chan struct{} // closed by Close: wakes goroutines waiting for a slot
	// failed is closed when the queue breaks, after err is set: wakes
	// goroutines waiting for a slot.
	failed chan struct{}
	// reaped is closed by the reaper when it exits.
	reaped chan struct{}
	// kick wakes a reaper that, without an eventfd, has nothing to wait for
	// in the kernel (1-buffered; senders never block).
	kick chan struct{}

	mu       sync.Mutex // the submission side: the SQ ring and the fields below
	flushing bool       // a goroutine is in the submit loop
	flushed  sync.Cond  // on mu: signalled when flushing ends once closing is set
	err      error      // why the queue broke (wraps ErrEngineFailed); nil while it works

	closing  atomic.Bool  // Close has begun; written under mu
	inflight atomic.Int32 // requests queued and not yet completed or failed
}

// uringSlot is one request's place in the queue.
type uringSlot struct {
	// armed is set by do when it queues the request, and cleared by
	// whoever completes it (the reaper, or a failure path): winning the
	// swap is the right to send on done, so a request completes once.
	armed atomic.Bool
	done  chan int32 // the CQE's res; buffered, one send per request
	err   error      // non-nil: the request failed; written before the send
	// buf is the request's buffer, referenced while the kernel owns it so
	// the collector keeps it. Storing it here also makes every buffer
	// passed to do escape to the heap, where Go never moves memory (a
	// goroutine stack can move when it grows).
	buf []byte
}

// uringAbandoned keeps, for the life of the process, the buffers of
// requests failed while the kernel may still have held them.
var uringAbandoned struct {
	sync.Mutex
	bufs [][]byte
}

// uringMaxLen caps one SQE's length (the field is 32 bits); longer requests
// are split by the caller's loop.
const uringMaxLen = 1 << 30

// newURingQueue sets up a ring for depth concurrent requests. With eventfd
// the reaper waits in the netpoller, otherwise in io_uring_enter.
func newURingQueue(depth int, eventfd bool) (*uringQueue, error) {
	return openURingQueue(depth, eventfd, uringEnterSyscall)
}

// openURingQueue is newURingQueue with the ring's io_uring_enter given:
// tests inject failures through it.
func openURingQueue(depth int, eventfd bool, enter uringEnterFunc) (*uringQueue, error) {
	if depth < 1 || depth > 4096 {
		return nil, fmt.Errorf("disk: io_uring queue depth %d is not in [1, 4096]", depth)
	}
	// Twice the depth, rounded up to a power of two: room for every request,
	// and a completion ring (twice as large again by default) that can
	// never overflow.
	entries := uint32(1)
	for entries < uint32(2*depth) {
		entries <<= 1
	}
	r, err := newURing(entries, eventfd, enter)
	if err != nil {
		return nil, err
	}
	q := &uringQueue{ring: r, slots: make([]uringSlot, depth), free: make(chan uint32, depth),
		quit: make(chan struct{}), failed: make(chan struct{}), reaped: make(chan struct{}),
		kick: make(chan struct{}, 1)}
	q.flushed.L = &q.mu
	for i := range q.slots {
		q.slots[i].done = make(chan int32, 1)
		q.free <- uint32(i)
	}
	go q.reaper(r.sqHead.Load())
	return q, nil
}

// do runs one request (uringOpRead or uringOpWrite of len(p) bytes at off
// on fd; 0 < len(p) <= uringMaxLen) and returns the CQE's result: the
// bytes transferred, or a negated errno. It fails with ErrClosed, having
// done nothing, once Close has begun, and with an error wrapping
// ErrEngineFailed once the queue has failed (see uringQueue): at once,
// having done nothing; or, for a request that met the failure, once its SQE
// was taken back from the kernel, or, where the ring can no longer tell,
// once p was abandoned to the kernel.
func (q *uringQueue) do(op uint8, fd int32, p []byte, off int64) (int32, error) {
	var idx uint32
	select {
	case idx = <-q.free:
	case <-q.quit:
		return 0, ErrClosed
	case <-q.failed:
		return 0, q.err // set before failed was closed, never changed
	}
	s := &q.slots[idx]
	q.mu.Lock()
	if err := q.refuseLocked(); err != nil {
		q.mu.Unlock()
		q.free <- idx
		return 0, err
	}
	s.buf = p
	s.armed.Store(true)
	q.inflight.Add(1)
	q.ring.queue(op, fd, unsafe.Pointer(unsafe.SliceData(p)), uint32(len(p)), off, uint64(idx))
	q.submitLocked()
	res := <-s.done
	err := s.err
	s.buf, s.err = nil, nil
	q.free <- idx
	return res, err
}

// failure returns the error that broke the queue (wrapping ErrEngineFailed),
// or nil while it works.
func (q *uringQueue) failure() error {
	select {
	case <-q.failed:
		return q.err // set before failed was closed, never changed
	default:
		return nil
	}
}

// refuseLocked returns why no request may be queued now, or nil.
func (q *uringQueue) refuseLocked() error {
	switch {
	case q.closing.Load():
		return ErrClosed
	case q.err != nil:
		return q.err
	}
	return nil
}

// complete ends slot idx's request with res and err (nil for a CQE), unless
// it has already ended. keep is for a failure while the kernel may still
// hold the buffer: it is kept forever.
func (q *uringQueue) complete(idx uint64, res int32, err error, keep bool) {
	if idx >= uint64(len(q.slots)) {
		return // not a user_data of ours; the ring is corrupt
	}
	s := &q.slots[idx]
	if !s.armed.CompareAndSwap(true, false) {
		return
	}
	if keep {
		uringAbandoned.Lock()
		uringAbandoned.bufs = append(uringAbandoned.bufs, s.buf)
		uringAbandoned.Unlock()
	}
	s.err = err
	q.inflight.Add(-1)
	s.done <- res
}

// submitLocked submits the queued SQEs unless another goroutine is at it,
// and unlocks q.mu. The submit loop runs with q.mu released, so SQEs queued
// meanwhile go in the same or the next io_uring_enter. On a submit error
// the queue breaks and the SQEs not consumed are taken back and failed.
func (q *uringQueue) submitLocked() {
	if q.flushing {
		q.mu.Unlock()
		return
	}
	q.flushing = true
	for q.err == nil {
		n := q.ring.unsubmitted()
		if n == 0 {
			break
		}
		q.mu.Unlock()
		errno := q.ring.submit(n)
		q.mu.Lock()
		switch errno {
		case 0:
			if q.ring.eventfd == nil {
				q.wakeReaper() // the kernel owes it completions now
			}
		case syscall.EAGAIN, syscall.EBUSY:
			// Out of kernel memory for now: let completions drain, retry.
			q.mu.Unlock()
			runtime.Gosched()
			q.mu.Lock()
		default:
			q.breakLocked(fmt.Errorf("%w: io_uring_enter submitting %d requests: %w", ErrEngineFailed, n, errno))
		}
	}
	if q.err != nil {
		q.takeBackLocked()
	}
	q.flushing = false
	if q.closing.Load() {
		q.flushed.Broadcast()
	}
	q.mu.Unlock()
}

// breakLocked records why the queue failed, the first time.
func (q *uringQueue) breakLocked(err error) {
	if q.err == nil {
		q.err = err
		close(q.failed)
	}
}

// takeBackLocked withdraws the SQEs the kernel has not consumed and fails
// their requests with q.err: the kernel never saw their buffers. Then it
// wakes the reaper, which may be waiting for nothing else (Close).
func (q *uringQueue) takeBackLocked() {
	q.ring.rewind(func(userData uint64) { q.complete(userData, 0, q.err, false) })
	q.wakeReaper()
}

// wakeReaper makes the reaper look at the queue again: through the eventfd,
// or the kick channel when it waits without one.
func (q *uringQueue) wakeReaper() {
	if q.ring.eventfd != nil {
		q.ring.signalEventfd()
		return
	}
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// reaper delivers completions until Close has begun and no request is in
// flight, or until waiting fails (then it fails the requests in flight).
// reaped counts CQEs as the SQ head counts consumed SQEs (the kernel owes a
// CQE for every SQE it consumed: no flag skips one); it starts at the head
// before anything was submitted.
func (q *uringQueue) reaper(reaped uint32) {
	defer close(q.reaped)
	deliver := func(userData uint64, res int32) { q.complete(userData, res, nil, false) }
	var counter [8]byte
	for {
		reaped += uint32(q.ring.reap(deliver))
		if q.closing.Load() && q.inflight.Load() == 0 {
			return
		}
		if err := q.wait(reaped, counter[:]); err != nil {
			q.ring.reap(deliver) // what was posted still counts
			q.abandon(err)
			return
		}
	}
}

// wait parks the reaper until there may be something to reap or the queue's
// state changed, and returns an error wrapping ErrEngineFailed if waiting
// failed for good. Reading the eventfd resets its counter; the read comes
// after a reap, so a completion posted in between is not missed. Without an
// eventfd it waits in io_uring_enter only while the kernel owes a CQE (one
// is sure to come), and on the kick channel otherwise.
func (q *uringQueue) wait(reaped uint32, counter []byte) error {
	if q.ring.eventfd != nil {
		if _, err := q.ring.eventfd.Read(counter); err != nil {
			return eventfdError(err)
		}
		return nil
	}
	// Signed: a request that completes inline posts its CQE before the
	// kernel publishes the SQ head, so reaped may run ahead for a moment;
	// the flusher kicks once its io_uring_enter has returned.
	if int32(q.ring.sqHead.Load()-reaped) <= 0 {
		<-q.kick
		return nil
	}
	switch errno := q.ring.wait(); errno {
	case 0:
		return nil
	case syscall.EAGAIN, syscall.EBUSY:
		runtime.Gosched() // reap what is there and wait again
		return nil
	default:
		return fmt.Errorf("%w: io_uring_enter waiting for completions: %w", ErrEngineFailed, errno)
	}
}

// eventfdError wraps a failed read of the eventfd. It keeps the errno but
// not an os.ErrClosed, which would read as the drive's ErrClosed: the
// eventfd is the queue's own.
func eventfdError(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fmt.Errorf("%w: reading the io_uring eventfd: %w", ErrEngineFailed, errno)
	}
	return fmt.Errorf("%w: reading the io_uring eventfd: %v", ErrEngineFailed, err)
}

// abandon breaks the queue after a failed wait and fails every request in
// flight with err, keeping their buffers forever (see uringQueue): the
// ring will not say when the kernel is done with them. SQEs not yet
// submitted are failed here too; their flusher takes them back.
func (q *uringQueue) abandon(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.breakLocked(err)
	for i := range q.slots {
		q.complete(uint64(i), 0, err, true)
	}
}

// close refuses new requests, waits for those in flight, stops the reaper
// and releases the ring. Only the first call does anything. It returns on
// a failed queue too: the requests the reaper could not see through were
// failed when it gave up.
func (q *uringQueue) close() {
	q.mu.Lock()
	if q.closing.Load() {
		q.mu.Unlock()
		<-q.reaped
		return
	}
	q.closing.Store(true)
	close(q.quit)
	q.wakeReaper()
	q.mu.Unlock()
	<-q.reaped
	// A flusher may still be between io_uring_enter and its last look at
	// the SQ head (after a failure, at its rewind): the ring stays mapped
	// until it is done.
	q.mu.Lock()
	for q.flushing {
		q.flushed.Wait()
	}
	q.mu.Unlock()
	q.ring.close()
}
