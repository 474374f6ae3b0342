package tcp

import "basalt/pkg/invariant"

// The waiters of a bufferPool: writes waiting for write budget before
// their R2T, and receivers waiting for a read buffer.

// tryWrite charges a write buffer of n bytes for slot s to the node's and
// ctrl's write budgets and attaches it. When they have no room (or writes
// wait before it), s waits in slotWaitingBudget, holding no buffer, and
// false is returned: a later grant attaches its buffer and queues its R2T.
func (p *bufferPool) tryWrite(s *slot, ctrl *ctrlBudget, n int) (bool, error) {
	c := classOf(n)
	if c < 0 {
		return false, invariant.Failf("tcp: write buffer of %d bytes", n)
	}
	if ctrl == nil {
		ctrl = &p.mu.noCtrl
	}
	size := int64(minBufferSize << c)
	p.mu.Lock()
	if !p.mu.nodeBlocked && ctrl.waiters.head == nil && p.mu.write.fits(size) && ctrl.write.fits(size) {
		p.chargeWriteLocked(size, ctrl)
		b := p.takeLocked(c)
		p.mu.Unlock()
		if b == nil {
			b = p.allocate(c)
		}
		s.q.attach(s, b, writeBuffer, ctrl)
		return true, nil
	}
	s.wsize, s.wctrl = int(size), ctrl
	s.setState(slotWaitingBudget)
	ctrl.waiters.push(s)
	p.mu.writesWaiting++
	if !ctrl.queued {
		ctrl.queued = true
		p.mu.writeCtrls.push(ctrl)
	}
	p.b.stats.writeWaits.Add(1)
	g := p.grantLocked()
	p.mu.Unlock()
	g.deliver(p)
	return false, nil
}

func (p *bufferPool) chargeWriteLocked(size int64, ctrl *ctrlBudget) {
	p.mu.write.used += size
	ctrl.write.used += size
}

// cancelWrites takes q's waiting writes off their controller's waiters and
// returns them, in slotInCore (owned by the caller, to abort).
func (p *bufferPool) cancelWrites(q *queue) []*slot {
	ctrl := q.ctrl
	if ctrl == nil {
		ctrl = &p.mu.noCtrl
	}
	p.mu.Lock()
	out := ctrl.waiters.removeQueue(q)
	p.forgetWaitersLocked(ctrl, out)
	g := p.grantLocked()
	p.mu.Unlock()
	g.deliver(p)
	return out
}

// cancelWrite takes s off its controller's waiters, if it waits there, and
// moves it to slotInCore.
func (p *bufferPool) cancelWrite(s *slot) {
	p.mu.Lock()
	if ctrl := s.wctrl; ctrl != nil && s.loadState() == slotWaitingBudget {
		var prev *slot
		for x := ctrl.waiters.head; x != nil; prev, x = x, x.wnext {
			if x == s {
				ctrl.waiters.unlink(prev, s)
				p.forgetWaitersLocked(ctrl, []*slot{s})
				break
			}
		}
	}
	g := p.grantLocked()
	p.mu.Unlock()
	g.deliver(p)
}

// forgetWaitersLocked accounts for slots taken off ctrl's waiters.
func (p *bufferPool) forgetWaitersLocked(ctrl *ctrlBudget, slots []*slot) {
	for _, s := range slots {
		s.setState(slotInCore)
		s.wctrl = nil
	}
	p.mu.writesWaiting -= len(slots)
	if ctrl.waiters.head == nil && ctrl.queued {
		p.mu.writeCtrls.remove(ctrl)
		ctrl.queued = false
	}
}

// grants are the waiters a grant pass served; deliver hands them their
// buffers after the pool's lock is released.
type grants struct {
	reads  []*queue
	writes []*slot
}

// grantLocked serves the read waiters that fit, in order, then the write
// waiters: the controllers with waiters take turns, one write each, a
// controller over its own budget is passed over, and the pass stops at the
// first write that does not fit the node's budget (it stays first).
func (p *bufferPool) grantLocked() grants {
	var g grants
	for q := p.mu.readWaiters.head; q != nil; q = p.mu.readWaiters.head {
		size := int64(q.rwait.size)
		if !p.mu.read.fits(size) {
			break
		}
		p.mu.readWaiters.pop()
		p.mu.read.used += size
		q.rwait.waiting = false
		q.rwait.buf = p.takeLocked(classOf(q.rwait.size))
		g.reads = append(g.reads, q)
	}
	p.mu.nodeBlocked = false
	// passed counts the controllers passed over since the last grant: a
	// whole turn of them ends the pass.
	for passed := 0; p.mu.writeCtrls.n > passed; {
		c := p.mu.writeCtrls.pop()
		s := c.waiters.head
		size := int64(s.wsize)
		if !p.mu.write.fits(size) {
			p.mu.writeCtrls.pushFront(c)
			p.mu.nodeBlocked = true
			break
		}
		if !c.write.fits(size) {
			p.mu.writeCtrls.push(c)
			passed++
			continue
		}
		passed = 0
		c.waiters.unlink(nil, s)
		p.mu.writesWaiting--
		p.chargeWriteLocked(size, c)
		s.wbuf = p.takeLocked(classOf(s.wsize))
		s.setState(slotR2TQueued)
		g.writes = append(g.writes, s)
		if c.waiters.head != nil {
			p.mu.writeCtrls.push(c)
		} else {
			c.queued = false
		}
	}
	return g
}

// deliver completes the grants: a granted reader is woken with its buffer,
// a granted write gets its buffer and its R2T is queued.
func (g grants) deliver(p *bufferPool) {
	for _, q := range g.reads {
		if q.rwait.buf == nil { // no lock needed: q waits for the signal
			q.rwait.buf = p.allocate(classOf(q.rwait.size))
		}
		notify(q.readGrant)
	}
	for _, s := range g.writes {
		b, ctrl := s.wbuf, s.wctrl
		s.wbuf, s.wctrl = nil, nil
		if b == nil {
			b = p.allocate(classOf(s.wsize))
		}
		s.q.attach(s, b, writeBuffer, ctrl)
		s.kind = sendR2T
		s.q.push(s)
	}
}

// queueFIFO is an intrusive FIFO of queues (readWait.next).
type queueFIFO struct{ head, tail *queue }

func (f *queueFIFO) push(q *queue) {
	q.rwait.next = nil
	if f.tail == nil {
		f.head = q
	} else {
		f.tail.rwait.next = q
	}
	f.tail = q
}

func (f *queueFIFO) pop() {
	q := f.head
	f.head = q.rwait.next
	if f.head == nil {
		f.tail = nil
	}
	q.rwait.next = nil
}

func (f *queueFIFO) remove(q *queue) {
	var prev *queue
	for x := f.head; x != nil; prev, x = x, x.rwait.next {
		if x != q {
			continue
		}
		if prev == nil {
			f.head = x.rwait.next
		} else {
			prev.rwait.next = x.rwait.next
		}
		if f.tail == x {
			f.tail = prev
		}
		x.rwait.next = nil
		return
	}
}

// slotFIFO is an intrusive FIFO of slots (slot.wnext) with a count.
type slotFIFO struct {
	head, tail *slot
	n          int
}

func (f *slotFIFO) push(s *slot) {
	s.wnext = nil
	if f.tail == nil {
		f.head = s
	} else {
		f.tail.wnext = s
	}
	f.tail = s
	f.n++
}

// unlink removes s, whose predecessor is prev (nil: s is the head).
func (f *slotFIFO) unlink(prev, s *slot) {
	if prev == nil {
		f.head = s.wnext
	} else {
		prev.wnext = s.wnext
	}
	if f.tail == s {
		f.tail = prev
	}
	s.wnext = nil
	f.n--
}

// removeQueue unlinks and returns the slots of q.
func (f *slotFIFO) removeQueue(q *queue) []*slot {
	var out []*slot
	var prev *slot
	for s := f.head; s != nil; {
		next := s.wnext
		if s.q == q {
			f.unlink(prev, s)
			out = append(out, s)
		} else {
			prev = s
		}
		s = next
	}
	return out
}

// ctrlFIFO is an intrusive FIFO of controller budgets (ctrlBudget.next)
// with a count.
type ctrlFIFO struct {
	head, tail *ctrlBudget
	n          int
}

func (f *ctrlFIFO) push(c *ctrlBudget) {
	c.next = nil
	if f.tail == nil {
		f.head = c
	} else {
		f.tail.next = c
	}
	f.tail = c
	f.n++
}

func (f *ctrlFIFO) pushFront(c *ctrlBudget) {
	c.next = f.head
	f.head = c
	if f.tail == nil {
		f.tail = c
	}
	f.n++
}

func (f *ctrlFIFO) pop() *ctrlBudget {
	c := f.head
	f.head = c.next
	if f.head == nil {
		f.tail = nil
	}
	c.next = nil
	f.n--
	return c
}

func (f *ctrlFIFO) remove(c *ctrlBudget) {
	var prev *ctrlBudget
	for x := f.head; x != nil; prev, x = x, x.next {
		if x != c {
			continue
		}
		if prev == nil {
			f.head = x.next
		} else {
			prev.next = x.next
		}
		if f.tail == x {
			f.tail = prev
		}
		x.next = nil
		f.n--
		return
	}
}
