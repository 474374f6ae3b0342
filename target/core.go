package target

import (
	"context"
	"encoding/binary"
	"sync/atomic"

	"basalt/pkg/invariant"
	"basalt/pkg/nvme"
)

// Request states: Init moves a slot from free (or done) to active; the one
// completion moves it to done.
const (
	reqFree uint32 = iota
	reqActive
	reqDone
)

// queueCounters are one queue's command counters.
type queueCounters struct {
	commands, errors, readCmds, writeCmds, bytesRead, bytesWritten atomic.Uint64
}

// counterTotals is a plain copy of queueCounters.
type counterTotals struct {
	commands, errors, readCmds, writeCmds, bytesRead, bytesWritten uint64
}

func (q *queueCounters) totals() counterTotals {
	return counterTotals{
		commands: q.commands.Load(), errors: q.errors.Load(), readCmds: q.readCmds.Load(),
		writeCmds: q.writeCmds.Load(), bytesRead: q.bytesRead.Load(), bytesWritten: q.bytesWritten.Load(),
	}
}

func (c *counterTotals) add(o counterTotals) {
	c.commands += o.commands
	c.errors += o.errors
	c.readCmds += o.readCmds
	c.writeCmds += o.writeCmds
	c.bytesRead += o.bytesRead
	c.bytesWritten += o.bytesWritten
}

// SQ is the core's side of one submission/completion queue pair, i.e. one
// transport connection (≈ struct nvmet_sq). Before a Fabrics Connect it
// accepts nothing else; the Connect binds it to a controller as the admin
// queue (QID 0) or an I/O queue.
//
// Init and Execute are called from the transport's receive goroutine only.
// Admin and Fabrics commands run inline in Execute, and so do I/O commands
// on a namespace whose backend never blocks (NonBlocker); writes to a
// backend.AsyncWriter are started inline and complete when it calls back
// (a replicated volume: when the write is committed and applied). Other I/O
// commands run on a per-queue set of worker goroutines, at most one per
// queue entry, started when first needed, so that many commands are in
// flight while the backend blocks. Completions may therefore arrive on any
// goroutine, including inside Execute.
type SQ struct {
	t    *Target
	ops  QueueOps
	port *Port
	// ctx is passed to backend calls; it is canceled on Release, controller
	// teardown or reset, so blocked calls return.
	ctx    context.Context
	cancel context.CancelFunc

	// ctrl, qid, size, noSQHD and work are set by Connect before connected
	// is stored, and read-only afterwards.
	ctrl      atomic.Pointer[Controller]
	qid       uint16
	size      uint32 // SQSIZE + 1
	noSQHD    bool   // CATTR.DISSQFC: SQ flow control disabled, SQHD 0xFFFF
	work      chan *Request
	connected atomic.Bool
	// auth is the DH-HMAC-CHAP state of a queue whose host must
	// authenticate (nil: none), set by Connect like the fields above.
	auth *sqAuth

	sqhd     atomic.Uint32
	released atomic.Bool
	quit     chan struct{}
	// workers is the number of worker goroutines started; idle the number
	// waiting for work that no dispatch has claimed yet.
	workers atomic.Int32
	idle    atomic.Int32

	counters queueCounters
}

// NewSQ creates the core state of a new transport connection arriving on
// port (nil: a default port with ID 0).
func (t *Target) NewSQ(ops QueueOps, port *Port) *SQ {
	if port == nil {
		port = t.defaultPort
	}
	sq := &SQ{t: t, ops: ops, port: port, quit: make(chan struct{})}
	sq.ctx, sq.cancel = context.WithCancel(t.ctx)
	t.mu.Lock()
	t.mu.sqs[sq] = struct{}{}
	t.mu.Unlock()
	return sq
}

// QID returns the queue ID (valid once Connected).
func (sq *SQ) QID() uint16 {
	if !sq.connected.Load() {
		return 0
	}
	return sq.qid
}

// Connected reports whether a Connect has succeeded on the queue.
func (sq *SQ) Connected() bool { return sq.connected.Load() }

// Controller returns the controller the queue belongs to, or nil.
func (sq *SQ) Controller() *Controller { return sq.ctrl.Load() }

// Association identifies the controller the queue belongs to (its
// *Controller), or is nil before Connect: a transport keys what a
// controller's queues share (a write budget) by it.
func (sq *SQ) Association() any {
	if c := sq.ctrl.Load(); c != nil {
		return c
	}
	return nil
}

// Depth returns the number of queue entries: SQSIZE+1 after Connect, 1
// before (only the Connect command may be outstanding).
func (sq *SQ) Depth() int {
	if !sq.connected.Load() {
		return 1
	}
	return int(sq.size)
}

// InCapsuleDataLimit returns the most in-capsule data a command may carry:
// 8 KiB before Connect and on the admin queue, IOCCSZ×16−64 on I/O queues.
// Fabrics commands (nvme.Command.IsFabrics) always accept 8 KiB (NVMe/TCP
// 1.0 §3.3).
func (sq *SQ) InCapsuleDataLimit() int {
	if !sq.connected.Load() || sq.qid == 0 {
		return nvme.AdminICDSize
	}
	return sq.t.cfg.icdSize()
}

// MaxTransferSize returns the largest data transfer of one command: MDTS on
// I/O queues, 8 KiB on the admin queue and before Connect. Request.Data
// must have at least this capacity.
func (sq *SQ) MaxTransferSize() int {
	if !sq.connected.Load() || sq.qid == 0 {
		return AdminMaxTransfer
	}
	return sq.t.cfg.maxTransfer()
}

// icdLimit is the in-capsule data limit for r.
func (sq *SQ) icdLimit(r *Request) int {
	if r.Cmd.IsFabrics() {
		return nvme.AdminICDSize
	}
	return sq.InCapsuleDataLimit()
}

// Init validates r.Cmd and prepares its execution (cf. nvmet_req_init): it
// chooses the handler and sets Dir and TransferLen. When the command is
// invalid, Init completes it (QueueOps.QueueResponse is called) and returns
// false; the transport must then not call Execute, and must not transfer
// data for it.
func (sq *SQ) Init(r *Request) bool {
	r.sq = sq
	r.execute = nil
	r.async, r.worker = false, false
	r.ns = nil
	r.errLoc = noErrLoc
	r.Dir, r.TransferLen, r.DataLen = DirNone, 0, 0
	r.Cpl = nvme.Completion{CID: r.Cmd.CID()}
	r.state.Store(reqActive)
	status := sq.parse(r)
	if !status.Success() {
		sq.complete(r, status)
		return false
	}
	return true
}

// parse selects the command set by queue and state (cf. nvmet_req_init).
func (sq *SQ) parse(r *Request) nvme.Status {
	// NVMe-oF 1.1 §2.1: fused operations are not supported (FUSES = 0), and
	// PSDT must be 01b: data is described by an SGL.
	if r.Cmd.FUSE() != 0 || r.Cmd.PSDT() != 1 {
		return r.fail(nvme.StatusInvalidField, nvme.SQEOffsetFlags)
	}
	if r.Cmd.IsFabrics() {
		return sq.parseFabricsCmd(r)
	}
	if !sq.connected.Load() {
		// NVMe-oF 1.1 §3.3: the first command on a queue must be Connect.
		return r.fail(nvme.StatusCommandSequenceError, nvme.SQEOffsetOpcode)
	}
	c := sq.ctrl.Load()
	if c.isDead() {
		return nvme.StatusAbortSQDeletion
	}
	if !sq.authenticated() {
		return r.fail(nvme.StatusAuthRequired, nvme.SQEOffsetOpcode)
	}
	if sq.qid == 0 {
		c.touch()
		if c.discovery {
			return c.parseDiscoveryCmd(r)
		}
		return c.parseAdminCmd(r)
	}
	return sq.parseIOCmd(c, r)
}

// fail records the Parameter Error Location of a failure and returns status.
func (r *Request) fail(status nvme.Status, errLoc uint16) nvme.Status {
	r.errLoc = errLoc
	return status
}

// expectData checks the command's SGL against the transfer the command
// needs (cf. nvmet_check_transfer_len) and sets Dir and TransferLen.
func (r *Request) expectData(dir DataDir, want uint32) nvme.Status {
	if r.Cmd.SGLLength() != want {
		return r.fail(nvme.StatusDataSGLLengthInvalid, nvme.SQEOffsetSGL)
	}
	if want == 0 {
		return nvme.StatusSuccess
	}
	r.Dir, r.TransferLen = dir, want
	return r.checkSGL()
}

// checkSGL validates the data SGL descriptor of a command that moves
// TransferLen bytes (NVMe/TCP 1.0 §3.3): Data Block/Offset for in-capsule
// write data (offset 0, within the in-capsule limit) or Transport Data Block
// for R2T/C2HData transfers.
func (r *Request) checkSGL() nvme.Status {
	switch r.Cmd.SGLIdentifier() {
	case nvme.SGLDataBlockOffset:
		if r.Dir != DirH2C {
			return r.fail(nvme.StatusInvalidField, nvme.SQEOffsetSGL+15)
		}
		if r.Cmd.SGLAddress() != 0 || int(r.TransferLen) > r.sq.icdLimit(r) {
			return r.fail(nvme.StatusSGLOffsetInvalid, nvme.SQEOffsetSGL)
		}
	case nvme.SGLTransportDataBlock:
	default:
		return r.fail(nvme.StatusSGLTypeInvalid, nvme.SQEOffsetSGL+15)
	}
	if int(r.TransferLen) > cap(r.Data) {
		// The transport promised MaxTransferSize bytes per slot.
		_ = invariant.Failf("target: transport buffer of %d bytes for a transfer of %d", cap(r.Data), r.TransferLen)
		return nvme.StatusInternalError
	}
	return nvme.StatusSuccess
}

// Execute runs a command that Init accepted, after the transport placed
// TransferLen bytes in Data for DirH2C. Admin and Fabrics commands, and I/O
// commands on a non-blocking namespace, complete before Execute returns (an
// AER completes later); other I/O commands are handed to a worker. Execute
// must not be called after Release.
func (sq *SQ) Execute(r *Request) {
	if r.state.Load() != reqActive {
		// Completed already (Init refused it, or it ran): nothing to end.
		_ = invariant.Failf("target: Execute of a request Init did not accept or that completed (qid %d cid %d)", sq.qid, r.Cmd.CID())
		return
	}
	if r.execute == nil {
		_ = invariant.Failf("target: Init accepted opcode %#x without a handler (qid %d cid %d)", r.Cmd.Opcode(), sq.qid, r.Cmd.CID())
		sq.complete(r, nvme.StatusInternalError)
		return
	}
	if sq.work == nil || r.Cmd.IsFabrics() || (r.ns != nil && r.ns.inline) || r.async {
		r.execute(r)
		return
	}
	sq.dispatch(r)
}

// DoneWithDataOnReturn reports whether the core is done with r.Data when
// Execute(r) returns, for a request Init accepted: an asynchronous write
// (the backend is an AsyncWriter) whose backend copies the data when the
// write is submitted (backend.CopiesOnSubmit: Execute starts it on the
// caller's goroutine, and it completes later, reading nothing of r.Data),
// or any other I/O command on a namespace whose backend is a NonBlocker
// (Execute runs it to completion on the caller's goroutine). An
// asynchronous write is judged by CopiesOnSubmit alone, on a NonBlocker
// too: its WriteAtAsync may keep the data until it calls back. For such a
// request the transport may point r.Data, for the duration of Execute
// only, at exactly TransferLen bytes of host data in its own read buffer
// instead of copying them into the slot's buffer, and reuse that memory
// once Execute returns. It is false for admin and Fabrics commands.
func (sq *SQ) DoneWithDataOnReturn(r *Request) bool {
	switch {
	case sq.work == nil || r.ns == nil || r.Cmd.IsFabrics():
		return false
	case r.async:
		return r.ns.copiesOnSubmit
	}
	return r.ns.inline
}

// CompletesOnWorker reports whether r, while QueueOps.QueueResponse(r) is
// being called, completes on one of the queue's workers: a goroutine that
// may block on the network, so the transport may write the response (and
// others queued) on it instead of handing it to a goroutine of its own.
// False for completions on the receive goroutine (inline execution) or on a
// backend's (asynchronous writes).
func (sq *SQ) CompletesOnWorker(r *Request) bool { return r.worker }

// dispatch hands r to an idle worker, starting one if none is idle and
// fewer than Depth run. Every request sent has a worker that will receive
// it and is not busy with another, so none waits behind a blocked backend
// call.
func (sq *SQ) dispatch(r *Request) {
	for {
		n := sq.idle.Load()
		if n == 0 {
			if sq.workers.Load() < int32(sq.size) {
				sq.workers.Add(1)
				go sq.worker()
			}
			break
		}
		if sq.idle.CompareAndSwap(n, n-1) {
			break
		}
	}
	sq.work <- r
}

// worker executes I/O commands until the queue is released; then it
// drains what is left so that every request completes.
func (sq *SQ) worker() {
	for {
		select {
		case r := <-sq.work:
			r.worker = true
			r.execute(r)
			sq.idle.Add(1)
		case <-sq.quit:
			for {
				select {
				case r := <-sq.work:
					r.worker = true
					r.execute(r)
				default:
					return
				}
			}
		}
	}
}

// complete ends r exactly once (cf. nvmet_req_complete): it fills the CQE,
// records a failure in the error log, drops the namespace reference and
// hands r back to the transport. r must not be touched afterwards.
func (sq *SQ) complete(r *Request, status nvme.Status) {
	if !r.state.CompareAndSwap(reqActive, reqDone) {
		// The second completion is dropped: the first one ended r.
		sq.t.doubleCompletions.Add(1)
		_ = invariant.Failf("target: request completed twice (qid %d cid %d, second status %v)", sq.qid, r.Cmd.CID(), status)
		return
	}
	sq.counters.commands.Add(1)
	if status.Success() {
		if r.Dir == DirC2H {
			r.DataLen = r.TransferLen
		}
	} else {
		r.DataLen = 0
		sq.counters.errors.Add(1)
		if c := sq.ctrl.Load(); c != nil {
			c.recordError(r, status)
		}
	}
	r.Cpl.Status = status
	r.Cpl.SQID = sq.qid
	r.Cpl.SQHD = sq.nextSQHD()
	if r.ns != nil {
		r.ns.release()
		r.ns = nil
	}
	sq.ops.QueueResponse(r)
}

// Abort completes r, which Init accepted and which will never be executed,
// with status (≈ nvmet_req_uninit): the transport aborts a request whose
// connection ends while it waits for its data (after an R2T) or for a
// buffer, usually with Command Aborted due to SQ Deletion. Like every
// completion it releases what Init took (the namespace reference) and
// calls QueueOps.QueueResponse once.
func (sq *SQ) Abort(r *Request, status nvme.Status) { sq.complete(r, status) }

// nextSQHD advances the submission queue head pointer, modulo SQSIZE+1
// (NVMe-oF 1.1 §2.2; nvmet_update_sq_head), or returns 0xFFFF when SQ flow
// control is disabled.
func (sq *SQ) nextSQHD() uint16 {
	if !sq.connected.Load() {
		return 0
	}
	if sq.noSQHD {
		return 0xFFFF
	}
	for {
		old := sq.sqhd.Load()
		next := (old + 1) % sq.size
		if sq.sqhd.CompareAndSwap(old, next) {
			return uint16(next)
		}
	}
}

// Release tells the core that the transport connection is gone. It cancels
// backend calls in flight, stops the workers once they have completed what
// they hold, and destroys the controller if this was its admin queue. It is
// idempotent; requests in flight still complete (QueueResponse is called).
func (sq *SQ) Release() {
	if !sq.released.CompareAndSwap(false, true) {
		return
	}
	sq.cancel()
	close(sq.quit)
	if c := sq.ctrl.Load(); c != nil {
		if sq.qid == 0 {
			c.destroy(ErrAdminQueueGone)
		} else {
			c.detachQueue(sq)
		}
	}
	t := sq.t
	t.mu.Lock()
	delete(t.mu.sqs, sq)
	t.mu.retired.add(sq.counters.totals())
	t.mu.Unlock()
}

func putLE32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }
