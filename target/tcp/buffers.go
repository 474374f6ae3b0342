package tcp

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"basalt/pkg/invariant"
)

// Data buffers come in power-of-two size classes from 4 KiB to 4 MiB (the
// largest MDTS, 2^10 × 4 KiB). A command gets one of the smallest class
// that holds its transfer, from the node's Budget, and gives it back when
// its slot is free again: buffers are reused node-wide, never kept by an
// idle slot, and the bytes held are bounded by the budgets.
const (
	minBufferShift = 12
	minBufferSize  = 1 << minBufferShift
	numClasses     = 11
)

// bufferKind is the budget a slot's buffer is charged to.
type bufferKind uint8

const (
	noBuffer    bufferKind = iota
	readBuffer             // Limits.MaxReadBytes
	writeBuffer            // Limits.MaxWriteBytes and the controller's
)

// classOf returns the size class holding n bytes, or -1 if none does.
func classOf(n int) int {
	if n <= minBufferSize {
		return 0
	}
	c := bits.Len(uint(n-1)) - minBufferShift
	if c >= numClasses {
		return -1
	}
	return c
}

// usage is one budget: bytes charged and the limit. A request larger than
// the whole limit fits when nothing else is charged, so that no
// configuration can make a command wait for ever.
type usage struct{ used, limit int64 }

func (u *usage) fits(n int64) bool { return u.used == 0 || u.used+n <= u.limit }

// ctrlBudget is one controller's write budget, shared by its queues, with
// its slots waiting for it (FIFO). All its fields are protected by the
// pool's lock.
type ctrlBudget struct {
	key     any
	refs    int
	write   usage
	waiters slotFIFO
	// next links the controllers with waiters (ctrlFIFO); queued says
	// the controller is on that list.
	next   *ctrlBudget
	queued bool
}

// bufferPool hands out and takes back the data buffers of a Budget.
//
// Waiters: receive goroutines waiting for a read buffer (at most one per
// queue; FIFO), and slots waiting for write budget before their R2T (FIFO
// per controller; the controllers with waiters take turns, one grant each,
// and one over its own budget is passed over). Whoever gives buffers back
// grants the waiters that now fit. Writes of queues whose core names no
// controller share one unlimited controller budget (noCtrl).
type bufferPool struct {
	b       *Budget
	scratch atomic.Pointer[[]byte]
	mu      struct {
		sync.Mutex
		free        [numClasses][][]byte // LIFO: the most recently used first
		cached      int64                // bytes on the free lists
		read, write usage
		ctrls       map[any]*ctrlBudget
		noCtrl      ctrlBudget
		readWaiters queueFIFO
		// writeCtrls are the controllers with waiting writes, in turn;
		// writesWaiting counts the writes; nodeBlocked is set while a
		// waiting write does not fit the node's write budget (a new write
		// then waits behind it).
		writeCtrls    ctrlFIFO
		writesWaiting int
		nodeBlocked   bool
	}
}

func (p *bufferPool) init(b *Budget) {
	p.b = b
	p.mu.read.limit, p.mu.write.limit = b.limits.MaxReadBytes, b.limits.MaxWriteBytes
	p.mu.ctrls = make(map[any]*ctrlBudget)
	p.mu.noCtrl.write.limit = 1<<63 - 1
	p.mu.noCtrl.refs = 1 // never dropped
}

// scratchFor returns a zero-length slice of capacity n that nothing ever
// writes. The core's Init checks only that a request's Data can hold its
// transfer; the transport attaches it to commands whose data does not come
// in the capsule, and the real buffer once Init has said which way the
// data goes (and the write budget has room).
func (p *bufferPool) scratchFor(n int) []byte {
	if s := p.scratch.Load(); s != nil && cap(*s) >= n {
		return (*s)[:0:n]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.scratch.Load()
	if s == nil || cap(*s) < n {
		b := make([]byte, 0, n)
		s = &b
		p.scratch.Store(s)
	}
	return (*s)[:0:n]
}

// controller returns the write budget of the controller key (a queue's
// core.Association()), counting one more queue of it; for a nil key the
// shared unlimited one.
func (p *bufferPool) controller(key any) *ctrlBudget {
	p.mu.Lock()
	defer p.mu.Unlock()
	if key == nil {
		return &p.mu.noCtrl
	}
	c := p.mu.ctrls[key]
	if c == nil {
		c = &ctrlBudget{key: key, write: usage{limit: p.b.limits.MaxControllerWriteBytes}}
		p.mu.ctrls[key] = c
	}
	c.refs++
	return c
}

// dropController uncounts a queue of c; its buffers are all back.
func (p *bufferPool) dropController(c *ctrlBudget) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c == nil || c == &p.mu.noCtrl {
		return nil
	}
	c.refs--
	if c.refs > 0 {
		return nil
	}
	delete(p.mu.ctrls, c.key)
	if c.write.used != 0 || c.waiters.n != 0 {
		return invariant.Failf("tcp: controller write budget left with %d bytes charged, %d writes waiting",
			c.write.used, c.waiters.n)
	}
	return nil
}

// takeLocked pops a free buffer of class c, or returns nil (the caller
// allocates one after unlocking, already charged).
func (p *bufferPool) takeLocked(c int) []byte {
	fl := p.mu.free[c]
	n := len(fl)
	if n == 0 {
		return nil
	}
	b := fl[n-1]
	fl[n-1] = nil
	p.mu.free[c] = fl[:n-1]
	p.mu.cached -= int64(cap(b))
	return b
}

// allocate makes a buffer of class c (outside the lock) and drops cached
// buffers if charged and cached bytes together exceed both limits.
func (p *bufferPool) allocate(c int) []byte {
	p.b.stats.buffersAllocated.Add(1)
	b := make([]byte, minBufferSize<<c)
	p.mu.Lock()
	p.evictLocked()
	p.mu.Unlock()
	return b
}

// evictLocked drops cached buffers, largest first, until charged plus
// cached bytes are within the two limits together.
func (p *bufferPool) evictLocked() {
	limit := p.mu.read.limit + p.mu.write.limit
	for c := numClasses - 1; c >= 0 && p.mu.read.used+p.mu.write.used+p.mu.cached > limit; c-- {
		for len(p.mu.free[c]) > 0 && p.mu.read.used+p.mu.write.used+p.mu.cached > limit {
			p.takeLocked(c)
		}
	}
}

// tryRead charges a read buffer of n bytes to q's slot s and attaches it.
// When the read budget has no room (or others wait before it), q is queued
// and false returned: the buffer comes through q.readGrant (see
// queue.readBuffer), perhaps at once.
func (p *bufferPool) tryRead(q *queue, s *slot, n int) (bool, error) {
	c := classOf(n)
	if c < 0 {
		return false, invariant.Failf("tcp: read buffer of %d bytes", n)
	}
	size := int64(minBufferSize << c)
	p.mu.Lock()
	if p.mu.readWaiters.head != nil || !p.mu.read.fits(size) {
		q.rwait = readWait{size: int(size), waiting: true}
		p.mu.readWaiters.push(q)
		g := p.grantLocked()
		p.mu.Unlock()
		g.deliver(p)
		return false, nil
	}
	p.mu.read.used += size
	b := p.takeLocked(c)
	p.mu.Unlock()
	if b == nil {
		b = p.allocate(c)
	}
	q.attach(s, b, readBuffer, nil)
	return true, nil
}

// cancelRead takes q, whose receiver stops waiting, off the read waiters.
// A buffer already granted to it (its delivery signals q.readGrant, at
// once) is given back.
func (p *bufferPool) cancelRead(q *queue) error {
	p.mu.Lock()
	if q.rwait.waiting {
		p.mu.readWaiters.remove(q)
		q.rwait.waiting = false
		g := p.grantLocked()
		p.mu.Unlock()
		g.deliver(p)
		return nil
	}
	p.mu.Unlock()
	<-q.readGrant
	b := q.rwait.buf
	q.rwait.buf = nil
	return p.giveBack([]heldBuffer{{buf: b, kind: readBuffer}})
}

// heldBuffer is a buffer given back, with what it was charged to.
type heldBuffer struct {
	buf  []byte
	kind bufferKind
	ctrl *ctrlBudget
}

// giveBack uncharges and caches the buffers, then grants the waiters that
// fit. It never blocks on anything but the pool's lock.
func (p *bufferPool) giveBack(bufs []heldBuffer) error {
	var err error
	p.mu.Lock()
	for _, h := range bufs {
		size := int64(cap(h.buf))
		switch h.kind {
		case readBuffer:
			p.mu.read.used -= size
		case writeBuffer:
			p.mu.write.used -= size
			h.ctrl.write.used -= size
			if h.ctrl.write.used < 0 {
				err = invariant.Failf("tcp: controller write budget below zero (%d)", h.ctrl.write.used)
			}
		}
		if p.mu.read.used < 0 || p.mu.write.used < 0 {
			err = invariant.Failf("tcp: buffer budget below zero (read %d, write %d)", p.mu.read.used, p.mu.write.used)
		}
		c := classOf(int(size))
		if c >= 0 && size == minBufferSize<<c &&
			p.mu.read.used+p.mu.write.used+p.mu.cached+size <= p.mu.read.limit+p.mu.write.limit {
			p.mu.free[c] = append(p.mu.free[c], h.buf)
			p.mu.cached += size
		}
	}
	g := p.grantLocked()
	p.mu.Unlock()
	g.deliver(p)
	return err
}
