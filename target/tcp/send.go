package tcp

import (
	"net"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/nvme"
	"basalt/target"
)

// Sizes of the send goroutine's per-queue buffers. A batch is written when
// either fills up; PDU headers go to the arena, data is referenced in place.
const (
	senderArenaSize = 16 << 10
	senderIovCap    = 256
	// pduArenaMax bounds the arena bytes of one PDU: header, header
	// digest, padding to PDO (HPDA 31 means 128-byte alignment) and the
	// data digest.
	pduArenaMax = 128 + nvme.DigestSize
)

// sender is the sending state, used under queue.sendMu by the send
// goroutine or a worker (queue.sendInline) (≈ nvmet's send path with its
// NVMET_TCP_SEND_* states folded into one pass per slot). It turns queued
// slots into PDUs — header bytes in a per-queue arena, data by reference to
// the slot buffers — and writes each batch with one gathered write
// (net.Buffers: writev on TCP). Slots are released only after the write that
// carried their last byte returned.
type sender struct {
	q         *queue
	iov       net.Buffers
	iovBase   [][]byte
	arena     []byte
	off       int // arena bytes used in this batch
	arenaIov  int // index of the iov entry ending at arena[off], or -1
	toRelease []*slot
	held      []heldBuffer // scratch for queue.release
	// dead is set once nothing more may be written: a write failed or a
	// C2HTermReq was sent. termDone is set once a C2HTermReq was taken
	// (termSent is closed).
	dead, termDone bool
	// h2cTimer fires when the oldest outstanding R2T may have waited
	// H2CDataTimeout for its data (h2cArmed: it is running). Made with the
	// first R2T.
	h2cTimer clock.Timer
	h2cArmed bool
	// writes counts the gathered writes issued, inlineBatches the send
	// lists a worker wrote itself (read by tests once the sender has
	// exited).
	writes, inlineBatches int

	// Negotiated at ICReq time.
	hdgst, ddgst bool
	pdoAlign     int // C2HData PDO alignment: (HPDA+1)*4
	// sqFlowDisabled is set when this queue's Connect had CATTR DISSQFC.
	sqFlowDisabled bool
	// lastSQHD is the SQHD of the last completion built by the core, used
	// for completions the transport builds itself.
	lastSQHD uint16
}

func (w *sender) init(q *queue) {
	w.q = q
	w.iovBase = make([][]byte, 0, senderIovCap)
	w.iov = w.iovBase
	w.arena = make([]byte, senderArenaSize)
	w.arenaIov = -1
	w.toRelease = make([]*slot, 0, 64)
	w.held = make([]heldBuffer, 0, 64)
	w.hdgst, w.ddgst = q.hdgst, q.ddgst
	w.pdoAlign = (int(q.hpda) + 1) * 4
}

// sendLoop is the send goroutine, started once the ICResp is written. It
// writes what the receiver and the core queue, and enforces
// H2CDataTimeout, until teardown closes stopSender.
func (q *queue) sendLoop() {
	defer close(q.senderDone)
	w := &q.send
	defer func() {
		q.sendMu.Lock()
		if w.h2cTimer != nil {
			w.h2cTimer.Stop()
		}
		q.sendMu.Unlock()
	}()
	q.sendReady.Store(true)
	for {
		var h2c <-chan time.Time
		q.sendMu.Lock()
		if w.h2cTimer != nil {
			h2c = w.h2cTimer.C()
		}
		q.sendMu.Unlock()
		select {
		case <-q.respReady:
			q.sendMu.Lock()
			w.sendBatch()
			q.sendMu.Unlock()
		case <-h2c:
			q.sendMu.Lock()
			w.checkH2CData()
			q.sendMu.Unlock()
		case <-q.stopSender:
			q.sendMu.Lock()
			w.sendBatch()
			q.sendMu.Unlock()
			return
		}
	}
}

// armH2C starts the H2C data timer for an R2T emitted now, unless it runs
// already (for an older R2T). The first time it makes the timer and wakes
// the send goroutine, which may be waiting without it.
func (w *sender) armH2C() {
	if w.h2cArmed {
		return
	}
	w.h2cArmed = true
	if w.h2cTimer == nil {
		w.h2cTimer = w.q.opts.Clock.NewTimer(w.q.opts.H2CDataTimeout)
		notify(w.q.respReady)
		return
	}
	w.h2cTimer.Reset(w.q.opts.H2CDataTimeout)
}

// checkH2CData runs when the H2C data timer fires: if a slot has waited
// for its data H2CDataTimeout since its R2T, the connection is closed
// (the specification names no FES for it); otherwise the timer is set for
// the oldest outstanding R2T. The host is late only if the receiver is
// waiting for its input: one stalled elsewhere (a backend that makes
// Execute wait, a full read budget) may not have read data that is there,
// so the check is made again a tenth of the timeout later.
func (w *sender) checkH2CData() {
	q := w.q
	w.h2cArmed = false
	now := q.opts.Clock.Now()
	var oldest *slot
	for _, s := range q.table.Load().slots {
		if s.loadState() == slotAwaitingData && (oldest == nil || s.r2tAt.Before(oldest.r2tAt)) {
			oldest = s
		}
	}
	switch {
	case oldest == nil:
		return
	case now.Sub(oldest.r2tAt) < q.opts.H2CDataTimeout:
		w.h2cArmed = true
		w.h2cTimer.Reset(q.opts.H2CDataTimeout - now.Sub(oldest.r2tAt))
	case !q.awaitingInput.Load():
		w.h2cArmed = true
		w.h2cTimer.Reset(q.opts.H2CDataTimeout / 10)
	default:
		q.budget.stats.h2cDataTimeouts.Add(1)
		q.log.Warn("nvme/tcp: H2C data not received in time; closing", "cid", oldest.req.Cmd.CID(),
			"ttag", oldest.index, "len", oldest.req.TransferLen, "timeout", q.opts.H2CDataTimeout)
		q.forceClose(ErrH2CDataTimeout)
	}
}

// sendBatch writes everything queued so far, then a pending C2HTermReq.
func (w *sender) sendBatch() {
	q := w.q
	q.mu.Lock()
	head := q.mu.head
	q.mu.head, q.mu.tail = nil, nil
	term := q.mu.term
	q.mu.term = nil
	q.mu.Unlock()
	for s := head; s != nil; {
		next, kind := s.next, s.kind
		s.next = nil
		if kind == sendR2T {
			w.emitR2T(s) // last access: the slot may be queued again after it
		} else {
			w.emitResponse(s)
		}
		s = next
	}
	w.flush()
	if term == nil {
		return
	}
	if !w.dead {
		w.dead = true
		q.conn.Write(term) // best effort: the connection ends either way // best effort: the connection ends either way
		if c, ok := q.conn.(interface{ CloseWrite() error }); ok {
			c.CloseWrite()
		}
	}
	if !w.termDone {
		w.termDone = true
		close(q.termSent)
	}
}

// emitR2T asks the host for the whole transfer (R2TO 0, R2TL TransferLen),
// tagged with the slot index (NVMe/TCP 1.0 §3.6.2.8). Once teardown has
// begun the request is aborted instead: nobody will read its data.
func (w *sender) emitR2T(s *slot) {
	q := w.q
	if q.down.Load() {
		if s.swapState(slotR2TQueued, slotInCore) {
			q.core.Abort(&s.req, nvme.StatusAbortSQDeletion)
		}
		return
	}
	r := &s.req
	hlen := nvme.DataHLEN
	var flags uint8
	if w.hdgst {
		hlen += nvme.DigestSize
		flags = nvme.FlagHDGSTF
	}
	w.reserve(hlen, 1)
	nvme.EncodeDataHeader(w.header(hlen), nvme.PDUR2T, flags, 0, uint32(hlen),
		nvme.DataHeader{CCCID: r.Cmd.CID(), TTAG: s.index, DATAO: 0, DATAL: r.TransferLen})
	s.r2tAt = q.opts.Clock.Now()
	w.armH2C()
	// From here the receiver accepts H2CData for the slot. If teardown
	// began meanwhile, its scan of the slots may have missed this one:
	// whichever of the two swaps it out of awaiting-data aborts it.
	s.swapState(slotR2TQueued, slotAwaitingData)
	if q.down.Load() && s.swapState(slotAwaitingData, slotInCore) {
		q.core.Abort(&s.req, nvme.StatusAbortSQDeletion)
	}
}

// emitResponse writes a completed command: C2HData PDUs for a successful
// read, then the CapsuleResp unless the last C2HData carries SUCCESS.
func (w *sender) emitResponse(s *slot) {
	r := &s.req
	// The host may reuse the CID, and submit another command, once it
	// sees this response.
	w.q.cids.clear(r.Cmd.CID())
	w.q.outstanding.Add(-1)
	if s.local {
		r.Cpl.SQHD = w.lastSQHD
	} else {
		w.lastSQHD = r.Cpl.SQHD
	}
	w.noteConnect(r)
	var data []byte
	if r.Dir == target.DirC2H && r.Cpl.Status.Success() {
		data = r.Data[:min(r.DataLen, r.TransferLen, uint32(len(r.Data)))]
	}
	// NVMe/TCP 1.0 §3.6.2.7: SUCCESS only with LAST_PDU, and only where
	// the implied all-zero CQE loses nothing: SQ flow control disabled
	// (no SQHD) and DW0/DW1 zero (SPDK _nvmf_tcp_send_c2h_data; nvmet
	// sets it only when sqhd_disabled).
	success := len(data) > 0 && w.sqFlowDisabled && !w.q.opts.DisableC2HSuccess &&
		r.Cpl.DW0 == 0 && r.Cpl.DW1 == 0
	chunk := int(w.q.opts.C2HDataSize)
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		var flags uint8
		if end == len(data) {
			flags = nvme.FlagLastPDU
			if success {
				flags |= nvme.FlagSuccess
			}
		}
		w.emitC2HData(r.Cmd.CID(), uint32(off), data[off:end], flags)
	}
	if !success {
		w.emitCapsuleResp(&r.Cpl)
	}
	w.toRelease = append(w.toRelease, s)
}

// noteConnect remembers whether this queue's Connect disabled SQ flow
// control (CATTR bit 2), which allows the C2HData SUCCESS flag.
func (w *sender) noteConnect(r *target.Request) {
	if r.Cmd.Opcode() == nvme.OpcodeFabrics && r.Cmd.FCType() == nvme.FCTypeConnect && r.Cpl.Status.Success() {
		w.sqFlowDisabled = r.Cmd.DecodeConnect().CATTR&nvme.CATTRDisableSQFlow != 0
	}
}

// emitC2HData writes one C2HData PDU: HLEN 24, PDO aligned to HPDA, data by
// reference, digests as negotiated.
func (w *sender) emitC2HData(cid uint16, off uint32, data []byte, flags uint8) {
	hlen := nvme.DataHLEN
	if w.hdgst {
		hlen += nvme.DigestSize
		flags |= nvme.FlagHDGSTF
	}
	pdo := (hlen + w.pdoAlign - 1) / w.pdoAlign * w.pdoAlign
	plen := pdo + len(data)
	if w.ddgst {
		flags |= nvme.FlagDDGSTF
		plen += nvme.DigestSize
	}
	w.reserve(pdo+nvme.DigestSize, 3)
	b := w.header(pdo)
	nvme.EncodeDataHeader(b, nvme.PDUC2HData, flags, uint8(pdo), uint32(plen),
		nvme.DataHeader{CCCID: cid, DATAO: off, DATAL: uint32(len(data))})
	clear(b[hlen:pdo])
	w.iov = append(w.iov, data)
	w.arenaIov = -1
	if w.ddgst {
		nvme.PutDigest(w.header(nvme.DigestSize), nvme.Digest(data))
	}
}

func (w *sender) emitCapsuleResp(cpl *nvme.Completion) {
	n := nvme.CapsuleRespHLEN
	if w.hdgst {
		n += nvme.DigestSize
	}
	w.reserve(n, 1)
	nvme.EncodeCapsuleResp(w.header(n), cpl, w.hdgst)
}

// reserve flushes the batch unless n more arena bytes and iovs more
// iov entries fit.
func (w *sender) reserve(n, iovs int) {
	if w.off+n > len(w.arena) || len(w.iov)+iovs > cap(w.iovBase) {
		w.flush()
	}
}

// header takes n bytes of the arena, extending the last iov entry when it
// ends where they start.
func (w *sender) header(n int) []byte {
	b := w.arena[w.off : w.off+n : w.off+n]
	if w.arenaIov >= 0 {
		e := w.iov[w.arenaIov]
		w.iov[w.arenaIov] = e[:len(e)+n]
	} else {
		w.arenaIov = len(w.iov)
		w.iov = append(w.iov, w.arena[w.off:w.off+n])
	}
	w.off += n
	return b
}

// flush writes the batch with one gathered write and releases the slots
// whose responses it completed. After a write error nothing more is
// written, but slots are still released.
func (w *sender) flush() {
	if len(w.iov) > 0 && !w.dead {
		w.writes++
		if _, err := writeBuffers(w.q.conn, &w.iov); err != nil {
			w.dead = true
			w.q.log.Debug("nvme/tcp: write failed", "err", err)
			w.q.conn.Close()
		}
	}
	w.iov = w.iovBase[:0]
	w.off, w.arenaIov = 0, -1
	w.held = w.q.release(w.toRelease, w.held)
	clear(w.toRelease)
	w.toRelease = w.toRelease[:0]
}
