package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"basalt/pkg/nvme"
)

// receive is the queue's receive goroutine (≈ nvme_tcp_try_recv). It reads
// PDUs until the connection fails, then fails the queue, waits until no
// goroutine is writing, and completes every command still in flight.
func (q *queue) receive() {
	defer close(q.receiveDone)
	err := q.receiveLoop()
	q.fail(err)
	q.w.shutdown()
	q.failInFlight()
}

func (q *queue) receiveLoop() error {
	for {
		ch, err := q.readHeader()
		if err != nil {
			return err
		}
		switch ch.Type {
		case nvme.PDUCapsuleResp:
			err = q.handleResponse()
		case nvme.PDUC2HData:
			err = q.handleC2HData(ch)
		case nvme.PDUR2T:
			err = q.handleR2T()
		case nvme.PDUC2HTermReq:
			return q.handleTermReq(ch)
		}
		if err != nil {
			return err
		}
	}
}

// readError describes a failed socket read.
func readError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("controller closed the connection: %w", err)
	}
	if errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("connection closed by the host: %w", err)
	}
	return fmt.Errorf("while reading from the controller: %w", err)
}

// readHeader reads and checks the next PDU header (and its digest) into
// q.rhdr. For a C2HTermReq only the common header is read.
func (q *queue) readHeader() (nvme.CommonHeader, error) {
	b := q.rhdr[:]
	if _, err := io.ReadFull(q.r, b[:nvme.CommonHeaderSize]); err != nil {
		return nvme.CommonHeader{}, readError(err)
	}
	ch := nvme.DecodeCommonHeader(b)
	if err := checkHeader(q.qid, ch, q.digest); err != nil {
		return ch, err
	}
	if ch.Type == nvme.PDUC2HTermReq {
		return ch, nil
	}
	n := nvme.DataHLEN + q.digest.headerSize()
	if _, err := io.ReadFull(q.r, b[nvme.CommonHeaderSize:n]); err != nil {
		return ch, readError(err)
	}
	if q.digest.header {
		got, want := nvme.Digest(b[:nvme.DataHLEN]), binary.LittleEndian.Uint32(b[nvme.DataHLEN:])
		if got != want {
			return ch, protocolErrorf(q.qid, "%v header digest error: received %#08x, computed %#08x", ch.Type, want, got)
		}
	}
	return ch, nil
}

// lookup returns the in-flight slot a controller PDU refers to, checking the
// CID's generation like Linux nvme_find_rq ("got bad command_id").
func (q *queue) lookup(cid uint16, what nvme.PDUType) (*slot, error) {
	idx := int(cid & cidIndexMask)
	if idx >= len(q.slots) {
		return nil, protocolErrorf(q.qid, "%v for CID %#04x: no such command slot", what, cid)
	}
	s := &q.slots[idx]
	if st := s.state.Load(); st != slotInFlight|uint32(cid) {
		if st&slotInFlight == 0 {
			return nil, protocolErrorf(q.qid, "%v for CID %#04x: no command in flight", what, cid)
		}
		return nil, protocolErrorf(q.qid, "%v for CID %#04x: generation mismatch, in flight is %#04x", what, cid, uint16(st))
	}
	return s, nil
}

// handleResponse completes the command of a CapsuleResp (NVMe/TCP 1.0 §3.6.2.7).
func (q *queue) handleResponse() error {
	cpl := nvme.DecodeCompletion(q.rhdr[nvme.CommonHeaderSize:nvme.CapsuleRespHLEN])
	s, err := q.lookup(cpl.CID, nvme.PDUCapsuleResp)
	if err != nil {
		return err
	}
	s.cpl = cpl
	switch {
	case s.digestBad:
		// Linux keeps the queue and fails the command (NVME_SC_DATA_XFER_ERROR).
		s.cpl.Status = nvme.StatusDataTransferError
	case !cpl.Status.Success():
	case s.in != nil && int(s.received) != len(s.in):
		s.err = protocolErrorf(q.qid, "short data-in for CID %#04x: %d of %d bytes", cpl.CID, s.received, len(s.in))
	case s.out != nil && !s.inCapsule && int(s.r2tNext) != len(s.out):
		s.err = protocolErrorf(q.qid, "write CID %#04x completed after %d of %d bytes were solicited",
			cpl.CID, s.r2tNext, len(s.out))
	}
	q.complete(s)
	return nil
}

// handleC2HData copies controller-to-host data into the command's buffer
// (NVMe/TCP 1.0 §3.6.2.8): offsets must be contiguous, nothing may overflow,
// and a PDU with SUCCESS completes the command without a CapsuleResp.
func (q *queue) handleC2HData(ch nvme.CommonHeader) error {
	dh := nvme.DecodeDataHeader(q.rhdr[:])
	datal := ch.PLEN - uint32(ch.PDO) - uint32(q.digest.dataSize())
	if dh.DATAL != datal {
		return protocolErrorf(q.qid, "C2HData DATAL %d does not match PLEN %d", dh.DATAL, ch.PLEN)
	}
	s, err := q.lookup(dh.CCCID, nvme.PDUC2HData)
	if err != nil {
		return err
	}
	switch {
	case s.in == nil:
		return protocolErrorf(q.qid, "unexpected C2HData for CID %#04x, a command without data-in", dh.CCCID)
	case dh.DATAO != s.received:
		return protocolErrorf(q.qid, "C2HData for CID %#04x at offset %d, expected %d", dh.CCCID, dh.DATAO, s.received)
	case uint64(dh.DATAO)+uint64(dh.DATAL) > uint64(len(s.in)):
		return protocolErrorf(q.qid, "C2HData for CID %#04x: %d bytes at %d overflow the %d-byte buffer",
			dh.CCCID, dh.DATAL, dh.DATAO, len(s.in))
	}
	dst := s.in[dh.DATAO : dh.DATAO+dh.DATAL]
	if _, err := io.ReadFull(q.r, dst); err != nil {
		return readError(err)
	}
	if q.digest.data {
		d := q.rhdr[nvme.DataHLEN:] // the header (and its digest) were consumed
		if _, err := io.ReadFull(q.r, d[:nvme.DigestSize]); err != nil {
			return readError(err)
		}
		if got, want := nvme.Digest(dst), binary.LittleEndian.Uint32(d); got != want {
			q.log.Warn("nvme host: data digest error", "qid", q.qid, "cid", dh.CCCID, "received", want, "computed", got)
			s.digestBad = true
		}
	}
	s.received += dh.DATAL
	if ch.Flags&nvme.FlagSuccess == 0 {
		return nil
	}
	s.cpl = nvme.Completion{CID: dh.CCCID, SQID: q.qid}
	if s.digestBad {
		s.cpl.Status = nvme.StatusDataTransferError
	} else if int(s.received) != len(s.in) {
		s.err = protocolErrorf(q.qid, "short data-in for CID %#04x: SUCCESS after %d of %d bytes", dh.CCCID, s.received, len(s.in))
	}
	q.complete(s)
	return nil
}

// handleR2T answers a Ready to Transfer with H2CData PDUs of at most
// MAXH2CDATA bytes, LAST_PDU on the last one (NVMe/TCP 1.0 §3.6.2.9; Linux
// nvme_tcp_handle_r2t). MAXR2T is 0, so R2Ts for one command come one after
// another and must ask for contiguous ranges.
func (q *queue) handleR2T() error {
	dh := nvme.DecodeDataHeader(q.rhdr[:])
	s, err := q.lookup(dh.CCCID, nvme.PDUR2T)
	if err != nil {
		return err
	}
	switch {
	case s.out == nil:
		return protocolErrorf(q.qid, "R2T for CID %#04x, a command with no data to send", dh.CCCID)
	case s.inCapsule:
		return protocolErrorf(q.qid, "R2T for CID %#04x whose data was sent in the capsule", dh.CCCID)
	case dh.DATAL == 0:
		return protocolErrorf(q.qid, "R2T for CID %#04x with length 0", dh.CCCID)
	case dh.DATAO != s.r2tNext:
		return protocolErrorf(q.qid, "R2T for CID %#04x at offset %d, expected %d", dh.CCCID, dh.DATAO, s.r2tNext)
	case uint64(dh.DATAO)+uint64(dh.DATAL) > uint64(len(s.out)):
		return protocolErrorf(q.qid, "R2T for CID %#04x asks %d bytes at %d of a %d-byte write",
			dh.CCCID, dh.DATAL, dh.DATAO, len(s.out))
	}
	s.r2tNext += dh.DATAL
	q.sendH2CData(s.out[dh.DATAO:dh.DATAO+dh.DATAL], dh)
	return nil
}

// sendH2CData queues the H2CData PDUs answering one R2T; the writer
// goroutine sends them, so the receive goroutine never blocks on a write.
func (q *queue) sendH2CData(data []byte, r2t nvme.DataHeader) {
	w := q.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.err != nil {
		return // the connection is failing; the receive loop will notice
	}
	b := w.mu.pending
	for off := 0; off < len(data); {
		n := min(len(data)-off, int(q.maxH2CData))
		dh := nvme.DataHeader{CCCID: r2t.CCCID, TTAG: r2t.TTAG, DATAO: r2t.DATAO + uint32(off), DATAL: uint32(n)}
		chunk := data[off : off+n]
		off += n
		hl := encodeH2CData(q.h2c[:], dh, off == len(data), q.digest)
		b.appendCopy(q.h2c[:hl])
		b.appendRef(chunk)
		if q.digest.data {
			var d [nvme.DigestSize]byte
			putLE32(d[:], nvme.Digest(chunk))
			b.appendCopy(d[:])
		}
	}
	w.finishLocked(false) //nolint:errcheck // never writes when not inline
}

// handleTermReq reads the rest of a C2HTermReq and returns it as the error
// that ends the connection.
func (q *queue) handleTermReq(ch nvme.CommonHeader) error {
	var b [termReqPLENMax]byte
	copy(b[:], q.rhdr[:nvme.CommonHeaderSize])
	if _, err := io.ReadFull(q.r, b[nvme.CommonHeaderSize:ch.PLEN]); err != nil {
		return readError(err)
	}
	tr := nvme.DecodeTermReq(b[:])
	return &TermReqError{QID: q.qid, FES: tr.FES, FEI: tr.FEI, Header: append([]byte(nil), b[nvme.TermReqHLEN:ch.PLEN]...)}
}
