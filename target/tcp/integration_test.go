package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
	"basalt/target"
)

// The real core (target.Target) behind this transport, driven with raw PDUs
// in the order the Linux host uses when it runs `nvme connect`
// (drivers/nvme/host/tcp.c nvme_tcp_setup_ctrl and core.c): ICReq, admin
// Connect, Property Get CAP/VS, Property Set CC, Property Get CSTS, Identify
// Controller, Set Features Number of Queues, Identify namespace
// list/namespace/descriptors, then an I/O queue connection doing writes
// (in-capsule and R2T) and reads.

const (
	itSubNQN  = "nqn.2026-11.io.basalt:it"
	itHostNQN = "nqn.2014-08.org.nvmexpress:uuid:it-host"
	itSize    = 16 << 20
	itLBA     = 512
)

type realTarget struct {
	t  *target.Target
	l  *Listener
	be *backend.Memory
}

func startRealTarget(t *testing.T) *realTarget {
	t.Helper()
	be, err := backend.NewMemory(itSize, itLBA)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := target.New(target.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tg.AddSubsystem(target.SubsystemConfig{NQN: itSubNQN, AllowAnyHost: true,
		Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: be, NGUID: [16]byte{1, 2, 3}}}})
	if err != nil {
		t.Fatal(err)
	}
	port, err := tg.AddPort(target.PortConfig{ID: 1, TRADDR: "127.0.0.1", TRSVCID: "4420"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(tg, port, "127.0.0.1:0", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve() }()
	t.Cleanup(func() {
		if err := l.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
		tg.Close()
	})
	return &realTarget{t: tg, l: l, be: be}
}

func (rt *realTarget) dial(t *testing.T, dgst uint8) *testHost {
	t.Helper()
	conn, err := dialTCP(rt.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h := newTestHost(t, conn)
	h.icreq(dgst)
	return h
}

// connectCtrl sends a Connect and returns the CNTLID from DW0.
func (h *testHost) connectCtrl(qid, sqsize, cntlid uint16, cattr uint8) uint16 {
	h.t.Helper()
	c := h.cmd(nvme.OpcodeFabrics, nvme.ConnectDataSize, nvme.SGLDataBlockOffset)
	c.EncodeConnect(nvme.ConnectCmd{QID: qid, SQSIZE: sqsize, KATO: 30000, CATTR: cattr})
	var data [nvme.ConnectDataSize]byte
	(&nvme.ConnectData{HostID: [16]byte{9}, CNTLID: cntlid, SubNQN: itSubNQN, HostNQN: itHostNQN}).Encode(data[:])
	h.sendCapsule(&c, data[:])
	cpl := h.expectResp(c.CID())
	if !cpl.Status.Success() {
		h.t.Fatalf("Connect QID %d: %v (DW0 %#x)", qid, cpl.Status, cpl.DW0)
	}
	return uint16(cpl.DW0)
}

// do sends a command without data and returns its completion.
func (h *testHost) do(c *nvme.Command) nvme.Completion {
	h.t.Helper()
	h.sendCapsule(c, nil)
	return h.expectResp(c.CID())
}

func (h *testHost) propertyGet(ofst uint32, size8 bool) uint64 {
	h.t.Helper()
	c := h.cmd(nvme.OpcodeFabrics, 0, nvme.SGLTransportDataBlock)
	c.SetFCType(nvme.FCTypePropertyGet)
	if size8 {
		c[nvme.PropOffsetATTRIB] = nvme.PropSize8
	}
	binary.LittleEndian.PutUint32(c[nvme.PropOffsetOFST:], ofst)
	cpl := h.do(&c)
	if !cpl.Status.Success() {
		h.t.Fatalf("Property Get %#x: %v", ofst, cpl.Status)
	}
	return uint64(cpl.DW0) | uint64(cpl.DW1)<<32
}

func (h *testHost) propertySet(ofst, value uint32) {
	h.t.Helper()
	c := h.cmd(nvme.OpcodeFabrics, 0, nvme.SGLTransportDataBlock)
	c.SetFCType(nvme.FCTypePropertySet)
	binary.LittleEndian.PutUint32(c[nvme.PropOffsetOFST:], ofst)
	binary.LittleEndian.PutUint32(c[nvme.PropOffsetVALUE:], value)
	if cpl := h.do(&c); !cpl.Status.Success() {
		h.t.Fatalf("Property Set %#x: %v", ofst, cpl.Status)
	}
}

// identify runs Identify with cns/nsid and returns the 4096 bytes.
func (h *testHost) identify(cns uint8, nsid uint32) []byte {
	h.t.Helper()
	c := h.cmd(nvme.AdminIdentify, nvme.IdentifySize, nvme.SGLTransportDataBlock)
	c.SetNSID(nsid)
	c.SetCDW(10, uint32(cns))
	h.sendCapsule(&c, nil)
	data, success := h.readData(c.CID())
	if !success {
		if cpl := h.expectResp(c.CID()); !cpl.Status.Success() {
			h.t.Fatalf("Identify CNS %d: %v", cns, cpl.Status)
		}
	}
	if len(data) != nvme.IdentifySize {
		h.t.Fatalf("Identify CNS %d returned %d bytes", cns, len(data))
	}
	return data
}

func TestLinuxConnectSequenceAgainstRealCore(t *testing.T) {
	checkNoGoroutineLeaks(t)
	rt := startRealTarget(t)
	admin, cntlid := linuxAdminSetup(t, rt)
	// I/O queue on its own connection, with both digests and SQ flow
	// control disabled (so reads end with a C2HData SUCCESS).
	io := rt.dial(t, nvme.DigestHeader|nvme.DigestData)
	if got := io.connectCtrl(1, 127, cntlid, nvme.CATTRDisableSQFlow); got != cntlid {
		t.Fatalf("I/O Connect CNTLID %d, want %d", got, cntlid)
	}
	checkWritesAndReads(t, rt, io)
	checkCommandErrors(t, admin, io)
	checkBurst(t, io)
	// Closing the admin connection destroys the controller; the core then
	// closes the I/O queue too.
	admin.c.Close()
	io.expectClosed()
}

// linuxAdminSetup runs the admin queue part of `nvme connect` (the Linux
// host's nvme_tcp_alloc_admin_queue, nvmf_connect_admin_queue,
// nvme_enable_ctrl, nvme_init_ctrl_finish, nvme_set_queue_count,
// nvme_scan_work in drivers/nvme/host) and returns the admin host and the
// CNTLID.
func linuxAdminSetup(t *testing.T, rt *realTarget) (*testHost, uint16) {
	admin := rt.dial(t, 0)
	cntlid := admin.connectCtrl(0, 31, nvme.CNTLIDDynamic, 0)
	cap := admin.propertyGet(nvme.PropCAP, true)
	if mqes := cap & 0xFFFF; mqes != target.DefaultMQES {
		t.Fatalf("CAP.MQES %d", mqes)
	}
	if vs := admin.propertyGet(nvme.PropVS, false); vs != nvme.VS13 {
		t.Fatalf("VS %#x", vs)
	}
	// CC: IOCQES 4, IOSQES 6, CSS NVM, MPS 0; first without EN, then EN.
	const cc = 4<<20 | 6<<16
	admin.propertySet(nvme.PropCC, cc)
	admin.propertySet(nvme.PropCC, cc|1)
	for i := 0; admin.propertyGet(nvme.PropCSTS, false)&1 == 0; i++ {
		if i > 1000 {
			t.Fatal("CSTS.RDY never set")
		}
		sleepBriefly()
	}
	idc := nvme.UnmarshalIdentifyController(admin.identify(nvme.CNSController, 0))
	if idc.CNTLID != cntlid || idc.SGLS&3 == 0 || idc.IOCCSZ < 4 || idc.IORCSZ != 1 || idc.ICDOFF != 0 || idc.SubNQN != itSubNQN {
		t.Fatalf("Identify Controller %+v (connect CNTLID %d)", idc, cntlid)
	}
	nq := admin.cmd(nvme.AdminSetFeatures, 0, nvme.SGLTransportDataBlock)
	nq.SetCDW(10, nvme.FeatNumberOfQueues)
	nq.SetCDW(11, 3|3<<16)
	if cpl := admin.do(&nq); !cpl.Status.Success() {
		t.Fatalf("Set Features Number of Queues: %v", cpl.Status)
	}
	if list := admin.identify(nvme.CNSActiveNSList, 0); binary.LittleEndian.Uint32(list) != 1 {
		t.Fatalf("active namespace list %x", list[:8])
	}
	idns := nvme.UnmarshalIdentifyNamespace(admin.identify(nvme.CNSNamespace, 1))
	if idns.NSZE != itSize/itLBA || idns.LBADS != 9 {
		t.Fatalf("Identify Namespace %+v", idns)
	}
	admin.identify(nvme.CNSNSDescriptorList, 1)
	return admin, cntlid
}

// checkWritesAndReads writes 4 KiB in-capsule and 128 KiB through R2T, then
// reads both back over the wire and from the backend.
func checkWritesAndReads(t *testing.T, rt *realTarget, io *testHost) {
	small := pattern(4096, 1)
	w := rwCmd(io, nvme.IOWrite, 0, 8, nvme.SGLDataBlockOffset)
	w.SetNSID(1)
	io.sendCapsule(&w, small)
	if cpl := io.expectResp(w.CID()); !cpl.Status.Success() {
		t.Fatalf("in-capsule write: %v", cpl.Status)
	}
	big := pattern(128<<10, 2) // MDTS 5: 128 KiB
	w = rwCmd(io, nvme.IOWrite, 1000, len(big)/itLBA, nvme.SGLTransportDataBlock)
	w.SetNSID(1)
	io.sendCapsule(&w, nil)
	r2t := io.expectR2T(w.CID())
	if r2t.DATAL != uint32(len(big)) {
		t.Fatalf("R2T %+v", r2t)
	}
	var h2c bytes.Buffer
	for off := 0; off < len(big); off += 32 << 10 {
		h2c.Write(io.h2cData(w.CID(), r2t.TTAG, uint32(off), big[off:off+32<<10], off+32<<10 == len(big)))
	}
	io.write(h2c.Bytes())
	if cpl := io.expectResp(w.CID()); !cpl.Status.Success() {
		t.Fatalf("R2T write: %v", cpl.Status)
	}
	for _, rd := range []struct {
		lba  uint64
		want []byte
	}{{0, small}, {1000, big}} {
		r := rwCmd(io, nvme.IORead, rd.lba, len(rd.want)/itLBA, nvme.SGLTransportDataBlock)
		r.SetNSID(1)
		io.sendCapsule(&r, nil)
		data, success := io.readData(r.CID())
		if !success {
			t.Fatalf("read on a queue without SQ flow control ended without SUCCESS")
		}
		if !bytes.Equal(data, rd.want) {
			t.Fatalf("read at LBA %d differs", rd.lba)
		}
		stored := make([]byte, len(rd.want))
		if err := rt.be.ReadAt(context.Background(), stored, int64(rd.lba)*itLBA); err != nil || !bytes.Equal(stored, rd.want) {
			t.Fatalf("backend at LBA %d differs (%v)", rd.lba, err)
		}
	}

}

// checkCommandErrors: errors from the core's own checks keep the queues
// usable.
func checkCommandErrors(t *testing.T, admin, io *testHost) {
	bad := rwCmd(io, nvme.IOWrite, 0, 1, nvme.SGLDataBlockOffset)
	bad.SetNSID(1)
	bad.SetSGL(16, 512, nvme.SGLDataBlockOffset)
	io.sendCapsule(&bad, pattern(512, 3))
	if cpl := io.expectResp(bad.CID()); cpl.Status.Success() || cpl.SQID != 1 {
		t.Fatalf("in-capsule data at offset 16: %+v", cpl)
	}
	oob := rwCmd(io, nvme.IORead, itSize/itLBA, 1, nvme.SGLTransportDataBlock)
	oob.SetNSID(1)
	if cpl := io.do(&oob); cpl.Status.Code() != nvme.StatusLBAOutOfRange.Code() {
		t.Fatalf("read past the end: %v", cpl.Status)
	}
	ka := admin.cmd(nvme.AdminKeepAlive, 0, nvme.SGLTransportDataBlock)
	if cpl := admin.do(&ka); !cpl.Status.Success() {
		t.Fatalf("Keep Alive: %v", cpl.Status)
	}

}

// checkBurst pipelines reads at the full queue depth.
func checkBurst(t *testing.T, io *testHost) {
	var burst bytes.Buffer
	want := map[uint16]bool{}
	for i := range 128 {
		r := rwCmd(io, nvme.IORead, uint64(i), 1, nvme.SGLTransportDataBlock)
		r.SetNSID(1)
		burst.Write(io.capsule(&r, nil))
		want[r.CID()] = true
	}
	io.write(burst.Bytes())
	for len(want) > 0 {
		p := io.readPDU()
		switch p.ch.Type {
		case nvme.PDUC2HData:
			if p.ch.Flags&nvme.FlagSuccess != 0 {
				delete(want, nvme.DecodeDataHeader(p.hdr).CCCID)
			}
		case nvme.PDUCapsuleResp:
			cpl := nvme.DecodeCompletion(p.hdr[8:])
			if !cpl.Status.Success() || !want[cpl.CID] {
				t.Fatalf("burst completion %+v", cpl)
			}
			delete(want, cpl.CID)
		default:
			t.Fatalf("burst: %v", p.ch.Type)
		}
	}
}
