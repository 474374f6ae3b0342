package tcp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/nvme"
	"basalt/target"
)

// This file holds the test fixtures: a fake core (fakeCore) with a tiny
// command set, a raw-PDU host (testHost), and a goroutine leak check.

const (
	fakeBlockSize = 512
	fakeDiskSize  = 4 << 20
	// Fake opcodes beyond the NVM command set.
	opFailInit    nvme.Opcode = 0xC0 // Init fails with Invalid Opcode
	opIdentifyDW0 nvme.Opcode = 0xC2 // C2H 4096 bytes, completes with DW0 = 1
)

// fakeCore is a queueCore with a memory disk. Commands (all with SGLs):
// Connect (Fabrics), Write, Read, Flush, opFailInit, opIdentifyDW0.
type fakeCore struct {
	ops target.QueueOps

	// Configuration, set before the queue starts.
	depth    int  // SQSIZE+1 after Connect; 0 means take it from Connect
	icdLimit int  // I/O queue in-capsule limit (default 4096)
	mts      int  // I/O queue max transfer (default 256 KiB)
	async    bool // Execute completes on another goroutine
	mixed    bool // every other Execute completes on another goroutine
	// lend makes DoneWithDataOnReturn report true for I/O commands that Execute
	// completes inline (neither async nor mixed nor held).
	lend     bool
	diskSize uint64
	// hold, when set, blocks every Execute until the channel is closed.
	hold atomic.Pointer[chan struct{}]
	// stall, when set, makes Execute itself wait until the channel is
	// closed, on the receive goroutine (a backend that makes its caller
	// wait).
	stall atomic.Pointer[chan struct{}]

	// completeOnRelease makes Release complete the last request that was
	// Init'd but not executed (a core that fails in-flight requests).
	completeOnRelease bool
	pending           atomic.Pointer[target.Request]
	// assoc is what Association returns once connected (default: the
	// core itself, one controller per connection).
	assoc any
	// oversize makes Init accept reads and writes 4 KiB larger than the
	// transport's buffer (a core bug).
	oversize bool

	// refs counts the requests Init accepted and not yet completed, as
	// the real core's namespace references: every path must bring it back
	// to zero, completing each request once (active).
	refs     atomic.Int64
	aborted  atomic.Int32
	activeMu sync.Mutex
	active   map[*target.Request]bool

	connected atomic.Bool
	qid       atomic.Uint32
	size      atomic.Int32
	released  atomic.Int32
	executed  atomic.Int32
	// lentWrites counts writes whose data was lent in place (Data has no
	// room beyond the transfer, unlike a slot buffer).
	lentWrites atomic.Int32
	inits      atomic.Int32
	running    sync.WaitGroup // async executions
	disk       []byte
	diskMu     sync.Mutex
}

func newFakeCore() *fakeCore {
	return &fakeCore{icdLimit: 4096, mts: 256 << 10, diskSize: fakeDiskSize}
}

func (c *fakeCore) QID() uint16     { return uint16(c.qid.Load()) }
func (c *fakeCore) Connected() bool { return c.connected.Load() }
func (c *fakeCore) Release() {
	c.released.Add(1)
	if r := c.pending.Swap(nil); r != nil && c.completeOnRelease && c.claim(r) {
		r.Cpl = nvme.Completion{CID: r.Cmd.CID(), Status: nvme.StatusAbortSQDeletion}
		c.ops.QueueResponse(r)
	}
}

// claim ends r's life in the core: true for the first completion of a
// request Init accepted, false for a later one (completeOnRelease and
// Abort may race).
func (c *fakeCore) claim(r *target.Request) bool {
	c.activeMu.Lock()
	was := c.active[r]
	delete(c.active, r)
	c.activeMu.Unlock()
	if was {
		c.refs.Add(-1)
	}
	return was
}

func (c *fakeCore) Abort(r *target.Request, st nvme.Status) {
	c.aborted.Add(1)
	if c.claim(r) {
		r.Cpl = nvme.Completion{CID: r.Cmd.CID(), SQID: c.QID(), Status: st}
		c.ops.QueueResponse(r)
	}
}

func (c *fakeCore) Association() any {
	switch {
	case !c.connected.Load():
		return nil
	case c.assoc != nil:
		return c.assoc
	}
	return c
}

func (c *fakeCore) Depth() int {
	if !c.connected.Load() {
		return 1
	}
	return int(c.size.Load())
}

func (c *fakeCore) InCapsuleDataLimit() int {
	if !c.connected.Load() || c.qid.Load() == 0 {
		return nvme.AdminICDSize
	}
	return c.icdLimit
}

func (c *fakeCore) MaxTransferSize() int {
	if !c.connected.Load() || c.qid.Load() == 0 {
		return nvme.AdminICDSize
	}
	return c.mts
}

func (c *fakeCore) fail(r *target.Request, st nvme.Status) bool {
	r.Cpl = nvme.Completion{CID: r.Cmd.CID(), SQID: c.QID(), Status: st}
	c.ops.QueueResponse(r)
	return false
}

func (c *fakeCore) Init(r *target.Request) bool {
	c.inits.Add(1)
	r.Dir, r.TransferLen, r.DataLen = target.DirNone, 0, 0
	var dir target.DataDir
	var want uint32
	switch op := r.Cmd.Opcode(); {
	case op == nvme.OpcodeFabrics && r.Cmd.FCType() == nvme.FCTypeConnect:
		dir, want = target.DirH2C, nvme.ConnectDataSize
	case op == nvme.IOWrite || op == nvme.IORead:
		dir, want = target.DirH2C, (uint32(r.Cmd.NLB())+1)*fakeBlockSize
		if op == nvme.IORead {
			dir = target.DirC2H
		}
		if r.Cmd.SLBA() > c.diskSize || r.Cmd.SLBA()*fakeBlockSize+uint64(want) > c.diskSize {
			return c.fail(r, nvme.StatusLBAOutOfRange)
		}
	case op == nvme.IOFlush:
	case op == opIdentifyDW0:
		dir, want = target.DirC2H, nvme.IdentifySize
	default:
		return c.fail(r, nvme.StatusInvalidOpcode)
	}
	if r.Cmd.SGLLength() != want {
		return c.fail(r, nvme.StatusDataSGLLengthInvalid)
	}
	if want > 0 {
		r.Dir, r.TransferLen = dir, want
		if c.oversize {
			r.TransferLen = uint32(cap(r.Data)) + 4096
		} else if int(want) > cap(r.Data) {
			return c.fail(r, nvme.StatusInternalError)
		}
	}
	c.activeMu.Lock()
	if c.active == nil {
		c.active = make(map[*target.Request]bool)
	}
	c.active[r] = true
	c.activeMu.Unlock()
	c.refs.Add(1)
	c.pending.Store(r)
	return true
}

func (c *fakeCore) Execute(r *target.Request) {
	if st := c.stall.Load(); st != nil {
		<-*st
	}
	n := c.executed.Add(1)
	c.pending.CompareAndSwap(r, nil)
	hold := c.hold.Load()
	if !c.async && hold == nil && (!c.mixed || n%2 == 1) {
		c.execute(r)
		return
	}
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		if hold != nil {
			<-*hold
		}
		c.execute(r)
	}()
}

func (c *fakeCore) DoneWithDataOnReturn(r *target.Request) bool {
	return c.lend && !c.async && !c.mixed && c.hold.Load() == nil && r.Cmd.Opcode() != nvme.OpcodeFabrics
}

// CompletesOnWorker: requests the fake runs on goroutines of its own (async
// mode) complete where blocking is allowed.
func (c *fakeCore) CompletesOnWorker(r *target.Request) bool { return c.async && c.hold.Load() == nil }

func (c *fakeCore) execute(r *target.Request) {
	r.Cpl = nvme.Completion{CID: r.Cmd.CID(), SQID: c.QID(), SQHD: 7}
	switch op := r.Cmd.Opcode(); op {
	case nvme.OpcodeFabrics:
		cc := r.Cmd.DecodeConnect()
		c.qid.Store(uint32(cc.QID))
		size := int32(cc.SQSIZE) + 1
		if c.depth > 0 {
			size = int32(c.depth)
		}
		c.size.Store(size)
		c.connected.Store(true)
		r.Cpl.SQID = cc.QID
		if cc.CATTR&nvme.CATTRDisableSQFlow != 0 {
			r.Cpl.SQHD = 0xFFFF
		}
	case nvme.IOWrite, nvme.IORead:
		off := r.Cmd.SLBA() * fakeBlockSize
		c.diskMu.Lock()
		if c.disk == nil { // allocated on first use: fuzzing makes many cores
			c.disk = make([]byte, c.diskSize)
		}
		if op == nvme.IOWrite {
			if cap(r.Data) == int(r.TransferLen) {
				c.lentWrites.Add(1) // the transport lent its read buffer
			}
			copy(c.disk[off:], r.Data[:r.TransferLen])
		} else {
			copy(r.Data[:r.TransferLen], c.disk[off:])
			r.DataLen = r.TransferLen
		}
		c.diskMu.Unlock()
	case opIdentifyDW0:
		for i := range r.Data[:r.TransferLen] {
			r.Data[i] = byte(i)
		}
		r.DataLen = r.TransferLen
		r.Cpl.DW0 = 1
	}
	if c.claim(r) {
		c.ops.QueueResponse(r)
	}
}

// coreSource hands a fresh fakeCore to each connection and remembers them.
type coreSource struct {
	configure func(*fakeCore)
	cores     chan *fakeCore
}

func newCoreSource(configure func(*fakeCore)) *coreSource {
	return &coreSource{configure: configure, cores: make(chan *fakeCore, 16)}
}

func (cs *coreSource) factory(ops target.QueueOps) queueCore {
	c := newFakeCore()
	c.ops = ops
	if cs.configure != nil {
		cs.configure(c)
	}
	cs.cores <- c
	return c
}

// testOptions are Options for tests: quiet logger, small limits.
func testOptions() Options {
	return Options{Logger: slog.New(slog.DiscardHandler)}
}

// server is a Listener on loopback with fake cores.
type server struct {
	t      testing.TB
	l      *Listener
	src    *coreSource
	served chan error
}

func startServer(t testing.TB, opts Options, configure func(*fakeCore)) *server {
	t.Helper()
	src := newCoreSource(configure)
	l, err := listen("127.0.0.1:0", src.factory, opts)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &server{t: t, l: l, src: src, served: make(chan error, 1)}
	go func() { s.served <- l.Serve() }()
	t.Cleanup(func() {
		l.Close()
		l.Wait()
		if err := <-s.served; err != ErrServerClosed {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return s
}

// dial connects a raw host and returns it with the connection's fake core
// (created when the target accepts).
func (s *server) dial(t testing.TB) (*testHost, *fakeCore) {
	t.Helper()
	c, err := net.Dial("tcp", s.l.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	h := newTestHost(t, c)
	t.Cleanup(func() { c.Close() })
	select {
	case core := <-s.src.cores:
		return h, core
	case <-time.After(5 * time.Second):
		t.Fatal("target did not accept")
	}
	return nil, nil
}

// testHost speaks raw NVMe/TCP PDUs. Reads fail the test after a watchdog
// timeout instead of hanging.
type testHost struct {
	t            testing.TB
	c            net.Conn
	br           *bufio.Reader
	hdgst, ddgst bool
	nextCID      uint16
}

func newTestHost(t testing.TB, c net.Conn) *testHost {
	return &testHost{t: t, c: c, br: bufio.NewReaderSize(c, 256<<10)}
}

func (h *testHost) write(b []byte) {
	h.t.Helper()
	if _, err := h.c.Write(b); err != nil {
		h.t.Fatalf("host write: %v", err)
	}
}

// readFull reads exactly len(b) bytes, failing the test after 10 s.
func (h *testHost) readFull(b []byte) error {
	timer := time.AfterFunc(10*time.Second, func() { h.c.Close() })
	defer timer.Stop()
	_, err := io.ReadFull(h.br, b)
	return err
}

func (h *testHost) icreq(dgst uint8) nvme.ICResp {
	h.t.Helper()
	var b [nvme.ICReqSize]byte
	nvme.ICReq{DGST: dgst}.Encode(b[:])
	h.write(b[:])
	p := h.readPDU()
	if p.ch.Type != nvme.PDUICResp || p.ch.PLEN != nvme.ICReqSize || p.ch.HLEN != nvme.ICReqSize {
		h.t.Fatalf("want ICResp, got %+v", p.ch)
	}
	resp := nvme.DecodeICResp(p.hdr)
	h.hdgst = resp.DGST&nvme.DigestHeader != 0
	h.ddgst = resp.DGST&nvme.DigestData != 0
	return resp
}

// pdu is a PDU read by the host.
type pdu struct {
	ch   nvme.CommonHeader
	hdr  []byte // HLEN bytes
	data []byte
}

// readPDU reads one controller-to-host PDU and checks its framing and digests
// the way the Linux host does (nvme_tcp_recv_pdu in drivers/nvme/host/tcp.c).
func (h *testHost) readPDU() pdu {
	h.t.Helper()
	p, err := h.tryReadPDU()
	if err != nil {
		h.t.Fatalf("host read: %v", err)
	}
	return p
}

func (h *testHost) tryReadPDU() (pdu, error) {
	var chb [nvme.CommonHeaderSize]byte
	if err := h.readFull(chb[:]); err != nil {
		return pdu{}, err
	}
	ch := nvme.DecodeCommonHeader(chb[:])
	if ch.Type.HostToController() {
		return pdu{}, fmt.Errorf("host got host-to-controller PDU %v", ch.Type)
	}
	if ch.PLEN < uint32(ch.HLEN) || ch.PLEN > 16<<20 || ch.HLEN < nvme.CommonHeaderSize {
		return pdu{}, fmt.Errorf("bad PDU lengths %+v", ch)
	}
	rest := make([]byte, ch.PLEN)
	copy(rest, chb[:])
	if err := h.readFull(rest[nvme.CommonHeaderSize:]); err != nil {
		return pdu{}, err
	}
	p := pdu{ch: ch, hdr: rest[:ch.HLEN]}
	if ch.Type == nvme.PDUICResp || ch.Type == nvme.PDUC2HTermReq {
		p.data = rest[ch.HLEN:]
		return p, nil
	}
	if ch.HLEN != nvme.DataHLEN {
		return p, fmt.Errorf("pdu type %v has unexpected header length %d", ch.Type, ch.HLEN)
	}
	if (ch.Flags&nvme.FlagHDGSTF != 0) != h.hdgst {
		return p, fmt.Errorf("%v HDGSTF %v, negotiated %v", ch.Type, ch.Flags&nvme.FlagHDGSTF != 0, h.hdgst)
	}
	if h.hdgst && nvme.GetDigest(rest[ch.HLEN:]) != nvme.Digest(rest[:ch.HLEN]) {
		return p, fmt.Errorf("%v header digest mismatch", ch.Type)
	}
	if ch.Type != nvme.PDUC2HData {
		return p, nil
	}
	end := ch.PLEN
	if h.ddgst {
		if ch.Flags&nvme.FlagDDGSTF == 0 {
			return p, fmt.Errorf("C2HData without DDGSTF")
		}
		end -= nvme.DigestSize
		if nvme.GetDigest(rest[end:]) != nvme.Digest(rest[ch.PDO:end]) {
			return p, fmt.Errorf("C2HData data digest mismatch")
		}
	}
	p.data = rest[ch.PDO:end]
	return p, nil
}

// cmd returns a Command with a fresh CID, PSDT = SGL and the given SGL.
func (h *testHost) cmd(op nvme.Opcode, sglLen uint32, sglID uint8) nvme.Command {
	var c nvme.Command
	c.SetOpcode(op)
	c.SetFlags(nvme.PSDTSGL)
	c.SetCID(h.nextCID)
	h.nextCID++
	c.SetSGL(0, sglLen, sglID)
	return c
}

// capsule encodes a CapsuleCmd PDU with optional in-capsule data.
func (h *testHost) capsule(c *nvme.Command, icd []byte) []byte {
	b := make([]byte, nvme.CapsuleCmdHLEN+2*nvme.DigestSize+len(icd))
	n := nvme.EncodeCapsuleCmdHeader(b, c, len(icd), h.hdgst, h.ddgst)
	n += copy(b[n:], icd)
	if len(icd) > 0 && h.ddgst {
		nvme.PutDigest(b[n:], nvme.Digest(icd))
		n += nvme.DigestSize
	}
	return b[:n]
}

func (h *testHost) sendCapsule(c *nvme.Command, icd []byte) {
	h.t.Helper()
	h.write(h.capsule(c, icd))
}

// h2cData encodes an H2CData PDU.
func (h *testHost) h2cData(cccid, ttag uint16, datao uint32, data []byte, last bool) []byte {
	hl := nvme.DataHLEN
	var flags uint8
	if h.hdgst {
		hl += nvme.DigestSize
		flags |= nvme.FlagHDGSTF
	}
	if last {
		flags |= nvme.FlagLastPDU
	}
	plen := hl + len(data)
	if h.ddgst && len(data) > 0 {
		flags |= nvme.FlagDDGSTF
		plen += nvme.DigestSize
	}
	b := make([]byte, plen)
	nvme.EncodeDataHeader(b, nvme.PDUH2CData, flags, uint8(hl), uint32(plen),
		nvme.DataHeader{CCCID: cccid, TTAG: ttag, DATAO: datao, DATAL: uint32(len(data))})
	copy(b[hl:], data)
	if flags&nvme.FlagDDGSTF != 0 {
		nvme.PutDigest(b[hl+len(data):], nvme.Digest(data))
	}
	return b
}

// connect sends a Connect for qid with sqsize (0's based) and cattr and
// checks the success completion.
func (h *testHost) connect(qid, sqsize uint16, cattr uint8) nvme.Completion {
	h.t.Helper()
	c := h.cmd(nvme.OpcodeFabrics, nvme.ConnectDataSize, nvme.SGLDataBlockOffset)
	c.EncodeConnect(nvme.ConnectCmd{QID: qid, SQSIZE: sqsize, CATTR: cattr, KATO: 120000})
	var data [nvme.ConnectDataSize]byte
	(&nvme.ConnectData{CNTLID: 0xFFFF, SubNQN: "nqn.test:sub", HostNQN: "nqn.test:host"}).Encode(data[:])
	h.sendCapsule(&c, data[:])
	cpl := h.expectResp(c.CID())
	if !cpl.Status.Success() {
		h.t.Fatalf("Connect failed: %v", cpl.Status)
	}
	return cpl
}

// expectResp reads a CapsuleResp for cid.
func (h *testHost) expectResp(cid uint16) nvme.Completion {
	h.t.Helper()
	p := h.readPDU()
	if p.ch.Type != nvme.PDUCapsuleResp {
		h.t.Fatalf("want CapsuleResp for CID %d, got %v %+v", cid, p.ch.Type, p.ch)
	}
	cpl := nvme.DecodeCompletion(p.hdr[nvme.CommonHeaderSize:])
	if cpl.CID != cid {
		h.t.Fatalf("CapsuleResp CID %d, want %d", cpl.CID, cid)
	}
	return cpl
}

// expectR2T reads an R2T for cid.
func (h *testHost) expectR2T(cid uint16) nvme.DataHeader {
	h.t.Helper()
	p := h.readPDU()
	if p.ch.Type != nvme.PDUR2T {
		h.t.Fatalf("want R2T, got %v %+v", p.ch.Type, p.ch)
	}
	d := nvme.DecodeDataHeader(p.hdr)
	if d.CCCID != cid || p.ch.PDO != 0 {
		h.t.Fatalf("R2T %+v ch %+v, want CCCID %d", d, p.ch, cid)
	}
	return d
}

// expectTermReq reads a C2HTermReq and checks FES and FEI, then that the
// target closes the connection.
func (h *testHost) expectTermReq(fes nvme.FES, fei uint32) []byte {
	h.t.Helper()
	p := h.readPDU()
	if p.ch.Type != nvme.PDUC2HTermReq {
		h.t.Fatalf("want C2HTermReq, got %v %+v", p.ch.Type, p.ch)
	}
	if p.ch.HLEN != nvme.TermReqHLEN || p.ch.Flags != 0 || p.ch.PDO != 0 || p.ch.PLEN > nvme.TermReqMaxPLEN {
		h.t.Fatalf("malformed C2HTermReq header %+v", p.ch)
	}
	tr := nvme.DecodeTermReq(p.hdr)
	if tr.FES != fes || tr.FEI != fei {
		h.t.Fatalf("C2HTermReq FES %#x FEI %d, want FES %#x FEI %d", uint16(tr.FES), tr.FEI, uint16(fes), fei)
	}
	h.expectClosed()
	return p.data
}

// expectClosed checks that the target closes the connection.
func (h *testHost) expectClosed() {
	h.t.Helper()
	var b [1]byte
	if err := h.readFull(b[:]); err == nil {
		h.t.Fatalf("connection still open, read %#x", b[0])
	}
}

// readData reads C2HData PDUs for cid until LAST_PDU and returns the data
// and whether SUCCESS was set; it checks DATAO is contiguous.
func (h *testHost) readData(cid uint16) ([]byte, bool) {
	h.t.Helper()
	var data []byte
	for {
		p := h.readPDU()
		if p.ch.Type != nvme.PDUC2HData {
			h.t.Fatalf("want C2HData, got %v", p.ch.Type)
		}
		d := nvme.DecodeDataHeader(p.hdr)
		if d.CCCID != cid || int(d.DATAO) != len(data) || int(d.DATAL) != len(p.data) {
			h.t.Fatalf("C2HData %+v after %d bytes, want CID %d", d, len(data), cid)
		}
		data = append(data, p.data...)
		if p.ch.Flags&nvme.FlagSuccess != 0 && p.ch.Flags&nvme.FlagLastPDU == 0 {
			h.t.Fatalf("SUCCESS without LAST_PDU")
		}
		if p.ch.Flags&nvme.FlagLastPDU != 0 {
			return data, p.ch.Flags&nvme.FlagSuccess != 0
		}
	}
}

func rwCmd(h *testHost, op nvme.Opcode, slba uint64, blocks int, sglID uint8) nvme.Command {
	c := h.cmd(op, uint32(blocks*fakeBlockSize), sglID)
	c.SetSLBA(slba)
	c.SetCDW(12, uint32(blocks-1))
	return c
}

// writeR2T writes data at slba through the R2T path, in H2CData PDUs of at
// most chunk bytes, and checks the completion.
func (h *testHost) writeR2T(slba uint64, data []byte, chunk int) {
	h.t.Helper()
	c := rwCmd(h, nvme.IOWrite, slba, len(data)/fakeBlockSize, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	r2t := h.expectR2T(c.CID())
	if r2t.DATAO != 0 || int(r2t.DATAL) != len(data) {
		h.t.Fatalf("R2T %+v for %d bytes", r2t, len(data))
	}
	var buf bytes.Buffer
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		buf.Write(h.h2cData(c.CID(), r2t.TTAG, uint32(off), data[off:end], end == len(data)))
	}
	h.write(buf.Bytes())
	if cpl := h.expectResp(c.CID()); !cpl.Status.Success() {
		h.t.Fatalf("write: %v", cpl.Status)
	}
}

// read reads blocks at slba and returns the data.
func (h *testHost) read(slba uint64, blocks int) []byte {
	h.t.Helper()
	c := rwCmd(h, nvme.IORead, slba, blocks, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	data, success := h.readData(c.CID())
	if !success {
		if cpl := h.expectResp(c.CID()); !cpl.Status.Success() {
			h.t.Fatalf("read: %v", cpl.Status)
		}
	}
	return data
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>9)
	}
	return b
}

// checkNoGoroutineLeaks fails t if goroutines started during the test are
// still running when it ends (after the test's own cleanups).
func checkNoGoroutineLeaks(t testing.TB) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.After(5 * time.Second)
		for runtime.NumGoroutine() > base {
			select {
			case <-deadline:
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Errorf("goroutine leak: %d running, %d before\n%s", runtime.NumGoroutine(), base,
					filterStacks(string(buf[:n])))
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
}

func filterStacks(s string) string {
	var keep []string
	for _, g := range strings.Split(s, "\n\n") {
		if strings.Contains(g, "target/tcp") {
			keep = append(keep, g)
		}
	}
	return strings.Join(keep, "\n\n")
}

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

// sleepBriefly yields for about a millisecond (tests may not use time.Sleep
// under the project's lint rules for target/).
func sleepBriefly() { <-time.After(time.Millisecond) }

func dialTCP(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }
