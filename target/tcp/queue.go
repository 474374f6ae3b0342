package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"basalt/pkg/nvme"
	"basalt/target"
)

// queueCore is what the transport needs from the core's submission queue;
// *target.SQ satisfies it. Tests substitute a fake.
type queueCore interface {
	// Init validates r.Cmd and sets r.Dir and r.TransferLen; on failure it
	// completes r through QueueResponse and returns false.
	Init(r *target.Request) bool
	// Execute runs r; it ends in exactly one QueueResponse, possibly on
	// another goroutine.
	Execute(r *target.Request)
	// ExecutesInline reports whether Execute(r) completes r before it
	// returns, without keeping r.Data: in-capsule data may then be lent
	// to it in place, from the read buffer.
	ExecutesInline(r *target.Request) bool
	// CompletesOnWorker reports whether r, in QueueResponse, completes on
	// a goroutine of the core's that may block on the network.
	CompletesOnWorker(r *target.Request) bool
	// Release tells the core the connection is gone. Idempotent.
	Release()
	QID() uint16
	Connected() bool
	Depth() int
	InCapsuleDataLimit() int
	MaxTransferSize() int
}

// The core's queue is what the transport drives; the transport queue is
// what the core completes into.
var (
	_ queueCore       = (*target.SQ)(nil)
	_ target.QueueOps = (*queue)(nil)
)

// coreFactory builds the core queue for a new connection.
type coreFactory func(ops target.QueueOps) queueCore

// preConnectSlots is the slot count before Connect: the host sends Connect
// and waits for its completion, but an admin queue may pipeline up to its
// SQSIZE (31 on Linux) right after, so start with an admin-sized set.
const preConnectSlots = 32

// Sentinel errors that end a connection.
var (
	// ErrServerClosed is returned by Serve after Shutdown or Close.
	ErrServerClosed = errors.New("tcp: server closed")
	// ErrHostTerminated: the host sent an H2CTermReq.
	ErrHostTerminated = errors.New("tcp: host terminated the connection")
	// ErrQueueClosed: the queue was closed locally (QueueOps.Close,
	// Listener.Close) while the receiver waited.
	ErrQueueClosed = errors.New("tcp: queue closed")
)

// queue is one NVMe/TCP connection, which carries exactly one NVMe queue
// pair (≈ struct nvmet_tcp_queue). It implements target.QueueOps.
//
// Goroutines: serve (the receive state machine, which also owns the
// connection's lifecycle) and sendLoop. Completions reach the sender through
// an intrusive FIFO of slots under mu; a slot is on it at most once, so the
// list is bounded by the slot count and pushing never blocks.
type queue struct {
	conn   net.Conn
	core   queueCore
	opts   *Options
	log    *slog.Logger
	remote string

	// Receive-goroutine state (see recv.go).
	br       *bufio.Reader
	rstate   recvState
	err      error
	ch       nvme.CommonHeader
	layout   pduLayout
	hdr      [nvme.MaxHeaderSize + nvme.DigestSize]byte
	ddgstBuf [nvme.DigestSize]byte
	params   headerParams
	cur      *slot  // slot receiving the current PDU's data
	dst      []byte // where the current PDU's data goes
	lent     []byte // in-capsule data left in br for the command being started
	free     []*slot
	grown    bool // slots resized after Connect

	// Negotiated in ICReq; written before handshaken is closed, then
	// read-only.
	hpda  uint8
	hdgst bool
	ddgst bool

	table atomic.Pointer[slotTable]
	cids  cidSet
	// outstanding counts the commands the host sees as outstanding: from
	// the capsule's arrival until the sender takes its response for
	// writing. A host may have at most Depth() (SQSIZE+1).
	outstanding atomic.Int32

	mu struct {
		sync.Mutex
		head, tail *slot // slots for the sender, FIFO
		released   *slot // slots written and free again (LIFO)
		term       []byte
		closed     bool // teardown done: drop late responses
	}
	// recvBusy is set while the receive goroutine works through input it
	// has already read. Completions queued meanwhile (often by the
	// receiver itself, executing inline) do not wake the sender: the
	// receiver does, once, before it can next block (recvIdle), so that
	// one wake-up and one gathered write serve a whole burst of commands.
	recvBusy     atomic.Bool
	respReady    chan struct{} // capacity 1: the send list is non-empty
	slotReleased chan struct{} // capacity 1: mu.released is non-empty
	handshaken   chan struct{} // closed when the ICReq is accepted, before the ICResp
	stopSender   chan struct{} // closed by teardown: drain and exit
	senderDone   chan struct{}
	closing      chan struct{} // closed by Close
	closeOnce    sync.Once
	// down is set when teardown starts: from then on a completion for a
	// slot teardown abandoned is dropped instead of treated as a bug.
	down atomic.Bool
	// inflight counts acquired slots not yet handed to the sender; teardown
	// waits for it, so every Execute has completed before the queue is gone.
	inflight sync.WaitGroup

	// sendMu is held by whoever writes to the connection: the send
	// goroutine, or a worker writing the send list itself (sendInline).
	// It guards send.
	sendMu sync.Mutex
	// sendReady is set once the send goroutine has set send up after the
	// handshake: only then may a worker write.
	sendReady atomic.Bool
	send      sender // the sending state (see send.go)
}

func newQueue(conn net.Conn, newCore coreFactory, opts *Options) *queue {
	q := &queue{
		conn:         conn,
		opts:         opts,
		remote:       conn.RemoteAddr().String(),
		br:           bufio.NewReaderSize(conn, opts.ReadBufferSize),
		respReady:    make(chan struct{}, 1),
		slotReleased: make(chan struct{}, 1),
		handshaken:   make(chan struct{}),
		stopSender:   make(chan struct{}),
		senderDone:   make(chan struct{}),
		closing:      make(chan struct{}),
	}
	q.log = opts.Logger.With("remote", q.remote)
	t, slots := (&slotTable{}).grow(preConnectSlots)
	q.table.Store(t)
	q.free = make([]*slot, 0, preConnectSlots)
	q.pushFree(slots)
	q.params = headerParams{maxICD: nvme.AdminICDSize, maxH2CData: opts.MAXH2CDATA}
	q.send.init(q)
	q.core = newCore(q)
	return q
}

// pushFree adds slots to the free list in order, lowest index on top.
func (q *queue) pushFree(slots []*slot) {
	for i := len(slots) - 1; i >= 0; i-- {
		q.free = append(q.free, slots[i])
	}
}

// serve runs the connection until it ends. It returns after every command
// the core received has completed and the send goroutine has exited.
func (q *queue) serve() {
	go q.sendLoop()
	err := q.receive()
	q.teardown(err)
}

// teardown ends the connection (≈ nvmet_tcp_release_queue_work): the core is
// told first, requests still waiting for host data are dropped (they were
// never executed; the API has no Uninit), executing requests are waited for,
// then the sender drains what they queued and the socket is closed.
func (q *queue) teardown(err error) {
	q.logEnd(err)
	q.down.Store(true)
	q.core.Release()
	for _, s := range q.table.Load().slots {
		if s.swapState(slotReceiving, slotFree) || s.swapState(slotR2TQueued, slotFree) ||
			s.swapState(slotAwaitingData, slotFree) {
			q.inflight.Done()
		}
	}
	q.inflight.Wait()
	close(q.stopSender)
	q.waitSender()
	q.conn.Close()
	q.mu.Lock()
	q.mu.closed = true
	q.mu.Unlock()
}

// waitSender waits for the sender to drain, closing the socket if it takes
// longer than DrainTimeout (a host that does not read).
func (q *queue) waitSender() {
	t := q.opts.Clock.NewTimer(q.opts.DrainTimeout)
	defer t.Stop()
	select {
	case <-q.senderDone:
		return
	case <-t.C():
		q.log.Warn("nvme/tcp: responses not drained in time; closing", "timeout", q.opts.DrainTimeout)
		q.conn.Close()
	}
	<-q.senderDone
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

// QueueResponse implements target.QueueOps. It never blocks on the
// network: the slot is linked into the send list. A completion for a
// request the transport abandoned at teardown is dropped; a second
// completion of one request panics (a core bug).
func (q *queue) QueueResponse(r *target.Request) {
	s := q.slotOf(r)
	inline := q.core.CompletesOnWorker(r) && q.sendReady.Load()
	for {
		switch st := s.loadState(); st {
		case slotInCore, slotAwaitingData:
			if !s.swapState(st, slotSending) {
				continue
			}
			s.kind = sendResponse
			if inline {
				q.sendInline(s)
				return
			}
			q.push(s)
			q.inflight.Done()
			return
		case slotR2TQueued:
			// Completed before its data arrived (not done by target.SQ):
			// wait for the sender to finish with the slot's R2T, waking
			// it in case the R2T's push was deferred (recvBusy).
			notify(q.respReady)
			runtime.Gosched()
		case slotFree:
			if q.down.Load() {
				return // abandoned at teardown; inflight already counted
			}
			fallthrough
		default:
			panic(fmt.Sprintf("tcp: QueueResponse for CID %d in slot %d in state %v", r.Cmd.CID(), r.Slot, st))
		}
	}
}

// Close implements target.QueueOps: it closes the socket; the receive
// goroutine then tears the queue down. It never blocks on the network.
func (q *queue) Close(reason error) {
	q.closeOnce.Do(func() {
		q.log.Info("nvme/tcp: closing connection", "reason", reason)
		close(q.closing)
	})
	q.conn.Close()
}

// shutdownRead stops the receiver without cutting the send side, so the
// responses of commands already received still reach the host (Shutdown).
func (q *queue) shutdownRead() {
	if c, ok := q.conn.(interface{ CloseRead() error }); ok && c.CloseRead() == nil {
		return
	}
	q.Close(ErrServerClosed)
}

func (q *queue) slotOf(r *target.Request) *slot {
	t := q.table.Load()
	if r.Slot < 0 || r.Slot >= len(t.slots) || &t.slots[r.Slot].req != r {
		panic(fmt.Sprintf("tcp: request %p (slot %d) does not belong to this queue", r, r.Slot))
	}
	return t.slots[r.Slot]
}

// push links s into the send list and wakes the sender, unless the
// receiver is busy and will wake it before it blocks (recvIdle).
func (q *queue) push(s *slot) {
	// Pairs with recvIdle: either it finds s on the list, or this load
	// sees its store of false.
	if q.link(s) && !q.recvBusy.Load() {
		notify(q.respReady)
	}
}

// link appends s to the send list; false if the queue is closed (s is
// then dropped).
func (q *queue) link(s *slot) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		s.setState(slotFree)
		return false
	}
	if q.mu.tail == nil {
		q.mu.head = s
	} else {
		q.mu.tail.next = s
	}
	q.mu.tail = s
	return true
}

// sendInline is push for a completion on a goroutine that may block on
// the network (a worker): if nobody is writing, it writes the send list
// itself, sparing the send goroutine's wake-up (the hand-off that
// otherwise follows every read); else it wakes the send goroutine, as
// whoever is writing may have taken the list before s joined it. The
// request counts as handed over before the write, so that teardown's wait
// for executing requests never waits for the network (DrainTimeout bounds
// the send goroutine's final drain, which waits for this write).
func (q *queue) sendInline(s *slot) {
	if !q.link(s) {
		q.inflight.Done()
		return
	}
	q.inflight.Done()
	if !q.sendMu.TryLock() {
		notify(q.respReady)
		return
	}
	q.send.inlineBatches++
	q.send.sendBatch()
	q.sendMu.Unlock()
}

// recvIdle is called by the receive goroutine before anything that may
// block it (a socket read, a wait for a slot): from then on completions
// wake the sender themselves, and what was queued while the receiver was
// busy is handed to the sender now.
func (q *queue) recvIdle() {
	q.recvBusy.Store(false)
	q.mu.Lock()
	pending := q.mu.head != nil
	q.mu.Unlock()
	if pending {
		notify(q.respReady)
	}
}

// release returns written slots to the receiver.
func (q *queue) release(slots []*slot) {
	if len(slots) == 0 {
		return
	}
	q.mu.Lock()
	for _, s := range slots {
		s.setState(slotFree)
		s.next = q.mu.released
		q.mu.released = s
	}
	q.mu.Unlock()
	notify(q.slotReleased)
}

// acquireSlot takes a free slot, waiting for the sender to release one if
// all are busy. The caller has checked that the host is within its queue
// depth, so the wait only covers slots whose responses are being written:
// it ends when that write does, or fails (SPDK
// nvmf_tcp_capsule_cmd_hdr_handle retries the same way).
//
// Released slots go on top of the free stack, so the most recently used
// slot (whose buffer is allocated and cache-warm) is reused first: at low
// queue depth only a few slots ever get a buffer.
func (q *queue) acquireSlot() (*slot, error) {
	for {
		q.collectReleased()
		if n := len(q.free); n > 0 {
			s := q.free[n-1]
			q.free = q.free[:n-1]
			s.setState(slotReceiving)
			q.inflight.Add(1)
			return s, nil
		}
		// The busy slots are being written or wait for the sender: make
		// sure it is awake.
		q.recvIdle()
		select {
		case <-q.slotReleased:
		case <-q.closing:
			return nil, ErrQueueClosed
		}
		q.recvBusy.Store(true)
	}
}

// collectReleased moves the slots the sender released onto the free stack,
// keeping their order (the last released ends on top).
func (q *queue) collectReleased() {
	q.mu.Lock()
	rel := q.mu.released
	q.mu.released = nil
	q.mu.Unlock()
	if rel == nil {
		return
	}
	n := len(q.free)
	for ; rel != nil; rel = rel.next {
		q.free = append(q.free, rel)
	}
	// mu.released is LIFO; reverse the appended run so that the most
	// recently released slot is last (on top).
	slices.Reverse(q.free[n:])
	for _, s := range q.free[n:] {
		s.next = nil
	}
}

// maybeGrow resizes the slot set once the queue is connected: Depth()+1
// slots, because the Linux host reuses a CID as soon as it sees the
// completion (checklist §7 #9). It also picks up the queue's ICD limit.
func (q *queue) maybeGrow() {
	if q.grown || !q.core.Connected() {
		return
	}
	q.grown = true
	q.params.maxICD = uint32(max(q.core.InCapsuleDataLimit(), nvme.AdminICDSize))
	t, slots := q.table.Load().grow(q.core.Depth() + 1)
	if len(slots) == 0 {
		return
	}
	free := make([]*slot, len(q.free), len(t.slots))
	copy(free, q.free)
	q.free = free
	q.table.Store(t)
	q.pushFree(slots)
}

// bufferSize is the data buffer size of a slot: the largest transfer the
// core allows, and never less than the 8 KiB of in-capsule data every queue
// accepts for Fabrics commands.
func (q *queue) bufferSize() int {
	return max(q.core.MaxTransferSize(), q.core.InCapsuleDataLimit(), nvme.AdminICDSize)
}

// ensureBuffer gives s a data buffer of bufferSize bytes, allocated the
// first time the slot needs one (and again once if the size grows after
// Connect). Request.Data always spans the whole buffer.
func (q *queue) ensureBuffer(s *slot) {
	if size := q.bufferSize(); len(s.buf) < size {
		s.buf = make([]byte, size)
	}
	s.req.Data = s.buf
}

// completeLocal completes s with a transport-detected status without
// executing it (the SGL checks). The core never sees the completion: the
// sender fills SQHD with the last value the core reported.
func (q *queue) completeLocal(s *slot, st nvme.Status) {
	r := &s.req
	r.Cpl = nvme.Completion{CID: r.Cmd.CID(), SQID: q.core.QID(), Status: st}
	s.local = true
	s.setState(slotInCore)
	q.QueueResponse(r)
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
