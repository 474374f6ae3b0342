package tcp

import (
	"bufio"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"basalt/pkg/invariant"
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
	// Abort completes with status a request Init accepted that will not
	// be executed (the connection ends while it waits for its data or its
	// buffer): exactly one QueueResponse, and what Init took is released.
	Abort(r *target.Request, status nvme.Status)
	// DoneWithDataOnReturn reports whether the core is done with r.Data
	// when Execute(r) returns (it may complete r later): in-capsule data
	// may then be lent to it in place, from the read buffer.
	DoneWithDataOnReturn(r *target.Request) bool
	// CompletesOnWorker reports whether r, in QueueResponse, completes on
	// a goroutine of the core's that may block on the network.
	CompletesOnWorker(r *target.Request) bool
	// Release tells the core the connection is gone. Idempotent.
	Release()
	// Association identifies the controller the queue belongs to (nil
	// before Connect): its queues share a write budget.
	Association() any
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
// connection's lifecycle) and, from the ICResp on, sendLoop. Completions
// reach the sender through an intrusive FIFO of slots under mu; a slot is
// on it at most once, so the list is bounded by the slot count and pushing
// never blocks. Until its ICReq a connection holds no buffer, slot or
// goroutine besides the receiver (the Listener's watchdog times it out).
type queue struct {
	conn   net.Conn
	secure target.SecureChannel // set before the core queue exists; read-only
	core   queueCore
	opts   *Options
	log    *slog.Logger
	remote string
	host   netip.Addr
	budget *Budget
	pool   *bufferPool
	wd     *watchdog
	// phase is the handshake phase (watchdog.go); deadline its place in
	// the watchdog's heap.
	phase    atomic.Uint32
	deadline deadline

	// Receive-goroutine state (see recv.go).
	br       *bufio.Reader // allocated after the ICReq
	bigRead  bool          // an I/O queue: grow br once it is empty
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
	grown    bool        // slots resized after Connect
	started  bool        // the ICReq was accepted: slots and sender exist
	ctrl     *ctrlBudget // the controller's write budget, from Connect on

	// Negotiated in ICReq; written before the sender starts, then
	// read-only.
	hpda  uint8
	hdgst bool
	ddgst bool

	table atomic.Pointer[slotTable]
	cids  *cidSet
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
	// rwait is the receiver's wait for a read buffer, protected by the
	// pool's lock; readGrant (capacity 1) signals that it was granted.
	rwait     readWait
	readGrant chan struct{}
	// heldBytes counts the bytes of the buffers attached to this queue's
	// slots; teardown checks it returns to zero.
	heldBytes atomic.Int64
	// recvBusy is set while the receive goroutine works through input it
	// has already read. Completions queued meanwhile (often by the
	// receiver itself, executing inline) do not wake the sender: the
	// receiver does, once, before it can next block (recvIdle), so that
	// one wake-up and one gathered write serve a whole burst of commands.
	recvBusy atomic.Bool
	// awaitingInput is set while the receiver may block reading the
	// socket: it has read everything the host sent so far.
	awaitingInput atomic.Bool
	respReady     chan struct{} // capacity 1: the send list is non-empty
	slotReleased  chan struct{} // capacity 1: mu.released is non-empty
	stopSender    chan struct{} // closed by teardown: drain and exit
	senderDone    chan struct{}
	termSent      chan struct{} // closed once the sender has consumed a C2HTermReq
	closing       chan struct{} // closed by Close
	closeOnce     sync.Once
	// down is set when teardown starts: from then on a completion for a
	// slot teardown abandoned is dropped instead of treated as a bug, and
	// R2Ts still queued are aborted instead of sent.
	down atomic.Bool
	// inflight counts acquired slots not yet handed to the sender; once
	// down, idle is closed when it reaches zero: teardown waits for it, so
	// every Execute has completed before the queue is gone.
	inflight atomic.Int32
	idle     chan struct{}
	idleOnce sync.Once

	// sendMu is held by whoever writes to the connection: the send
	// goroutine, or a worker writing the send list itself (sendInline).
	// It guards send.
	sendMu sync.Mutex
	// sendReady is set once the send goroutine has started: only then may
	// a worker write.
	sendReady atomic.Bool
	send      sender // the sending state (see send.go)
}

// readWait is a receiver waiting for a read buffer (bufferPool).
type readWait struct {
	size    int
	waiting bool   // queued on the pool's read waiters
	buf     []byte // granted buffer, handed over with readGrant
	next    *queue
}

// newQueue wraps an accepted connection. It allocates only what a
// connection without an ICReq needs; start allocates the rest.
func newQueue(conn net.Conn, newCore coreFactory, opts *Options, wd *watchdog) *queue {
	return newSecureQueue(conn, target.SecureChannel{}, newCore, opts, wd)
}

// newSecureQueue is newQueue for a connection with a secure channel.
func newSecureQueue(conn net.Conn, sc target.SecureChannel, newCore coreFactory, opts *Options, wd *watchdog) *queue {
	q := &queue{
		conn:    conn,
		secure:  sc,
		opts:    opts,
		remote:  conn.RemoteAddr().String(),
		host:    hostOf(conn),
		budget:  opts.Budget,
		pool:    &opts.Budget.pool,
		wd:      wd,
		closing: make(chan struct{}),
	}
	q.deadline.index = -1
	q.log = opts.Logger.With("remote", q.remote)
	q.core = newCore(q)
	return q
}

// start allocates what an established connection needs once its ICReq is
// accepted: the read buffer, the pre-Connect slots, the CID set and the
// sender's state.
func (q *queue) start() {
	q.started = true
	q.br = bufio.NewReaderSize(q.conn, min(handshakeReadBufferSize, q.opts.ReadBufferSize))
	q.budget.stats.readBufferBytes.Add(int64(q.br.Size()))
	q.cids = new(cidSet)
	q.readGrant = make(chan struct{}, 1)
	q.respReady = make(chan struct{}, 1)
	q.slotReleased = make(chan struct{}, 1)
	q.stopSender = make(chan struct{})
	q.senderDone = make(chan struct{})
	q.termSent = make(chan struct{})
	q.idle = make(chan struct{})
	t, slots := (&slotTable{}).grow(q, preConnectSlots)
	q.table.Store(t)
	q.free = make([]*slot, 0, preConnectSlots)
	q.pushFree(slots)
	q.params = headerParams{maxICD: nvme.AdminICDSize, maxH2CData: q.opts.MAXH2CDATA,
		hdgst: q.hdgst, ddgst: q.ddgst}
	q.send.init(q)
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
	err := q.receive()
	q.teardown(err)
}

// expire is the watchdog's verdict on a connection whose deadline for
// phase has passed: unless it left the phase meanwhile, it is closed.
func (q *queue) expire(phase uint32) {
	if phase == phaseConnect && q.core.Connected() {
		q.phase.CompareAndSwap(phaseConnect, phaseConnected)
		return
	}
	if !q.phase.CompareAndSwap(phase, phaseExpired) {
		return
	}
	reason, timeout := ErrICReqTimeout, q.opts.ICReqTimeout
	if phase == phaseConnect {
		reason, timeout = ErrConnectTimeout, q.opts.ConnectTimeout
		q.budget.stats.connectTimeouts.Add(1)
	} else {
		q.budget.stats.icreqTimeouts.Add(1)
	}
	q.log.Warn("nvme/tcp: handshake not finished in time; closing", "err", reason, "timeout", timeout)
	q.forceClose(reason)
}

// QueueResponse implements target.QueueOps. It never blocks on the
// network: the slot is linked into the send list. A completion for a
// request the transport abandoned at teardown is dropped; a second
// completion of one request is a broken invariant: the connection is
// closed rather than a second response sent for a CID the host may have
// reused.
func (q *queue) QueueResponse(r *target.Request) {
	s, err := q.slotOf(r)
	if err != nil {
		q.forceClose(err)
		return
	}
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
			q.handedOver()
			return
		case slotR2TQueued:
			// Completed before its data arrived (not done by target.SQ):
			// wait for the sender to finish with the slot's R2T, waking
			// it in case the R2T's push was deferred (recvBusy).
			notify(q.respReady)
			runtime.Gosched()
		case slotWaitingBudget:
			// Completed while it waited for write budget (not done by
			// target.SQ either): take it off the waiters.
			q.pool.cancelWrite(s)
		case slotFree:
			if q.down.Load() {
				return // abandoned at teardown; inflight already counted
			}
			fallthrough
		default:
			q.forceClose(invariant.Failf("tcp: QueueResponse for CID %#x in slot %d in state %v",
				r.Cmd.CID(), r.Slot, st))
			return
		}
	}
}

// handedOver counts a slot handed to the sender (or freed) by its owner.
func (q *queue) handedOver() {
	switch n := q.inflight.Add(-1); {
	case n == 0 && q.down.Load():
		q.idleOnce.Do(func() { close(q.idle) })
	case n < 0:
		q.forceClose(invariant.Failf("tcp: %d slots in flight", n))
	}
}

// Close implements target.QueueOps: it closes the socket; the receive
// goroutine then tears the queue down. It never blocks on the network.
// While the queue's own teardown runs (the core closes every queue of a
// controller whose admin queue is released), the socket stays open until
// teardown has written what is queued, a C2HTermReq included, within
// DrainTimeout.
func (q *queue) Close(reason error) {
	q.closeOnce.Do(func() {
		q.log.Info("nvme/tcp: closing connection", "reason", reason)
		close(q.closing)
	})
	if !q.down.Load() {
		q.conn.Close()
	}
}

// forceClose is Close that always closes the socket at once (Listener.Close,
// timeouts, broken invariants).
func (q *queue) forceClose(reason error) {
	q.Close(reason)
	q.conn.Close()
}

// shutdownRead stops the receiver without cutting the send side, so the
// responses of commands already received still reach the host (Shutdown).
func (q *queue) shutdownRead() {
	if c, ok := q.conn.(interface{ CloseRead() error }); ok && c.CloseRead() == nil {
		return
	}
	q.forceClose(ErrServerClosed)
}

func (q *queue) slotOf(r *target.Request) (*slot, error) {
	t := q.table.Load()
	if t == nil || r.Slot < 0 || r.Slot >= len(t.slots) || &t.slots[r.Slot].req != r {
		return nil, invariant.Failf("tcp: request %p (slot %d) does not belong to this queue", r, r.Slot)
	}
	return t.slots[r.Slot], nil
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
// then dropped, and its buffer given back).
func (q *queue) link(s *slot) bool {
	q.mu.Lock()
	if q.mu.closed {
		q.mu.Unlock()
		if h, ok := q.detach(s); ok {
			q.pool.giveBack([]heldBuffer{h})
		}
		s.setState(slotFree)
		return false
	}
	if q.mu.tail == nil {
		q.mu.head = s
	} else {
		q.mu.tail.next = s
	}
	q.mu.tail = s
	q.mu.Unlock()
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
		q.handedOver()
		return
	}
	q.handedOver()
	if !q.sendMu.TryLock() {
		notify(q.respReady)
		return
	}
	q.send.inlineBatches++
	q.send.sendBatch()
	q.sendMu.Unlock()
}

// recvIdle is called by the receive goroutine before anything that may
// block it (a socket read, a wait for a slot or a buffer): from then on
// completions wake the sender themselves, and what was queued while the
// receiver was busy is handed to the sender now.
func (q *queue) recvIdle() {
	q.recvBusy.Store(false)
	q.mu.Lock()
	pending := q.mu.head != nil
	q.mu.Unlock()
	if pending {
		notify(q.respReady)
	}
}

// release gives back the buffers of written slots and returns the slots to
// the receiver. held is the caller's scratch space for the buffers.
func (q *queue) release(slots []*slot, held []heldBuffer) []heldBuffer {
	if len(slots) == 0 {
		return held
	}
	for _, s := range slots {
		if h, ok := q.detach(s); ok {
			held = append(held, h)
		}
	}
	if len(held) > 0 {
		if err := q.pool.giveBack(held); err != nil {
			q.forceClose(err)
		}
		clear(held)
		held = held[:0]
	}
	q.mu.Lock()
	for _, s := range slots {
		s.setState(slotFree)
		s.next = q.mu.released
		q.mu.released = s
	}
	q.mu.Unlock()
	notify(q.slotReleased)
	return held
}

// acquireSlot takes a free slot, waiting for the sender to release one if
// all are busy. The caller has checked that the host is within its queue
// depth, so the wait only covers slots whose responses are being written:
// it ends when that write does, or fails (SPDK
// nvmf_tcp_capsule_cmd_hdr_handle retries the same way).
//
// Released slots go on top of the free stack, so the most recently used
// slot is reused first.
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

// maybeGrow sets the queue up once it is connected: Depth()+1 slots, because
// the Linux host reuses a CID as soon as it sees the completion; the queue's
// ICD limit; the controller's write budget; the end of the Connect deadline;
// and, on an I/O queue, the full read buffer (growReadBuffer).
func (q *queue) maybeGrow() {
	if q.grown || !q.core.Connected() {
		return
	}
	q.grown = true
	if q.phase.CompareAndSwap(phaseConnect, phaseConnected) {
		q.wd.disarm(q)
	}
	q.ctrl = q.pool.controller(q.core.Association())
	q.bigRead = q.core.QID() > 0 && q.opts.ReadBufferSize > q.br.Size()
	q.params.maxICD = uint32(max(q.core.InCapsuleDataLimit(), nvme.AdminICDSize))
	t, slots := q.table.Load().grow(q, q.core.Depth()+1)
	if len(slots) == 0 {
		return
	}
	free := make([]*slot, len(q.free), len(t.slots))
	copy(free, q.free)
	q.free = free
	q.table.Store(t)
	q.pushFree(slots)
}

// growReadBuffer gives an I/O queue its ReadBufferSize read buffer, once
// the small one it had since the ICReq is empty (so no byte is lost).
func (q *queue) growReadBuffer() {
	if q.bigRead && q.br.Buffered() == 0 {
		q.bigRead = false
		old := q.br.Size()
		q.br = bufio.NewReaderSize(q.conn, q.opts.ReadBufferSize)
		q.budget.stats.readBufferBytes.Add(int64(q.br.Size() - old))
	}
}

// bufferSize is the largest data buffer of a command on this queue: the
// largest transfer the core allows, and never less than the 8 KiB of
// in-capsule data every queue accepts for Fabrics commands.
func (q *queue) bufferSize() int {
	return max(q.core.MaxTransferSize(), q.core.InCapsuleDataLimit(), nvme.AdminICDSize)
}

// attach gives s the buffer b charged to kind (and ctrl); Request.Data
// spans the whole buffer.
func (q *queue) attach(s *slot, b []byte, kind bufferKind, ctrl *ctrlBudget) {
	s.buf, s.bufKind, s.bufCtrl = b, kind, ctrl
	s.req.Data = b
	q.heldBytes.Add(int64(cap(b)))
}

// detach takes s's buffer off it, to be given back; false if it has none.
func (q *queue) detach(s *slot) (heldBuffer, bool) {
	if s.buf == nil {
		return heldBuffer{}, false
	}
	h := heldBuffer{buf: s.buf, kind: s.bufKind, ctrl: s.bufCtrl}
	q.heldBytes.Add(-int64(cap(s.buf)))
	s.buf, s.bufKind, s.bufCtrl = nil, noBuffer, nil
	s.req.Data = nil
	return h, true
}

// readBuffer gives s a read buffer of n bytes, waiting for the read budget
// when it has no room. A wait ends early only when the queue is closed.
func (q *queue) readBuffer(s *slot, n int) error {
	ok, err := q.pool.tryRead(q, s, n)
	if err != nil || ok {
		return err
	}
	q.budget.stats.readWaits.Add(1)
	q.recvIdle()
	select {
	case <-q.readGrant:
	case <-q.closing:
		if err := q.pool.cancelRead(q); err != nil {
			return err
		}
		return ErrQueueClosed
	}
	q.recvBusy.Store(true)
	b := q.rwait.buf
	q.rwait.buf = nil
	q.attach(s, b, readBuffer, nil)
	return nil
}

// completeLocal completes s with a transport-detected status without
// executing it (the SGL checks, before Init). The core never sees the
// completion: the sender fills SQHD with the last value the core reported.
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
