package host

import (
	"net"
	"sync"
)

// batch is a list of PDU bytes waiting to be written with one writev: PDU
// headers and digests copied into arena, data referenced in place.
type batch struct {
	arena []byte
	segs  []segment
	bufs  net.Buffers // rebuilt from segs for each write
	wbufs net.Buffers // consumed by WriteTo; a field so that it does not escape per call
}

// segment is arena[lo:hi] when data is nil, else data.
type segment struct {
	lo, hi int
	data   []byte
}

func (b *batch) empty() bool { return len(b.segs) == 0 }

// appendCopy copies p into the arena, merging with a preceding arena segment.
func (b *batch) appendCopy(p []byte) {
	lo := len(b.arena)
	b.arena = append(b.arena, p...)
	if n := len(b.segs); n > 0 && b.segs[n-1].data == nil && b.segs[n-1].hi == lo {
		b.segs[n-1].hi = len(b.arena)
		return
	}
	b.segs = append(b.segs, segment{lo: lo, hi: len(b.arena)})
}

// appendRef references p, which must stay unchanged until the write is done.
func (b *batch) appendRef(p []byte) {
	if len(p) > 0 {
		b.segs = append(b.segs, segment{data: p})
	}
}

func (b *batch) write(c net.Conn) error {
	b.bufs = b.bufs[:0]
	for _, s := range b.segs {
		if s.data != nil {
			b.bufs = append(b.bufs, s.data)
		} else {
			b.bufs = append(b.bufs, b.arena[s.lo:s.hi])
		}
	}
	b.wbufs = b.bufs
	_, err := b.wbufs.WriteTo(c)
	return err
}

// reset empties the batch and drops its references to caller buffers.
func (b *batch) reset() {
	clear(b.segs)
	clear(b.bufs)
	b.segs, b.bufs, b.arena = b.segs[:0], b.bufs[:0], b.arena[:0]
}

// sender owns the write side of a connection. Any goroutine may enqueue PDUs;
// the first one that finds no flush in progress becomes the flusher and
// writes batches until nothing is pending, so that commands submitted while a
// write is in progress go out together in the next writev (flat combining).
// A goroutine that must never block on the network (the receive goroutine, an
// IO.Done callback) enqueues with inline=false: the writer goroutine flushes
// for it. The mutex is never held across a write.
type sender struct {
	conn net.Conn
	mu   struct {
		sync.Mutex
		// err, once set, fails every later enqueue; pending is dropped.
		err error
		// pending collects PDUs; spare is the other batch (nil while a
		// flusher writes it). Invariant: exactly one of the two batches is
		// being written while flushing is true and spare is nil.
		pending, spare *batch
		// flushing is true while a goroutine owns the flusher role.
		flushing bool
		// kickClosed: the writer goroutine has been told to exit.
		kickClosed bool
	}
	idle sync.Cond // signalled when flushing becomes false
	// kick wakes the writer goroutine; capacity 1, sent to under mu only.
	kick chan struct{}
	// writerDone is closed when the writer goroutine returns.
	writerDone chan struct{}
	// onError is called (without mu) with the first write error.
	onError func(error)
}

func newSender(c net.Conn, onError func(error)) *sender {
	w := &sender{conn: c, kick: make(chan struct{}, 1), writerDone: make(chan struct{}), onError: onError}
	w.mu.pending, w.mu.spare = &batch{}, &batch{}
	w.idle.L = &w.mu.Mutex
	go w.run()
	return w
}

// run is the writer goroutine: it flushes on behalf of goroutines that may
// not block, until shutdown closes kick.
func (w *sender) run() {
	defer close(w.writerDone)
	for range w.kick {
		w.mu.Lock()
		err := w.flushLocked()
		w.mu.Unlock()
		if err != nil {
			w.onError(err)
		}
	}
}

// finishLocked is called by an enqueuer after adding PDUs. With inline it
// takes the flusher role if free and writes; otherwise it wakes the writer.
// It returns a write error the caller must report through onError.
func (w *sender) finishLocked(inline bool) error {
	if w.mu.flushing {
		return nil
	}
	w.mu.flushing = true
	if inline {
		return w.flushLocked()
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return nil
}

// flushLocked writes pending batches until none is left or the connection
// failed. The caller holds mu and the flusher role; flushLocked releases mu
// while writing and gives the role up before returning.
func (w *sender) flushLocked() error {
	var failure error
	for w.mu.err == nil && !w.mu.pending.empty() {
		b := w.mu.pending
		w.mu.pending, w.mu.spare = w.mu.spare, nil
		w.mu.Unlock()
		err := b.write(w.conn)
		b.reset()
		w.mu.Lock()
		w.mu.spare = b
		if err != nil && w.mu.err == nil {
			w.mu.err, failure = err, err
		}
	}
	if w.mu.err != nil {
		w.mu.pending.reset()
	}
	w.mu.flushing = false
	w.idle.Broadcast()
	return failure
}

// fail makes every later enqueue return err.
func (w *sender) fail(err error) {
	w.mu.Lock()
	if w.mu.err == nil {
		w.mu.err = err
	}
	w.mu.Unlock()
}

// shutdown stops the writer goroutine and waits until no goroutine is
// writing, so that no caller buffer is referenced afterwards. Call it only
// after fail (and after the connection was closed, so writes end promptly).
func (w *sender) shutdown() {
	w.mu.Lock()
	if !w.mu.kickClosed {
		w.mu.kickClosed = true
		close(w.kick)
	}
	w.mu.Unlock()
	<-w.writerDone
	w.mu.Lock()
	for w.mu.flushing {
		w.idle.Wait()
	}
	w.mu.pending.reset()
	w.mu.Unlock()
}
