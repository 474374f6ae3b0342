package tcp

import (
	"errors"

	"basalt/pkg/clock"
	"basalt/pkg/invariant"
	"basalt/pkg/nvme"
)

// teardown ends the connection (≈ nvmet_tcp_release_queue_work). Every
// request completes exactly once, whatever its state, and gives back what
// it holds (its namespace reference in the core, its slot, its buffer):
//
//   - a C2HTermReq queued by the receiver is written first, because
//     releasing an admin queue destroys its controller, which closes the
//     connection;
//   - the core is told (SQ.Release);
//   - requests Init accepted that will never execute are aborted in the
//     core (Command Aborted due to SQ Deletion): those waiting for write
//     budget, for H2C data after their R2T, and (by the sender, which owns
//     them) those whose R2T is still queued;
//   - executing requests are waited for: their completions, and the
//     aborts', reach the sender. After DrainTimeout the socket is closed,
//     so that a host that does not read cannot hold teardown; a request
//     still in the backend is waited for even then, as the backend may
//     still use its buffer;
//   - the sender drains what is queued and exits; the socket is closed and
//     later completions are dropped.
func (q *queue) teardown(err error) {
	q.logEnd(err)
	q.wd.disarm(q)
	q.down.Store(true)
	if !q.started {
		q.core.Release()
		q.conn.Close()
		return
	}
	q.recvIdle() // every completion wakes the sender from now on
	drain := q.opts.Clock.NewTimer(q.opts.DrainTimeout)
	defer drain.Stop()
	q.flushTerm(drain)
	q.core.Release()
	q.abortPending()
	q.waitIdle(drain)
	close(q.stopSender)
	q.waitSender(drain)
	q.conn.Close()
	q.mu.Lock()
	q.mu.closed = true
	q.mu.Unlock()
	q.finish()
}

// flushTerm has the sender write a pending C2HTermReq (and the responses
// queued before it) before anything may close the connection.
func (q *queue) flushTerm(drain clock.Timer) {
	q.mu.Lock()
	pending := q.mu.term != nil
	q.mu.Unlock()
	if !pending {
		return
	}
	notify(q.respReady)
	select {
	case <-q.termSent:
	case <-drain.C():
		q.log.Warn("nvme/tcp: C2HTermReq not written in time; closing", "timeout", q.opts.DrainTimeout)
		q.conn.Close()
	}
}

// abortPending completes in the core the requests that will never execute
// and frees the slots the core never saw.
func (q *queue) abortPending() {
	for _, s := range q.pool.cancelWrites(q) {
		q.core.Abort(&s.req, nvme.StatusAbortSQDeletion)
	}
	for _, s := range q.table.Load().slots {
		switch {
		case s.swapState(slotReceiving, slotFree):
			// Reading its in-capsule data: not passed to Init yet.
			if h, ok := q.detach(s); ok {
				q.pool.giveBack([]heldBuffer{h})
			}
			q.handedOver()
		case s.swapState(slotAwaitingData, slotInCore):
			q.core.Abort(&s.req, nvme.StatusAbortSQDeletion)
		}
	}
	// Slots whose R2T is still queued are the sender's: it aborts them
	// (emitR2T) when it next writes.
	notify(q.respReady)
}

// waitIdle waits until every acquired slot has been handed to the sender,
// closing the socket if that takes longer than DrainTimeout (the sender
// may be stuck writing to a host that does not read).
func (q *queue) waitIdle(drain clock.Timer) {
	if q.inflight.Load() == 0 {
		q.idleOnce.Do(func() { close(q.idle) })
	}
	select {
	case <-q.idle:
		return
	case <-drain.C():
		q.log.Warn("nvme/tcp: commands not finished in time; closing", "timeout", q.opts.DrainTimeout,
			"in_flight", q.inflight.Load())
		q.conn.Close()
	}
	<-q.idle
}

// waitSender waits for the sender to drain, closing the socket if that
// takes longer than what is left of DrainTimeout (a host that does not
// read).
func (q *queue) waitSender(drain clock.Timer) {
	select {
	case <-q.senderDone:
		return
	case <-drain.C():
		q.log.Warn("nvme/tcp: responses not drained in time; closing", "timeout", q.opts.DrainTimeout)
		q.conn.Close()
	}
	<-q.senderDone
}

// finish gives back the controller's budget and checks that every slot
// is free and holds no buffer.
func (q *queue) finish() {
	q.budget.stats.readBufferBytes.Add(-int64(q.br.Size()))
	for _, s := range q.table.Load().slots {
		if st := s.loadState(); st != slotFree || s.buf != nil {
			invariant.Failf("tcp: slot %d %v after teardown (buffer %d bytes)", s.index, st, cap(s.buf))
		}
	}
	if n := q.heldBytes.Load(); n != 0 {
		invariant.Failf("tcp: %d buffer bytes held after teardown", n)
	}
	if err := q.pool.dropController(q.ctrl); err != nil {
		q.log.Error("nvme/tcp: controller budget", "err", err)
	}
}

func (q *queue) logEnd(err error) {
	var v violation
	switch {
	case errors.As(err, &v):
		q.log.Warn("nvme/tcp: connection terminated", "err", err)
	case errors.Is(err, ErrHostTerminated):
		q.log.Info("nvme/tcp: host terminated the connection", "err", err)
	default:
		q.log.Debug("nvme/tcp: connection closed", "err", err)
	}
}
