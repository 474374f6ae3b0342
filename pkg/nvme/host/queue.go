package host

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"

	"basalt/pkg/nvme"
)

// slotInFlight marks slot.state while a command is in flight; the low 16
// bits then hold its CID.
const slotInFlight = 1 << 16

// slot is one command context of a queue (≈ struct nvme_tcp_request). The
// submitter fills it, publishes it with state.Store (release), and from then
// on only the receive goroutine touches it until it completes the command.
type slot struct {
	index uint16
	gen   uint8
	// state is 0, or slotInFlight|CID while the command is in flight.
	state atomic.Uint32
	cmd   nvme.Command
	// in receives C2H data (read-like commands); out is the H2C data
	// (write-like commands), sent in the capsule when inCapsule.
	in, out   []byte
	inCapsule bool
	// pdu is scratch space for the CapsuleCmd header, copied by start.
	pdu [nvme.CapsuleCmdHLEN + nvme.DigestSize]byte
	// io is the asynchronous request, or nil for a synchronous one whose
	// submitter waits on done (capacity 1).
	io   *IO
	done chan struct{}

	// Receive-side progress, owned by the receive goroutine.
	received  uint32 // C2H bytes received: the next expected DATAO
	r2tNext   uint32 // H2C bytes solicited so far: the next expected R2TO
	digestBad bool   // a C2H data digest mismatched: complete with 0x04

	// Result, written by the receive goroutine before completion.
	cpl nvme.Completion
	err error
}

// queue is one NVMe/TCP connection carrying one SQ/CQ pair. Commands are
// submitted from any goroutine; one receive goroutine reads every PDU and
// completes commands; a sender (with its writer goroutine) owns the write side.
type queue struct {
	qid        uint16
	conn       net.Conn
	digest     digests
	maxH2CData uint32
	// inlineMax is the in-capsule data limit for non-Fabrics commands.
	inlineMax int
	log       *slog.Logger

	slots []slot
	// free holds the indexes of free slots below reservedFrom; slots from
	// reservedFrom on (the AER slot) are used by index and never freed.
	free         chan uint16
	reservedFrom uint16
	w            *sender

	// callbacks counts IO.Done callbacks running on the controller's
	// receive goroutines; while any runs, submissions do not flush inline.
	callbacks *atomic.Int32
	// onFail is called once, from whichever goroutine fails the queue.
	onFail func(error)

	failed  atomic.Bool
	failErr error         // a *ConnectionError, set before dead is closed
	dead    chan struct{} // closed when the connection has failed
	// receiveDone is closed when the receive goroutine has completed every
	// command in flight and returned.
	receiveDone chan struct{}

	// Receive goroutine state.
	r    *bufio.Reader
	rhdr [nvme.DataHLEN + nvme.DigestSize]byte
	h2c  [nvme.DataHLEN + nvme.DigestSize]byte
}

// queueConfig holds what connectQueue learned from ICResp and the caller.
type queueConfig struct {
	qid        uint16
	depth      int // slots, SQSIZE+1
	reserved   int // slots at the end kept out of the free list (the AER slot)
	inlineMax  int
	maxH2CData uint32
	digest     digests
	log        *slog.Logger
	callbacks  *atomic.Int32
	onFail     func(error)
}

const receiveBufferSize = 128 << 10

// newQueue wraps an established (ICReq/ICResp done) connection and starts
// its receive and writer goroutines.
func newQueue(c net.Conn, r *bufio.Reader, cfg queueConfig) *queue {
	q := &queue{
		qid: cfg.qid, conn: c, digest: cfg.digest, maxH2CData: cfg.maxH2CData,
		inlineMax: cfg.inlineMax, log: cfg.log, callbacks: cfg.callbacks, onFail: cfg.onFail,
		slots: make([]slot, cfg.depth), free: make(chan uint16, cfg.depth),
		dead: make(chan struct{}), receiveDone: make(chan struct{}), r: r,
		reservedFrom: uint16(cfg.depth - cfg.reserved),
	}
	for i := range q.slots {
		q.slots[i].index = uint16(i)
		q.slots[i].done = make(chan struct{}, 1)
		if i < int(q.reservedFrom) {
			q.free <- uint16(i)
		}
	}
	q.w = newSender(c, q.fail)
	go q.receive()
	return q
}

// acquire takes a free slot, waiting while all are in flight.
func (q *queue) acquire(ctx context.Context) (*slot, error) {
	select {
	case i := <-q.free:
		return &q.slots[i], nil
	default:
	}
	select {
	case i := <-q.free:
		return &q.slots[i], nil
	case <-q.dead:
		return nil, q.failErr
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (q *queue) release(s *slot) {
	s.in, s.out, s.io = nil, nil, nil
	if s.index < q.reservedFrom {
		q.free <- s.index
	}
}

// sendMode says who writes a command handed to the sender.
type sendMode uint8

const (
	// sendInline: the submitting goroutine writes if no write is in
	// progress (unless IO.Done callbacks are running).
	sendInline sendMode = iota
	// sendDeferred: the writer goroutine writes; for goroutines that must
	// not block on the network.
	sendDeferred
	// sendPlugged: nothing is written until the caller calls unplug.
	sendPlugged
)

// start puts the command prepared in s in flight: it assigns the CID,
// encodes the CapsuleCmd PDU and hands it to the sender, which writes it as
// mode says. On error s is not in flight and still belongs to the caller.
func (q *queue) start(s *slot, mode sendMode) error {
	s.gen = (s.gen + 1) & cidGenMask
	cid := makeCID(s.gen, s.index)
	s.cmd.SetCID(cid)
	s.received, s.r2tNext, s.digestBad, s.err = 0, 0, false, nil
	s.cpl = nvme.Completion{}
	var icd []byte
	if s.inCapsule {
		icd = s.out
	}
	hdr := s.pdu[:]
	n := encodeCapsule(hdr, &s.cmd, len(icd), q.digest)
	var ddgst [nvme.DigestSize]byte
	if len(icd) > 0 && q.digest.data {
		putLE32(ddgst[:], nvme.Digest(icd))
	}

	w := q.w
	w.mu.Lock()
	if w.mu.err != nil {
		err := w.mu.err
		w.mu.Unlock()
		return err
	}
	s.state.Store(slotInFlight | uint32(cid))
	b := w.mu.pending
	b.appendCopy(hdr[:n])
	if len(icd) > 0 {
		b.appendRef(icd)
		if q.digest.data {
			b.appendCopy(ddgst[:])
		}
	}
	var err error
	if mode != sendPlugged {
		err = w.finishLocked(mode == sendInline && q.callbacks.Load() == 0)
	}
	w.mu.Unlock()
	if err != nil {
		q.fail(err)
	}
	return nil
}

// unplug writes what sendPlugged submissions left pending.
func (q *queue) unplug() {
	w := q.w
	w.mu.Lock()
	var err error
	if w.mu.err == nil && !w.mu.pending.empty() {
		err = w.finishLocked(q.callbacks.Load() == 0)
	}
	w.mu.Unlock()
	if err != nil {
		q.fail(err)
	}
}

// exec runs one command synchronously: in receives C2H data, out is sent
// (in the capsule when it fits inlineMax, else after R2T). A non-success
// status is returned as a *CommandError together with the completion.
// If ctx ends first the connection is torn down, as the Linux host's error
// recovery does on a command timeout: NVMe/TCP cannot revoke one command.
func (q *queue) exec(ctx context.Context, cmd *nvme.Command, in, out []byte, inlineMax int) (nvme.Completion, error) {
	s, err := q.acquire(ctx)
	if err != nil {
		return nvme.Completion{}, err
	}
	return q.execSlot(ctx, s, cmd, in, out, inlineMax)
}

// execSlot is exec with a slot already acquired from q.
func (q *queue) execSlot(ctx context.Context, s *slot, cmd *nvme.Command, in, out []byte, inlineMax int) (nvme.Completion, error) {
	s.cmd = *cmd
	prepareData(s, in, out, inlineMax)
	if err := q.start(s, sendInline); err != nil {
		q.release(s)
		return nvme.Completion{}, err
	}
	q.wait(ctx, s)
	cpl, err := s.cpl, s.err
	if err == nil && !cpl.Status.Success() {
		err = &CommandError{QID: q.qid, CID: cpl.CID, Cmd: s.cmd, Status: cpl.Status, DW0: cpl.DW0}
	}
	q.release(s)
	return cpl, err
}

// prepareData sets the slot's buffers and the SGL the Linux host would use.
func prepareData(s *slot, in, out []byte, inlineMax int) {
	s.in, s.out, s.inCapsule = nil, nil, false
	switch {
	case len(out) > 0:
		s.out = out
		s.inCapsule = len(out) <= inlineMax
		setSGL(&s.cmd, len(out), s.inCapsule)
	case len(in) > 0:
		s.in = in
		setSGL(&s.cmd, len(in), false)
	default:
		setSGL(&s.cmd, 0, false)
	}
}

// wait blocks until s completes; if ctx ends first it fails the queue and
// then waits for the (prompt) completion with a *ConnectionError.
func (q *queue) wait(ctx context.Context, s *slot) {
	select {
	case <-s.done:
		return
	default:
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		q.fail(fmt.Errorf("command %s (CID %#04x) abandoned: %w", commandName(&s.cmd, q.qid), s.cmd.CID(), context.Cause(ctx)))
		<-s.done
	}
}

// fail ends the connection; the receive goroutine then completes every
// command in flight with a *ConnectionError wrapping cause. Safe to call
// from any goroutine, any number of times; only the first cause counts.
func (q *queue) fail(cause error) {
	if !q.failed.CompareAndSwap(false, true) {
		return
	}
	q.failErr = &ConnectionError{QID: q.qid, Cause: cause}
	q.w.fail(q.failErr)
	close(q.dead)
	q.conn.Close()
	if q.onFail != nil {
		q.onFail(q.failErr)
	}
}

// close fails the queue with cause and waits for its goroutines to finish.
// It must not be called from the queue's own receive goroutine.
func (q *queue) close(cause error) {
	q.fail(cause)
	<-q.receiveDone
}

// complete hands a finished command back: it wakes the synchronous
// submitter, or frees the slot and calls IO.Done. Receive goroutine only.
func (q *queue) complete(s *slot) {
	io := s.io
	if io == nil {
		s.state.Store(0)
		s.done <- struct{}{}
		return
	}
	io.finish(q, s)
	s.state.Store(0)
	q.release(s)
	q.callbacks.Add(1)
	io.Done(io)
	q.callbacks.Add(-1)
}

// failInFlight completes every command still in flight with the queue's
// failure. Receive goroutine only, after the sender has shut down.
func (q *queue) failInFlight() {
	for i := range q.slots {
		s := &q.slots[i]
		if s.state.Load()&slotInFlight == 0 {
			continue
		}
		s.err = q.failErr
		q.complete(s)
	}
}

func putLE32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
