package tcp

import (
	"fmt"
	"sync/atomic"
	"time"

	"basalt/pkg/invariant"
	"basalt/pkg/nvme"
	"basalt/target"
)

// slotState is where a command slot is in its life. Transitions:
//
//	slotFree ─acquire─▶ slotReceiving ─Init─▶ slotInCore ─QueueResponse─▶ slotSending ─written─▶ slotFree
//	                          │                     ▲
//	                          ├──────────────▶ slotR2TQueued ─R2T emitted─▶ slotAwaitingData ─last H2CData─┘
//	                          └▶ slotWaitingBudget ─granted─┘
//
// The receive goroutine owns slotReceiving and slotAwaitingData, the send
// goroutine slotR2TQueued and slotSending, the core slotInCore, the
// Budget's pool slotWaitingBudget (a write whose buffer does not fit the
// write budget yet: it holds no buffer and has had no R2T). H2CData is
// accepted only in slotAwaitingData, which the sender enters after it is
// done with the slot's list links: a host that sends data before the R2T
// cannot make the slot be queued twice. The state is atomic because
// teardown, the sender and QueueResponse may race for the receiver's
// states (a core that fails Init'd requests on Release; a teardown
// aborting a request whose R2T the sender is emitting): whoever swaps
// first wins.
type slotState uint32

const (
	slotFree slotState = iota
	slotReceiving
	slotR2TQueued
	slotAwaitingData
	slotInCore
	slotSending
	slotWaitingBudget
)

var slotStateNames = [...]string{"free", "receiving", "r2t-queued", "awaiting-data", "in-core", "sending", "waiting-budget"}

func (s slotState) String() string {
	if int(s) < len(slotStateNames) {
		return slotStateNames[s]
	}
	return fmt.Sprintf("slotState(%d)", uint32(s))
}

// sendKind is what the send goroutine must write for a queued slot.
type sendKind uint8

const (
	sendResponse sendKind = iota // C2HData (if any) and CapsuleResp
	sendR2T                      // one R2T for the whole transfer
)

// slot is one preallocated command context of a queue (≈ nvmet_tcp_cmd).
// Its index is the R2T transfer tag (TTAG) and Request.Slot.
type slot struct {
	req   target.Request
	state atomic.Uint32 // slotState
	index uint16
	q     *queue

	// Receive-goroutine fields.
	icdLen    uint32 // in-capsule data bytes in the command's PDU
	h2cOffset uint32 // next expected H2CData DATAO

	// The data buffer, from the Budget (buffers.go), and what it is
	// charged to; set by whoever owns the slot when it gets one, cleared
	// when it is given back (queue.attach, queue.detach).
	buf     []byte
	bufKind bufferKind
	bufCtrl *ctrlBudget

	// Write-budget waiter fields, protected by the pool's lock while the
	// slot is in slotWaitingBudget: its place in the FIFO, the buffer
	// size and controller it waits for, and the buffer a grant took for
	// it from the free lists.
	wnext *slot
	wsize int
	wctrl *ctrlBudget
	wbuf  []byte

	// r2tAt is when the sender emitted the slot's R2T (H2CDataTimeout);
	// guarded by queue.sendMu.
	r2tAt time.Time

	// Set by whoever queues the slot for the sender (under queue.mu).
	kind sendKind
	// local marks a completion built by the transport itself (SGL
	// errors): the sender fills SQHD with the last value the core used.
	local bool
	// next links the slot into the send list or the released list,
	// both protected by queue.mu. A slot is on at most one list at a
	// time, so the lists need no other storage and never grow.
	next *slot
}

func (s *slot) loadState() slotState { return slotState(s.state.Load()) }

func (s *slot) setState(st slotState) { s.state.Store(uint32(st)) }

func (s *slot) swapState(from, to slotState) bool {
	return s.state.CompareAndSwap(uint32(from), uint32(to))
}

// slotTable is the immutable set of slots of a queue. It only grows (once,
// after Connect); a grown table keeps the old slots at the same indices, so a
// slot pointer or index stays valid for the life of the queue.
type slotTable struct {
	slots []*slot
}

// maxSlots is the largest slot count: TTAG is 16 bits wide.
const maxSlots = 1 << 16

// grow returns a table with n slots (n > len(t.slots)) and the new slots,
// which belong to q.
func (t *slotTable) grow(q *queue, n int) (*slotTable, []*slot) {
	if n > maxSlots {
		n = maxSlots
	}
	old := len(t.slots)
	if n <= old {
		return t, nil
	}
	next := &slotTable{slots: make([]*slot, n)}
	copy(next.slots, t.slots)
	for i := old; i < n; i++ {
		s := &slot{index: uint16(i), q: q}
		s.req.Slot = i
		next.slots[i] = s
	}
	return next, next.slots[old:]
}

// cidSet records which command identifiers are outstanding on a queue: set by
// the receiver when a capsule arrives, cleared by the sender when the
// response is taken for writing — before the host can see it, so a host
// that reuses a CID right after the completion never hits a stale bit.
type cidSet [1 << 10]atomic.Uint64

func (c *cidSet) testAndSet(cid uint16) bool {
	word, bit := &c[cid>>6], uint64(1)<<(cid&63)
	return word.Or(bit)&bit != 0
}

func (c *cidSet) clear(cid uint16) {
	c[cid>>6].And(^(uint64(1) << (cid & 63)))
}

// checkICD checks that the SGL descriptor of a command describes the
// in-capsule data its PDU carried (icd bytes, known from PLEN) — the one
// thing only the transport can check. Everything else about the descriptor
// (type, offset, length against the command, in-capsule limits) is checked
// by the core's Init, so that those failures go through the core's completion
// path (error log, SQHD). A mismatch is answered with a status rather than a
// termination because PLEN already told us where the next PDU starts
// (SPDK HEAD terminates with FES 01h at PLEN instead):
//   - in-capsule data needs a Data Block/Offset descriptor (SGL Descriptor
//     Type Invalid otherwise; SPDK nvmf_tcp_req_parse_sgl);
//   - whose length equals the in-capsule data (Data SGL Length Invalid);
//   - a non-empty Data Block/Offset descriptor without in-capsule data
//     claims data that is not there (Data SGL Length Invalid).
func checkICD(cmd *nvme.Command, icd uint32) nvme.Status {
	id, length := cmd.SGLIdentifier(), cmd.SGLLength()
	switch {
	case icd > 0 && id != nvme.SGLDataBlockOffset:
		return nvme.StatusSGLTypeInvalid
	case icd > 0 && length != icd:
		return nvme.StatusDataSGLLengthInvalid
	case icd == 0 && id == nvme.SGLDataBlockOffset && length > 0:
		return nvme.StatusDataSGLLengthInvalid
	}
	return nvme.StatusSuccess
}

// checkAfterInit checks what Init decided against what the transport can
// move; the core already validates both, so a failure is a broken
// invariant (the caller fails the one command with Internal Error):
//   - in-capsule data belongs to a command that writes exactly that much;
//   - the transfer fits the largest buffer of the queue (maxBuf).
func checkAfterInit(r *target.Request, icd uint32, maxBuf int) error {
	if icd > 0 && (r.Dir != target.DirH2C || r.TransferLen != icd) {
		return invariant.Failf("tcp: CID %#x: %d bytes of in-capsule data, core expects %v of %d",
			r.Cmd.CID(), icd, r.Dir, r.TransferLen)
	}
	if uint64(r.TransferLen) > uint64(maxBuf) {
		return invariant.Failf("tcp: CID %#x: transfer of %d bytes, buffers of at most %d",
			r.Cmd.CID(), r.TransferLen, maxBuf)
	}
	return nil
}
