package host

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"basalt/pkg/nvme"
)

// fakeTarget is test scaffolding, not a product: a scripted NVMe/TCP
// controller speaking just enough of the protocol to answer the Linux
// connect sequence, Identify, a few log pages and Read/Write/... into a
// map. It also checks every PDU the host sends against NVMe/TCP 1.0 and the
// Linux host's habits, recording violations that the test then asserts are
// absent (fakeTarget.checkClean).
type fakeTarget struct {
	t   testing.TB
	ln  net.Listener
	cfg fakeConfig

	mu         sync.Mutex
	blocks     map[uint64][]byte // nsid 1, by LBA
	nextCNTLID uint16
	ctrls      map[uint16]*fakeCtrl
	trace      []string // "qid:command" in arrival order
	violations []string
	stats      fakeStats
	conns      []*fakeConn
	wg         sync.WaitGroup
}

// fakeConfig selects the fake's behaviour; zero fields take the defaults
// set by newFakeTarget.
type fakeConfig struct {
	SubNQN     string
	MAXH2CDATA uint32
	IOCCSZ     uint32
	MDTS       uint8
	MQES       uint16
	BlockSize  int
	Blocks     uint64
	ANA        bool          // CMIC 0x0B, OAES bit 11, one ANA group
	ANAState   nvme.ANAState // state of group 1 (default optimized)
	// C2HChunk splits read data into C2HData PDUs of this many bytes.
	C2HChunk int
	// R2TChunk splits a write's data into R2Ts of this many bytes.
	R2TChunk int
	// UseSuccess ends reads with a C2HData SUCCESS flag, no CapsuleResp.
	UseSuccess bool
	// ICResp edits the ICResp before it is sent.
	ICResp func(*nvme.ICResp)
	// Identify edits Identify Controller data before it is sent.
	Identify func(*nvme.IdentifyController)
	// OnIO, if set, sees every I/O command as its capsule arrives (before any
	// R2T; data is the in-capsule data); it returns true when it
	// handled (or deliberately ignored) the command.
	OnIO func(fc *fakeConn, cmd *nvme.Command, data []byte) bool
	// Discovery entries served for LID 70h; GenctrBumps makes GENCTR change
	// on that many header reads after the first full read.
	Discovery   []nvme.DiscoveryLogEntry
	GenctrBumps int
}

// fakeStats counts PDUs of interest, under fakeTarget.mu.
type fakeStats struct {
	r2t, h2c, c2h, icdWrites int
	maxInflight              int // most I/O commands in flight on one queue
}

func (f *fakeTarget) statsSnapshot() fakeStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

type fakeCtrl struct {
	cntlid             uint16
	cc, csts           uint32
	kato               uint32
	aer                *fakeConn // connection holding the outstanding AER
	aerCID             uint16
	aerSet             bool
	keepAlives, queues int
	genctr             uint64
	bumps              int
}

func newFakeTarget(t testing.TB, cfg fakeConfig) *fakeTarget {
	t.Helper()
	if cfg.SubNQN == "" {
		cfg.SubNQN = "nqn.2026-01.io.basalt:test"
	}
	if cfg.MAXH2CDATA == 0 {
		cfg.MAXH2CDATA = 64 << 10
	}
	if cfg.IOCCSZ == 0 {
		cfg.IOCCSZ = 4 + 4096/16 // 4 KiB in-capsule data, like SPDK
	}
	if cfg.MQES == 0 {
		cfg.MQES = 127
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 4096
	}
	if cfg.Blocks == 0 {
		cfg.Blocks = 1 << 16
	}
	if cfg.ANAState == 0 {
		cfg.ANAState = nvme.ANAOptimized
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTarget{t: t, ln: ln, cfg: cfg, blocks: map[uint64][]byte{}, nextCNTLID: 1, ctrls: map[uint16]*fakeCtrl{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *fakeTarget) addr() string { return f.ln.Addr().String() }

func (f *fakeTarget) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		fc := &fakeConn{tgt: f, c: c, r: bufio.NewReader(c), inflight: map[uint16]bool{}, writes: map[uint16]*fakeWrite{}}
		f.mu.Lock()
		f.conns = append(f.conns, fc)
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			fc.serve()
		}()
	}
}

func (f *fakeTarget) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// violation records a host behaviour the spec or Linux would not show.
func (f *fakeTarget) violation(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.violations = append(f.violations, fmt.Sprintf(format, args...))
}

func (f *fakeTarget) checkClean(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.violations {
		t.Errorf("host violation seen by the fake target: %s", v)
	}
}

func (f *fakeTarget) record(qid uint16, s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trace = append(f.trace, fmt.Sprintf("%d:%s", qid, s))
}

func (f *fakeTarget) traceSnapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.trace...)
}

// fakeConn is one accepted connection; serve runs on one goroutine, sends
// are serialized by wmu.
type fakeConn struct {
	tgt      *fakeTarget
	c        net.Conn
	r        *bufio.Reader
	wmu      sync.Mutex
	hd, dd   bool
	qid      uint16
	ctrl     *fakeCtrl
	sqhd     uint16
	sqsize   uint16
	inflight map[uint16]bool       // CIDs seen and not yet answered
	writes   map[uint16]*fakeWrite // writes waiting for H2CData, by CID
	nextTTAG uint16
	// cids records every CID received, for CID-layout tests.
	cids []uint16
}

type fakeWrite struct {
	cmd    nvme.Command
	data   []byte
	ttag   uint16
	r2tEnd uint32 // end of the current R2T
	got    uint32
}

func (fc *fakeConn) hdgstLen() int {
	if fc.hd {
		return 4
	}
	return 0
}

func (fc *fakeConn) ddgstLen() int {
	if fc.dd {
		return 4
	}
	return 0
}

func (fc *fakeConn) serve() {
	defer fc.c.Close()
	if err := fc.handshake(); err != nil {
		return
	}
	for {
		if err := fc.readPDU(); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
				fc.tgt.violation("qid %d: %v", fc.qid, err)
			}
			return
		}
	}
}

func (fc *fakeConn) handshake() error {
	var b [nvme.ICReqSize]byte
	if _, err := io.ReadFull(fc.r, b[:]); err != nil {
		return err
	}
	ch := nvme.DecodeCommonHeader(b[:])
	req := nvme.DecodeICReq(b[:])
	if ch.Type != nvme.PDUICReq || ch.HLEN != 128 || ch.PLEN != 128 || req.PFV != 0 || req.HPDA != 0 || req.MAXR2T != 0 {
		fc.tgt.violation("bad ICReq %+v %+v", ch, req)
	}
	for _, v := range b[16:] {
		if v != 0 {
			fc.tgt.violation("ICReq reserved bytes not zero")
			break
		}
	}
	fc.hd, fc.dd = req.DGST&nvme.DigestHeader != 0, req.DGST&nvme.DigestData != 0
	resp := nvme.ICResp{PFV: 0, CPDA: 0, DGST: req.DGST, MAXH2CDATA: fc.tgt.cfg.MAXH2CDATA}
	if fc.tgt.cfg.ICResp != nil {
		fc.tgt.cfg.ICResp(&resp)
	}
	resp.Encode(b[:])
	return fc.send(b[:])
}

func (fc *fakeConn) send(parts ...[]byte) error {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	for _, p := range parts {
		if _, err := fc.c.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// readPDU reads one host PDU, checks its framing and digests, and handles it.
func (fc *fakeConn) readPDU() error {
	var hdr [nvme.CapsuleCmdHLEN + 4]byte
	if _, err := io.ReadFull(fc.r, hdr[:8]); err != nil {
		return err
	}
	ch := nvme.DecodeCommonHeader(hdr[:])
	hlen, ok := nvme.HeaderLength(ch.Type)
	if !ok || (ch.Type != nvme.PDUCapsuleCmd && ch.Type != nvme.PDUH2CData) || int(ch.HLEN) != hlen {
		return fmt.Errorf("unexpected PDU from host: %s", describePDU(ch))
	}
	if ch.Flags&nvme.FlagHDGSTF != 0 != fc.hd {
		fc.tgt.violation("qid %d: %v HDGSTF %v, negotiated %v", fc.qid, ch.Type, ch.Flags&1 != 0, fc.hd)
	}
	if _, err := io.ReadFull(fc.r, hdr[8:hlen+fc.hdgstLen()]); err != nil {
		return err
	}
	if fc.hd && nvme.Digest(hdr[:hlen]) != binary.LittleEndian.Uint32(hdr[hlen:]) {
		fc.tgt.violation("qid %d: bad header digest on %v", fc.qid, ch.Type)
	}
	var data []byte
	if ch.PDO != 0 {
		if int(ch.PDO) != hlen+fc.hdgstLen() {
			fc.tgt.violation("qid %d: %v PDO %d, want %d", fc.qid, ch.Type, ch.PDO, hlen+fc.hdgstLen())
		}
		n := int(ch.PLEN) - int(ch.PDO) - fc.ddgstLen()
		if n <= 0 {
			return fmt.Errorf("PLEN %d leaves no data", ch.PLEN)
		}
		if ch.Flags&nvme.FlagDDGSTF != 0 != fc.dd {
			fc.tgt.violation("qid %d: %v DDGSTF %v, negotiated %v", fc.qid, ch.Type, ch.Flags&2 != 0, fc.dd)
		}
		data = make([]byte, n+fc.ddgstLen())
		if _, err := io.ReadFull(fc.r, data); err != nil {
			return err
		}
		if fc.dd && nvme.Digest(data[:n]) != binary.LittleEndian.Uint32(data[n:]) {
			fc.tgt.violation("qid %d: bad data digest on %v", fc.qid, ch.Type)
		}
		data = data[:n]
	} else if ch.PLEN != uint32(hlen+fc.hdgstLen()) {
		fc.tgt.violation("qid %d: %v without data has PLEN %d", fc.qid, ch.Type, ch.PLEN)
	} else if ch.Flags&nvme.FlagDDGSTF != 0 {
		fc.tgt.violation("qid %d: DDGSTF on a PDU without data", fc.qid)
	}
	if ch.Type == nvme.PDUH2CData {
		return fc.handleH2CData(ch, nvme.DecodeDataHeader(hdr[:]), data)
	}
	var cmd nvme.Command
	copy(cmd[:], hdr[8:72])
	return fc.handleCapsule(&cmd, data)
}

// handleCapsule checks the SGL and CID of a command and dispatches it.
func (fc *fakeConn) handleCapsule(cmd *nvme.Command, icd []byte) error {
	cid := cmd.CID()
	if fc.inflight[cid] {
		fc.tgt.violation("qid %d: CID %#04x reused while in flight", fc.qid, cid)
	}
	fc.inflight[cid] = true
	fc.tgt.mu.Lock()
	fc.cids = append(fc.cids, cid)
	if fc.qid != 0 {
		fc.tgt.stats.maxInflight = max(fc.tgt.stats.maxInflight, len(fc.inflight))
	}
	if fc.qid != 0 && cmd.Opcode() == nvme.IOWrite && len(icd) > 0 {
		fc.tgt.stats.icdWrites++
	}
	fc.tgt.mu.Unlock()
	if fc.qid != 0 && len(fc.inflight) > int(fc.sqsize)+1 {
		fc.tgt.violation("qid %d: %d commands in flight, SQSIZE is %d", fc.qid, len(fc.inflight), fc.sqsize)
	}
	if cmd.Flags()&0xC0 != nvme.PSDTSGL {
		fc.tgt.violation("qid %d: CID %#04x PSDT is not SGL (flags %#x)", fc.qid, cid, cmd.Flags())
	}
	sgl, length := cmd.SGLIdentifier(), cmd.SGLLength()
	switch {
	case len(icd) > 0:
		limit := int(fc.tgt.cfg.IOCCSZ)*16 - 64
		if fc.qid == 0 || cmd.Opcode() == nvme.OpcodeFabrics {
			limit = nvme.AdminICDSize
		}
		if sgl != nvme.SGLDataBlockOffset || int(length) != len(icd) || cmd.SGLAddress() != 0 || len(icd) > limit {
			fc.tgt.violation("qid %d: in-capsule data %d bytes with SGL %#x len %d addr %d (limit %d)",
				fc.qid, len(icd), sgl, length, cmd.SGLAddress(), limit)
		}
	case sgl != nvme.SGLTransportDataBlock || cmd.SGLAddress() != 0:
		fc.tgt.violation("qid %d: command %#x without in-capsule data uses SGL %#x", fc.qid, cmd.Opcode(), sgl)
	}
	if fc.qid != 0 && fc.ctrl != nil && cmd.Opcode() != nvme.OpcodeFabrics {
		fc.tgt.record(fc.qid, ioNames[cmd.Opcode()])
		if h := fc.tgt.cfg.OnIO; h != nil && h(fc, cmd, icd) {
			return nil
		}
		if (cmd.Opcode() == nvme.IOWrite || cmd.Opcode() == nvme.IODatasetMgmt) && len(icd) == 0 && length > 0 {
			return fc.startWrite(cmd, int(length))
		}
	}
	return fc.execute(cmd, icd)
}

// startWrite solicits the data of a write with R2Ts of R2TChunk bytes.
func (fc *fakeConn) startWrite(cmd *nvme.Command, n int) error {
	fc.nextTTAG++
	w := &fakeWrite{cmd: *cmd, data: make([]byte, n), ttag: fc.nextTTAG}
	fc.writes[cmd.CID()] = w
	return fc.nextR2T(w)
}

func (fc *fakeConn) nextR2T(w *fakeWrite) error {
	chunk := fc.tgt.cfg.R2TChunk
	if chunk == 0 {
		chunk = len(w.data)
	}
	n := min(chunk, len(w.data)-int(w.got))
	w.r2tEnd = w.got + uint32(n)
	fc.tgt.mu.Lock()
	fc.tgt.stats.r2t++
	fc.tgt.mu.Unlock()
	return fc.sendR2T(w.cmd.CID(), w.ttag, w.got, uint32(n))
}

func (fc *fakeConn) handleH2CData(ch nvme.CommonHeader, dh nvme.DataHeader, data []byte) error {
	w := fc.writes[dh.CCCID]
	switch {
	case w == nil:
		return fmt.Errorf("H2CData for CID %#04x without R2T", dh.CCCID)
	case dh.TTAG != w.ttag || dh.DATAO != w.got || dh.DATAL != uint32(len(data)):
		return fmt.Errorf("H2CData %+v, want TTAG %d DATAO %d DATAL %d", dh, w.ttag, w.got, len(data))
	case dh.DATAL > fc.tgt.cfg.MAXH2CDATA:
		fc.tgt.violation("H2CData of %d bytes exceeds MAXH2CDATA %d", dh.DATAL, fc.tgt.cfg.MAXH2CDATA)
	case w.got+dh.DATAL > w.r2tEnd:
		return fmt.Errorf("H2CData beyond the R2T")
	}
	copy(w.data[w.got:], data)
	w.got += dh.DATAL
	fc.tgt.mu.Lock()
	fc.tgt.stats.h2c++
	fc.tgt.mu.Unlock()
	last := ch.Flags&nvme.FlagLastPDU != 0
	if last != (w.got == w.r2tEnd) {
		fc.tgt.violation("H2CData LAST_PDU %v at %d of R2T ending %d", last, w.got, w.r2tEnd)
	}
	if w.got < w.r2tEnd {
		return nil
	}
	if int(w.got) < len(w.data) {
		return fc.nextR2T(w)
	}
	delete(fc.writes, dh.CCCID)
	return fc.execute(&w.cmd, w.data)
}

// sendResp sends a CapsuleResp and retires the CID.
func (fc *fakeConn) sendResp(cid uint16, st nvme.Status, dw0, dw1 uint32) error {
	delete(fc.inflight, cid)
	fc.sqhd = (fc.sqhd + 1) % (fc.sqsize + 1)
	b := make([]byte, 24+fc.hdgstLen())
	ch := nvme.CommonHeader{Type: nvme.PDUCapsuleResp, HLEN: 24, PLEN: uint32(len(b))}
	if fc.hd {
		ch.Flags = nvme.FlagHDGSTF
	}
	ch.Encode(b)
	cpl := nvme.Completion{DW0: dw0, DW1: dw1, SQHD: fc.sqhd, SQID: fc.qid, CID: cid, Status: st}
	cpl.Encode(b[8:])
	fc.digestHeader(b)
	return fc.send(b)
}

func (fc *fakeConn) digestHeader(b []byte) {
	if fc.hd {
		binary.LittleEndian.PutUint32(b[24:], nvme.Digest(b[:24]))
	}
}

// sendC2H sends one C2HData PDU; corrupt flips the data digest.
func (fc *fakeConn) sendC2H(cid uint16, offset uint32, data []byte, flags uint8, corrupt bool) error {
	hl := 24 + fc.hdgstLen()
	b := make([]byte, hl)
	ch := nvme.CommonHeader{Type: nvme.PDUC2HData, Flags: flags, HLEN: 24, PDO: uint8(hl),
		PLEN: uint32(hl + len(data) + fc.ddgstLen())}
	if fc.hd {
		ch.Flags |= nvme.FlagHDGSTF
	}
	if fc.dd {
		ch.Flags |= nvme.FlagDDGSTF
	}
	ch.Encode(b)
	nvme.DataHeader{CCCID: cid, DATAO: offset, DATAL: uint32(len(data))}.Encode(b)
	fc.digestHeader(b)
	fc.tgt.mu.Lock()
	fc.tgt.stats.c2h++
	fc.tgt.mu.Unlock()
	parts := [][]byte{b, data}
	if fc.dd {
		d := make([]byte, 4)
		binary.LittleEndian.PutUint32(d, nvme.Digest(data))
		if corrupt {
			d[0] ^= 0xFF
		}
		parts = append(parts, d)
	}
	return fc.send(parts...)
}

// sendData sends read data in C2HChunk pieces, then the completion (or the
// SUCCESS flag on the last piece).
func (fc *fakeConn) sendData(cid uint16, data []byte) error {
	chunk := fc.tgt.cfg.C2HChunk
	if chunk == 0 {
		chunk = len(data)
	}
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		var flags uint8
		if end == len(data) {
			flags = nvme.FlagLastPDU
			if fc.tgt.cfg.UseSuccess {
				flags |= nvme.FlagSuccess
			}
		}
		if err := fc.sendC2H(cid, uint32(off), data[off:end], flags, false); err != nil {
			return err
		}
	}
	if fc.tgt.cfg.UseSuccess {
		delete(fc.inflight, cid)
		fc.sqhd = (fc.sqhd + 1) % (fc.sqsize + 1)
		return nil
	}
	return fc.sendResp(cid, nvme.StatusSuccess, 0, 0)
}

func (fc *fakeConn) sendR2T(cid, ttag uint16, off, n uint32) error {
	b := make([]byte, 24+fc.hdgstLen())
	ch := nvme.CommonHeader{Type: nvme.PDUR2T, HLEN: 24, PLEN: uint32(len(b))}
	if fc.hd {
		ch.Flags = nvme.FlagHDGSTF
	}
	ch.Encode(b)
	nvme.DataHeader{CCCID: cid, TTAG: ttag, DATAO: off, DATAL: n}.Encode(b)
	fc.digestHeader(b)
	return fc.send(b)
}

func (fc *fakeConn) sendTermReq(fes nvme.FES, fei uint32, offending []byte) error {
	b := make([]byte, nvme.TermReqHLEN+nvme.TermReqMaxData)
	n := nvme.EncodeTermReq(b, nvme.PDUC2HTermReq, nvme.TermReq{FES: fes, FEI: fei}, offending)
	return fc.send(b[:n])
}
