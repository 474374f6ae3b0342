package tcp

import (
	"encoding/binary"
	"fmt"
	"io"

	"basalt/pkg/invariant"
	"basalt/pkg/nvme"
	"basalt/target"
)

// recvState is the state of a queue's receive state machine (≈ nvmet's
// NVMET_TCP_RECV_PDU/DATA/DDGST/ERR).
type recvState uint8

const (
	// recvPDU: read a common header, validate it, read the rest of the
	// header and its digest, and dispatch on the PDU type.
	recvPDU recvState = iota
	// recvData: read the current PDU's data into q.dst.
	recvData
	// recvDDGST: read and check the data digest, then finish the PDU.
	recvDDGST
	// recvErr: a fatal error was found and a C2HTermReq queued; stop.
	recvErr
)

var recvStateNames = [...]string{"recvPDU", "recvData", "recvDDGST", "recvErr"}

func (s recvState) String() string {
	if int(s) < len(recvStateNames) {
		return recvStateNames[s]
	}
	return fmt.Sprintf("recvState(%d)", uint8(s))
}

// receive runs the receive state machine until the connection fails or a
// protocol violation is found. It returns the reason.
func (q *queue) receive() error {
	if err := q.handshake(); err != nil {
		return err
	}
	q.rstate = recvPDU
	for {
		var err error
		switch q.rstate {
		case recvPDU:
			err = q.receivePDU()
		case recvData:
			err = q.receiveData()
		case recvDDGST:
			err = q.receiveDDGST()
		case recvErr:
			return q.err
		}
		if err != nil {
			return err
		}
	}
}

// handshake reads the ICReq and answers with the ICResp (NVMe/TCP 1.0
// §3.6.2.2–3.6.2.3). The ICReq is read straight from the socket, exactly
// its 128 bytes: nothing is allocated for a connection before it has sent
// a valid one (start). This goroutine writes the ICResp (or TermReq)
// itself, then starts the sender.
func (q *queue) handshake() error {
	if _, err := io.ReadFull(q.conn, q.hdr[:nvme.CommonHeaderSize]); err != nil {
		return fmt.Errorf("tcp: while reading ICReq: %w", err)
	}
	if v := validateICReqHeader(nvme.DecodeCommonHeader(q.hdr[:])); !v.ok() {
		return q.failBeforeICResp(v, q.hdr[:nvme.CommonHeaderSize])
	}
	if _, err := io.ReadFull(q.conn, q.hdr[nvme.CommonHeaderSize:nvme.ICReqSize]); err != nil {
		return fmt.Errorf("tcp: while reading ICReq: %w", err)
	}
	req := nvme.DecodeICReq(q.hdr[:])
	if v := validateICReq(req, q.opts); !v.ok() {
		return q.failBeforeICResp(v, q.hdr[:nvme.ICReqSize])
	}
	// Once the host has the ICResp, the ICReq deadline must not close the
	// connection: whichever of the two claims the phase first wins.
	if !q.phase.CompareAndSwap(phaseICReq, phaseConnect) {
		return ErrICReqTimeout
	}
	q.wd.arm(q, phaseConnect, q.opts.ConnectTimeout)
	// MAXR2T needs no bookkeeping: one R2T per command is always within
	// MAXR2T+1.
	dgst := req.DGST & (nvme.DigestHeader | nvme.DigestData)
	q.hpda = req.HPDA
	q.hdgst = dgst&nvme.DigestHeader != 0
	q.ddgst = dgst&nvme.DigestData != 0
	q.start()
	var resp [nvme.ICReqSize]byte
	nvme.ICResp{PFV: 0, CPDA: 0, DGST: dgst, MAXH2CDATA: q.opts.MAXH2CDATA}.Encode(resp[:])
	if _, err := q.conn.Write(resp[:]); err != nil {
		close(q.senderDone) // no sender to wait for
		return fmt.Errorf("tcp: while writing ICResp: %w", err)
	}
	go q.sendLoop()
	return nil
}

// failBeforeICResp writes a C2HTermReq directly (the sender is idle) and
// returns the violation.
func (q *queue) failBeforeICResp(v violation, offending []byte) error {
	var b [nvme.TermReqMaxPLEN]byte
	n := nvme.EncodeTermReq(b[:], nvme.PDUC2HTermReq, nvme.TermReq{FES: v.fes, FEI: v.fei}, offending)
	q.conn.Write(b[:n]) // best effort: the connection ends either way
	return v
}

// fail queues a C2HTermReq for v with the offending header, moves to
// recvErr and returns nil so that receive returns v.
func (q *queue) fail(v violation, offending []byte) error {
	q.rstate, q.err = recvErr, v
	if v.disconnect {
		return nil
	}
	b := make([]byte, nvme.TermReqMaxPLEN)
	n := nvme.EncodeTermReq(b, nvme.PDUC2HTermReq, nvme.TermReq{FES: v.fes, FEI: v.fei}, offending)
	q.mu.Lock()
	q.mu.term = b[:n]
	q.mu.Unlock()
	notify(q.respReady)
	return nil
}

// readFull reads len(p) bytes of the stream. A read the buffer cannot
// satisfy may block, so the receiver first goes idle (recvIdle); once it
// returns, the receiver is busy again and completions stop waking the
// sender until the next recvIdle. While it may block it is awaiting input:
// only then can the host be late with H2C data (checkH2CData).
func (q *queue) readFull(p []byte) error {
	if q.br.Buffered() >= len(p) {
		_, err := io.ReadFull(q.br, p)
		return err
	}
	q.recvIdle()
	q.awaitingInput.Store(true)
	_, err := io.ReadFull(q.br, p)
	q.awaitingInput.Store(false)
	q.recvBusy.Store(true)
	return err
}

// discard skips n bytes of the stream, going idle first as readFull does.
func (q *queue) discard(n int) error {
	if q.br.Buffered() >= n {
		_, err := q.br.Discard(n)
		return err
	}
	q.recvIdle()
	q.awaitingInput.Store(true)
	_, err := q.br.Discard(n)
	q.awaitingInput.Store(false)
	q.recvBusy.Store(true)
	return err
}

// receivePDU reads one PDU header (recvPDU) and dispatches it.
func (q *queue) receivePDU() error {
	if !q.grown {
		q.maybeGrow() // a Connect that completed inline
	}
	if q.bigRead {
		q.growReadBuffer()
	}
	if err := q.readFull(q.hdr[:nvme.CommonHeaderSize]); err != nil {
		return err
	}
	if !q.grown {
		q.maybeGrow()
	}
	q.ch = nvme.DecodeCommonHeader(q.hdr[:])
	l, v := validateHeader(q.ch, &q.params)
	if !v.ok() {
		return q.fail(v, q.hdr[:nvme.CommonHeaderSize])
	}
	q.layout = l
	n := nvme.CommonHeaderSize + l.pshLen
	end := n
	if l.hdgst {
		end += nvme.DigestSize
	}
	if err := q.readFull(q.hdr[nvme.CommonHeaderSize:end]); err != nil {
		return err
	}
	// NVMe/TCP 1.0 §3.6.3: a header digest error is fatal (FES 03h).
	if l.hdgst && nvme.GetDigest(q.hdr[n:]) != nvme.Digest(q.hdr[:n]) {
		return q.fail(violation{fes: nvme.FESHeaderDigestError, reason: fmt.Sprintf("%v header digest mismatch", q.ch.Type)}, q.hdr[:n])
	}
	if l.padLen > 0 {
		if err := q.discard(l.padLen); err != nil {
			return err
		}
	}
	switch q.ch.Type {
	case nvme.PDUCapsuleCmd:
		return q.receiveCapsule()
	case nvme.PDUH2CData:
		return q.receiveH2CData()
	case nvme.PDUH2CTermReq:
		return q.receiveTermReq()
	}
	return invariant.Failf("tcp: validated PDU type %v has no handler", q.ch.Type)
}

// receiveData reads the current PDU's data (recvData).
func (q *queue) receiveData() error {
	if err := q.readFull(q.dst); err != nil {
		return err
	}
	if q.layout.ddgst {
		q.rstate = recvDDGST
		return nil
	}
	q.rstate = recvPDU
	return q.dataDone()
}

// receiveDDGST checks the data digest (recvDDGST). A mismatch on host data
// ends the connection with FES 03h, as SPDK's nvmf_tcp_pdu_payload_handle
// did up to v22 and nvmet does (it tears the queue down); the Linux host
// reconnects and reissues the command. (Current SPDK instead fails the
// command with Transient Transport Error.)
func (q *queue) receiveDDGST() error {
	if err := q.readFull(q.ddgstBuf[:]); err != nil {
		return err
	}
	if nvme.GetDigest(q.ddgstBuf[:]) != nvme.Digest(q.dst) {
		n := nvme.CommonHeaderSize + q.layout.pshLen
		return q.fail(violation{fes: nvme.FESHeaderDigestError, reason: fmt.Sprintf("%v data digest mismatch", q.ch.Type)}, q.hdr[:n])
	}
	q.rstate = recvPDU
	return q.dataDone()
}

// dataDone finishes a PDU whose data has been read.
func (q *queue) dataDone() error {
	s := q.cur
	q.cur, q.dst = nil, nil
	if q.ch.Type == nvme.PDUCapsuleCmd {
		return q.startCommand(s)
	}
	// The swap fails only if the core completed the request on its own
	// while it waited for data; then there is nothing to execute.
	if s.h2cOffset == s.req.TransferLen && s.swapState(slotAwaitingData, slotInCore) {
		q.core.Execute(&s.req)
	}
	return nil
}

// receiveCapsule handles a CapsuleCmd header: take a slot, copy the SQE,
// then read the in-capsule data or start the command.
func (q *queue) receiveCapsule() error {
	sqe := q.hdr[nvme.OffsetCapsuleSQE:nvme.CapsuleCmdHLEN]
	cid := binary.LittleEndian.Uint16(sqe[nvme.SQEOffsetCID:])
	// A host may not submit to a full queue (SQSIZE+1 outstanding; only
	// the Connect before it completes). Refusing here also keeps a host
	// from parking every slot in "awaiting data" and so blocking this
	// goroutine in acquireSlot.
	if depth := q.core.Depth(); int(q.outstanding.Load()) >= depth {
		return q.fail(violation{fes: nvme.FESPDUSequenceError,
			reason: fmt.Sprintf("command beyond the queue depth %d", depth)}, q.hdr[:nvme.CapsuleCmdHLEN])
	}
	s, err := q.acquireSlot()
	if err != nil {
		return err
	}
	q.outstanding.Add(1)
	// A CID still outstanding: a correct host cannot do this (slots are
	// Depth()+1 and a CID is freed before its completion is written). A
	// Command ID Conflict status would carry the same CID and complete
	// the host's original command (nvme_find_rq), so terminate instead.
	if q.cids.testAndSet(cid) {
		return q.fail(violation{fes: nvme.FESPDUSequenceError,
			reason: fmt.Sprintf("CID %#x already outstanding", cid)}, q.hdr[:nvme.CapsuleCmdHLEN])
	}
	r := &s.req
	copy(r.Cmd[:], sqe)
	r.Cpl = nvme.Completion{}
	r.Data = nil
	r.Dir, r.TransferLen, r.DataLen = target.DirNone, 0, 0
	s.local, s.icdLen, s.h2cOffset = false, q.layout.dataLen, 0
	switch {
	case s.icdLen == 0:
		return q.startCommand(s)
	case !q.layout.ddgst && q.br.Buffered() >= int(s.icdLen):
		return q.startLent(s)
	}
	// The header check bounded dataLen by maxICD, which never exceeds
	// the buffer size.
	if err := q.readBuffer(s, int(s.icdLen)); err != nil {
		return err
	}
	q.cur, q.dst = s, s.buf[:s.icdLen]
	q.rstate = recvData
	return nil
}

// startLent starts a command whose in-capsule data (without a digest to
// check) is already in the read buffer. The data stays there while the
// command starts (startCommand places it, see placeLent) and is consumed
// afterwards, which saves a copy when the core is done with the data once
// Execute returns (SQ.DoneWithDataOnReturn).
func (q *queue) startLent(s *slot) error {
	data, err := q.br.Peek(int(s.icdLen))
	if err != nil {
		return err // cannot happen: the caller checked Buffered
	}
	q.lent = data[:len(data):len(data)]
	err = q.startCommand(s)
	q.lent = nil
	if err != nil {
		return err
	}
	_, err = q.br.Discard(len(data))
	return err
}

// placeLent puts the lent in-capsule data of s where Execute reads it:
// lent in place when the core is done with the data when Execute returns,
// before startLent consumes it (an I/O command executed inline, or an
// asynchronous write whose backend copies it on submit and completes
// later), copied into a read buffer otherwise. A lent request keeps no
// buffer, and r.Data keeps pointing into the read buffer until the slot is
// reused: nothing reads it, and receiveCapsule resets it.
func (q *queue) placeLent(s *slot) error {
	if q.core.DoneWithDataOnReturn(&s.req) {
		return nil // r.Data is q.lent already
	}
	if err := q.readBuffer(s, len(q.lent)); err != nil {
		return err
	}
	copy(s.buf, q.lent)
	return nil
}

// startCommand runs the transport checks and hands the command to the core:
// Execute at once (a read once it has a read buffer), or, for data the
// host sends by R2T, once the write budget has room for its buffer and the
// data has arrived. An error ends the connection; the command has then
// been completed.
func (q *queue) startCommand(s *slot) error {
	r := &s.req
	if st := checkICD(&r.Cmd, s.icdLen); !st.Success() {
		q.completeLocal(s, st)
		return nil
	}
	// Init checks the transfer against cap(r.Data): the in-capsule data,
	// or a scratch slice as large as any buffer of the queue until Init
	// says which way the data goes.
	switch {
	case q.lent != nil:
		r.Data = q.lent
	case s.icdLen > 0: // in s.buf
	case r.Cmd.SGLLength() > 0:
		r.Data = q.pool.scratchFor(q.bufferSize())
	}
	s.setState(slotInCore)
	if !q.core.Init(r) {
		return nil // the core completed it
	}
	if err := checkAfterInit(r, s.icdLen, q.bufferSize()); err != nil {
		q.core.Abort(r, nvme.StatusInternalError)
		return nil
	}
	var err error
	switch {
	case r.Dir == target.DirH2C && s.icdLen == 0 && r.TransferLen > 0:
		return q.startR2T(s)
	case r.Dir == target.DirC2H && r.TransferLen > 0:
		err = q.readBuffer(s, int(r.TransferLen))
	case q.lent != nil:
		err = q.placeLent(s)
	}
	if err != nil {
		q.core.Abort(r, nvme.StatusAbortSQDeletion)
		return err
	}
	q.core.Execute(r)
	return nil
}

// startR2T asks the host for the data of s with one R2T for the whole
// transfer, as nvmet and SPDK do (the host splits it into H2CData PDUs of
// at most MAXH2CDATA bytes), once the write budgets have room for its
// buffer: until then s waits in the pool, holding nothing but its slot.
func (q *queue) startR2T(s *slot) error {
	ok, err := q.pool.tryWrite(s, q.ctrl, int(s.req.TransferLen))
	switch {
	case err != nil:
		q.core.Abort(&s.req, nvme.StatusInternalError)
	case ok:
		s.setState(slotR2TQueued)
		s.kind = sendR2T
		q.push(s)
	}
	return nil
}

// receiveH2CData validates an H2CData header against the command it names.
// FES/FEI choices: DATAL > MAXH2CDATA is 05h (FreeBSD nvmf_tcp_handle_h2c_data);
// an unknown TTAG 02h at TTAG, a TTAG not waiting for data 01h at TTAG, a
// wrong CCCID 02h at CCCID, a wrong DATAO or a transfer past the command's
// length 04h (SPDK nvmf_tcp_h2c_data_hdr_handle); DATAL different from the
// PDU's data 01h at DATAL and LAST_PDU on the wrong PDU 02h (FreeBSD).
func (q *queue) receiveH2CData() error {
	d := nvme.DecodeDataHeader(q.hdr[:])
	offending := q.hdr[:nvme.DataHLEN]
	if d.DATAL > q.params.maxH2CData {
		return q.fail(violation{fes: nvme.FESDataLimitExceeded, reason: fmt.Sprintf("H2CData DATAL %d > MAXH2CDATA", d.DATAL)}, offending)
	}
	slots := q.table.Load().slots
	if int(d.TTAG) >= len(slots) {
		return q.fail(violation{fes: nvme.FESPDUSequenceError, fei: nvme.OffsetTTAG, reason: fmt.Sprintf("H2CData TTAG %d unknown", d.TTAG)}, offending)
	}
	s := slots[d.TTAG]
	r := &s.req
	switch {
	case s.loadState() != slotAwaitingData:
		return q.fail(invalidField(nvme.OffsetTTAG, fmt.Sprintf("H2CData TTAG %d not waiting for data", d.TTAG)), offending)
	case d.CCCID != r.Cmd.CID():
		return q.fail(violation{fes: nvme.FESPDUSequenceError, fei: nvme.OffsetCCCID,
			reason: fmt.Sprintf("H2CData CCCID %#x, TTAG %d belongs to CID %#x", d.CCCID, d.TTAG, r.Cmd.CID())}, offending)
	case d.DATAL != q.layout.dataLen:
		return q.fail(invalidField(nvme.OffsetDATAL, fmt.Sprintf("H2CData DATAL %d, PDU carries %d", d.DATAL, q.layout.dataLen)), offending)
	case d.DATAO != s.h2cOffset:
		return q.fail(violation{fes: nvme.FESDataOutOfRange, reason: fmt.Sprintf("H2CData DATAO %d, expected %d", d.DATAO, s.h2cOffset)}, offending)
	case uint64(d.DATAO)+uint64(d.DATAL) > uint64(r.TransferLen):
		return q.fail(violation{fes: nvme.FESDataOutOfRange, reason: fmt.Sprintf("H2CData DATAO %d + DATAL %d > %d", d.DATAO, d.DATAL, r.TransferLen)}, offending)
	case (d.DATAO+d.DATAL == r.TransferLen) != (q.ch.Flags&nvme.FlagLastPDU != 0):
		return q.fail(violation{fes: nvme.FESPDUSequenceError, reason: "H2CData LAST_PDU does not match the end of the R2T"}, offending)
	}
	s.h2cOffset += d.DATAL
	q.cur, q.dst = s, r.Data[d.DATAO:d.DATAO+d.DATAL]
	if d.DATAL == 0 {
		return q.dataDone()
	}
	q.rstate = recvData
	return nil
}

// receiveTermReq reads an H2CTermReq and ends the connection: the host has
// given up on it. Nothing is sent back.
func (q *queue) receiveTermReq() error {
	tr := nvme.DecodeTermReq(q.hdr[:])
	if err := q.discard(int(q.layout.dataLen)); err != nil {
		return err
	}
	return fmt.Errorf("%w: FES %#x (%v), FEI %d", ErrHostTerminated, uint16(tr.FES), tr.FES, tr.FEI)
}
