package cluster_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"basalt/pkg/nvme"
)

// rawConn speaks NVMe/TCP PDUs directly, without a host's buffers, queues
// or keep-alive: what a hostile client sends. No digests are negotiated.
// Every read is bounded by rawReadTimeout so that a target that stops
// answering fails the test instead of hanging it.
type rawConn struct {
	c       net.Conn
	br      *bufio.Reader
	nextCID uint16
}

const rawReadTimeout = 10 * time.Second

// dialRawFrom connects to addr from the loopback address src (127.0.0.0/8
// is all loopback on Linux, so that each source counts as another remote
// host against max_connections_per_host).
func dialRawFrom(src, addr string) (*rawConn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: %w", addr, src, err)
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 4096)}, nil
}

func (r *rawConn) Close() error { return r.c.Close() }

// icreq sends an ICReq and checks that an ICResp comes back.
func (r *rawConn) icreq() error {
	var b [nvme.ICReqSize]byte
	nvme.ICReq{}.Encode(b[:])
	if _, err := r.c.Write(b[:]); err != nil {
		return err
	}
	ch, _, err := r.readPDU()
	if err != nil {
		return fmt.Errorf("ICResp: %w", err)
	}
	if ch.Type != nvme.PDUICResp {
		return fmt.Errorf("got %v, want ICResp", ch.Type)
	}
	return nil
}

// readPDU reads one PDU within rawReadTimeout and returns its common
// header and the rest of it.
func (r *rawConn) readPDU() (nvme.CommonHeader, []byte, error) {
	if err := r.c.SetReadDeadline(time.Now().Add(rawReadTimeout)); err != nil {
		return nvme.CommonHeader{}, nil, err
	}
	return r.nextPDU()
}

// nextPDU reads one PDU, waiting as long as the read deadline set lets it.
func (r *rawConn) nextPDU() (nvme.CommonHeader, []byte, error) {
	var chb [nvme.CommonHeaderSize]byte
	if _, err := io.ReadFull(r.br, chb[:]); err != nil {
		return nvme.CommonHeader{}, nil, err
	}
	ch := nvme.DecodeCommonHeader(chb[:])
	if ch.PLEN < nvme.CommonHeaderSize || ch.PLEN > 1<<20 {
		return ch, nil, fmt.Errorf("PDU %v with PLEN %d", ch.Type, ch.PLEN)
	}
	rest := make([]byte, ch.PLEN)
	copy(rest, chb[:])
	if _, err := io.ReadFull(r.br, rest[nvme.CommonHeaderSize:]); err != nil {
		return ch, nil, err
	}
	return ch, rest, nil
}

// command returns a command with a fresh CID and PSDT = SGL, its single
// data descriptor of length n: in the capsule (offset) or by the transport
// (R2T or C2HData), as the Linux host builds them.
func (r *rawConn) command(op nvme.Opcode, n uint32, inCapsule bool) nvme.Command {
	var c nvme.Command
	c.SetOpcode(op)
	c.SetFlags(nvme.PSDTSGL)
	c.SetCID(r.nextCID)
	r.nextCID++
	id := uint8(nvme.SGLTransportDataBlock)
	if inCapsule {
		id = nvme.SGLDataBlockOffset
	}
	c.SetSGL(0, n, id)
	return c
}

// capsule encodes a CapsuleCmd PDU with in-capsule data icd.
func capsule(c *nvme.Command, icd []byte) []byte {
	b := make([]byte, nvme.CapsuleCmdHLEN+len(icd))
	n := nvme.EncodeCapsuleCmdHeader(b, c, len(icd), false, false)
	n += copy(b[n:], icd)
	return b[:n]
}

// exec sends c (with in-capsule data icd) and reads its completion.
func (r *rawConn) exec(c *nvme.Command, icd []byte) (nvme.Completion, error) {
	if _, err := r.c.Write(capsule(c, icd)); err != nil {
		return nvme.Completion{}, err
	}
	ch, b, err := r.readPDU()
	if err != nil {
		return nvme.Completion{}, err
	}
	if ch.Type != nvme.PDUCapsuleResp || len(b) < nvme.CapsuleRespHLEN {
		return nvme.Completion{}, fmt.Errorf("got %v (%d bytes), want CapsuleResp", ch.Type, len(b))
	}
	cpl := nvme.DecodeCompletion(b[nvme.CommonHeaderSize:])
	if cpl.CID != c.CID() {
		return cpl, fmt.Errorf("completion for CID %d, want %d", cpl.CID, c.CID())
	}
	if !cpl.Status.Success() {
		return cpl, fmt.Errorf("opcode %#x: %v", c.Opcode(), cpl.Status)
	}
	return cpl, nil
}

// connect sends a Fabrics Connect for qid (SQSIZE sqsize, 0's based, no
// keep-alive) to controller cntlid (nvme.CNTLIDDynamic for a new one) and
// returns the CNTLID the target answers with.
func (r *rawConn) connect(qid, sqsize, cntlid uint16, subNQN, hostNQN string) (uint16, error) {
	c := r.command(nvme.OpcodeFabrics, nvme.ConnectDataSize, true)
	c.EncodeConnect(nvme.ConnectCmd{QID: qid, SQSIZE: sqsize})
	data := make([]byte, nvme.ConnectDataSize)
	(&nvme.ConnectData{CNTLID: cntlid, SubNQN: subNQN, HostNQN: hostNQN}).Encode(data)
	cpl, err := r.exec(&c, data)
	if err != nil {
		return 0, fmt.Errorf("Connect QID %d: %w", qid, err)
	}
	return uint16(cpl.DW0), nil
}

// enable sets CC.EN with the NVM queue entry sizes (Property Set), which
// makes the controller ready at once (CSTS.RDY; target/ctrl.go setCC).
func (r *rawConn) enable() error {
	c := r.command(nvme.OpcodeFabrics, 0, false)
	c.SetFCType(nvme.FCTypePropertySet)
	c[nvme.PropOffsetATTRIB] = 0 // 4 bytes
	binary.LittleEndian.PutUint32(c[nvme.PropOffsetOFST:], nvme.PropCC)
	cc := uint64(nvme.CCIOSQESNVM<<nvme.CCIOSQESShift | nvme.CCIOCQESNVM<<nvme.CCIOCQESShift | nvme.CCEnable)
	binary.LittleEndian.PutUint64(c[nvme.PropOffsetVALUE:], cc)
	if _, err := r.exec(&c, nil); err != nil {
		return fmt.Errorf("Property Set CC.EN: %w", err)
	}
	return nil
}

// writes encodes n Write commands of blocks blocks each to nsid, with their
// data to come by R2T, at consecutive ranges wrapping within capacity
// blocks.
func (r *rawConn) writes(n int, nsid uint32, blocks, blockSize int, capacity uint64) []byte {
	var buf bytes.Buffer
	for i := range n {
		c := r.command(nvme.IOWrite, uint32(blocks*blockSize), false)
		c.SetNSID(nsid)
		c.SetSLBA(uint64(i*blocks) % (capacity - uint64(blocks) + 1))
		c.SetCDW(12, uint32(blocks-1))
		buf.Write(capsule(&c, nil))
	}
	return buf.Bytes()
}

// answerR2Ts reads PDUs until the connection ends: each must be an R2T
// for the whole of a write of size bytes, and is answered with an H2CData
// PDU carrying data (not the last one: the write waits for the rest, and
// the buffer the R2T granted stays held, written). It calls got after each
// answer and returns why it stopped.
func (r *rawConn) answerR2Ts(size int, data []byte, got func()) error {
	if err := r.c.SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	for i := 1; ; i++ {
		ch, b, err := r.nextPDU()
		if err != nil {
			return fmt.Errorf("after %d R2Ts: %w", i-1, err)
		}
		if ch.Type != nvme.PDUR2T || len(b) < nvme.DataHLEN {
			return fmt.Errorf("PDU %d: %v, want R2T", i, ch.Type)
		}
		d := nvme.DecodeDataHeader(b)
		if d.DATAO != 0 || int(d.DATAL) != size {
			return fmt.Errorf("R2T %d asks for %d bytes at %d, want %d at 0", i, d.DATAL, d.DATAO, size)
		}
		if _, err := r.c.Write(h2cData(d, data)); err != nil {
			return err
		}
		got()
	}
}

// h2cData encodes an H2CData PDU answering r2t with data at offset 0,
// not the last one: the write waits for the rest.
func h2cData(r2t nvme.DataHeader, data []byte) []byte {
	b := make([]byte, nvme.DataHLEN+len(data))
	nvme.EncodeDataHeader(b, nvme.PDUH2CData, 0, nvme.DataHLEN, uint32(len(b)),
		nvme.DataHeader{CCCID: r2t.CCCID, TTAG: r2t.TTAG, DATAL: uint32(len(data))})
	copy(b[nvme.DataHLEN:], data)
	return b
}

// quiet reports whether nothing arrives and the connection stays open for
// d: an error names what came instead (a PDU, or the connection closed).
func (r *rawConn) quiet(d time.Duration) error {
	if err := r.c.SetReadDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	b, err := r.br.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		return fmt.Errorf("a PDU of type %v arrived", nvme.PDUType(b))
	case errors.As(err, &ne) && ne.Timeout():
		return nil
	}
	return fmt.Errorf("connection ended: %w", err)
}
