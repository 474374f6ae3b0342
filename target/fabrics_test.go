package target

import (
	"errors"
	"testing"

	"basalt/pkg/nvme"
)

// NVMe-oF 1.1 §3.3, §3.4, §3.5: the exact sequence a Linux host
// (`nvme connect`) runs, end to end, with the checks the host makes at each
// step.
func TestLinuxConnectSequence(t *testing.T) {
	env := newEnv(t)
	admin := newFakeQueue(env.tgt, env.ports[0])
	if admin.sq.Depth() != 1 || admin.sq.MaxTransferSize() != 8192 || admin.sq.InCapsuleDataLimit() != 8192 {
		t.Fatalf("before Connect: depth %d, max transfer %d, ICD %d", admin.sq.Depth(), admin.sq.MaxTransferSize(), admin.sq.InCapsuleDataLimit())
	}

	// Connect(qid 0, SQSIZE 31, KATO 5000, CNTLID FFFFh), data in capsule.
	cpl, _ := admin.mustDo(t, connectCmd(0, 31, 5000, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	cntlid := uint16(cpl.DW0)
	if cntlid < 0x1001 || cntlid > 0x1FFF || cpl.DW0>>16 != 0 {
		t.Fatalf("Connect DW0 %#x: CNTLID outside range or AUTHREQ set", cpl.DW0)
	}
	if cpl.SQID != 0 || admin.sq.Depth() != 32 || !admin.sq.Connected() {
		t.Fatalf("SQID %d depth %d connected %v", cpl.SQID, admin.sq.Depth(), admin.sq.Connected())
	}

	// Prop Get CAP (8 bytes): MPSMIN 0, CQR 1, CSS NVM only, TO 15.
	cpl, _ = admin.mustDo(t, propGetCmd(nvme.PropCAP, true), nil)
	capv := uint64(cpl.DW0) | uint64(cpl.DW1)<<32
	if mpsmin := (capv >> 48) & 0xF; mpsmin != 0 {
		t.Fatalf("CAP.MPSMIN %d", mpsmin)
	}
	if capv&0xFFFF != 127 || capv&nvme.CAPCQR == 0 || (capv>>24)&0xFF != 15 || (capv>>37)&0xFF != 1 {
		t.Fatalf("CAP %#x", capv)
	}
	// Prop Set CC EN=0 with IOSQES/IOCQES, Prop Get CAP again, then EN=1.
	admin.mustDo(t, propSetCmd(nvme.PropCC, 0x00460000), nil)
	admin.mustDo(t, propGetCmd(nvme.PropCAP, true), nil)
	admin.mustDo(t, propSetCmd(nvme.PropCC, 0x00460001), nil)
	cpl, _ = admin.mustDo(t, propGetCmd(nvme.PropCSTS, false), nil)
	if cpl.DW0 != nvme.CSTSReady {
		t.Fatalf("CSTS %#x, want RDY only", cpl.DW0)
	}
	cpl, _ = admin.mustDo(t, propGetCmd(nvme.PropVS, false), nil)
	if cpl.DW0 != 0x00010300 {
		t.Fatalf("VS %#x", cpl.DW0)
	}

	// Identify Controller: the host aborts on any of these.
	_, data := admin.mustDo(t, identifyCmd(nvme.CNSController, 0, 0), nil)
	id := nvme.UnmarshalIdentifyController(data)
	switch {
	case id.CNTLID != cntlid:
		t.Fatalf("Identify CNTLID %#x != Connect CNTLID %#x", id.CNTLID, cntlid)
	case id.SGLS&3 == 0, id.ICDOFF != 0, id.KAS == 0, id.IOCCSZ < 4, id.IORCSZ < 1:
		t.Fatalf("fabrics info: SGLS %#x ICDOFF %d KAS %d IOCCSZ %d IORCSZ %d", id.SGLS, id.ICDOFF, id.KAS, id.IOCCSZ, id.IORCSZ)
	case id.CMIC != 0x0B || id.MNAN == 0 || id.MNAN > id.NN:
		t.Fatalf("CMIC %#x MNAN %d NN %d", id.CMIC, id.MNAN, id.NN)
	case id.SubNQN != testSubNQN:
		t.Fatalf("SUBNQN %q", id.SubNQN)
	}

	// Get Log 05h (LPA bit 1), 0Ch (CMIC bit 3, full size), 02h.
	if id.LPA&2 == 0 {
		t.Fatalf("LPA %#x: commands effects not advertised", id.LPA)
	}
	_, effects := admin.mustDo(t, getLogCmd(nvme.LogCommandsEffects, 0, false, 0, 4096, 0), nil)
	if le32(effects[1024+4*int(nvme.IOWrite):])&3 != 3 {
		t.Fatalf("Write effects %#x", le32(effects[1024+4:]))
	}
	anaLen := uint32(16 + id.NANAGRPID*32 + id.MNAN*4)
	if anaLen > 4096<<id.MDTS {
		t.Fatalf("ANA log %d bytes exceeds MDTS: host disables ANA", anaLen)
	}
	_, ana := admin.mustDo(t, getLogCmd(nvme.LogANA, 0, false, nvme.NSIDAll, anaLen, 0), nil)
	if h := nvme.UnmarshalANAHeader(ana); h.NGRPS != 2 {
		t.Fatalf("ANA NGRPS %d", h.NGRPS)
	}
	admin.mustDo(t, getLogCmd(nvme.LogSMART, 0, false, nvme.NSIDAll, 512, 0), nil)
	admin.mustDo(t, newCmd(nvme.AdminKeepAlive), nil)

	// Number of Queues must succeed (host asks for #CPUs).
	cpl, _ = admin.mustDo(t, setFeatCmd(nvme.FeatNumberOfQueues, 7|7<<16), nil)
	if cpl.DW0 != 7|7<<16 {
		t.Fatalf("NSQA/NCQA %#x", cpl.DW0)
	}

	// I/O queues: one connection each, SQSIZE min(128, MQES+1, MAXCMD)-1.
	var ioq []*fakeQueue
	for qid := uint16(1); qid <= 8; qid++ {
		q := newFakeQueue(env.tgt, env.ports[0])
		cpl, _ := q.mustDo(t, connectCmd(qid, min(127, id.MAXCMD-1), 0, 0), connectData(cntlid, testSubNQN, testHostNQN))
		if uint16(cpl.DW0) != cntlid || cpl.SQID != qid {
			t.Fatalf("I/O connect %d: DW0 %#x SQID %d", qid, cpl.DW0, cpl.SQID)
		}
		if q.sq.Depth() != 128 || q.sq.MaxTransferSize() != 128<<10 || q.sq.InCapsuleDataLimit() != 8192 {
			t.Fatalf("I/O queue: depth %d max %d ICD %d", q.sq.Depth(), q.sq.MaxTransferSize(), q.sq.InCapsuleDataLimit())
		}
		ioq = append(ioq, q)
	}

	// nvme_start_ctrl: AEN config (OAES ∩ supported), AER, scan.
	admin.mustDo(t, setFeatCmd(nvme.FeatAsyncEventConfig, id.OAES&(1<<8|1<<9|1<<11|1<<31)), nil)
	aer, _ := admin.start(t, newCmd(nvme.AdminAsyncEventReq), nil)
	cpl, data = admin.mustDo(t, identifyCmd(nvme.CNSCSController, 0, 0), nil)
	if len(data) != 4096 {
		t.Fatalf("CNS 06h returned %d bytes", len(data))
	}
	_, list := admin.mustDo(t, identifyCmd(nvme.CNSActiveNSList, 0, 0), nil)
	var nsids []uint32
	for off := 0; le32(list[off:]) != 0; off += 4 {
		nsids = append(nsids, le32(list[off:]))
	}
	if len(nsids) != 2 || nsids[0] != 1 || nsids[1] != 2 {
		t.Fatalf("active NSIDs %v", nsids)
	}
	for _, nsid := range nsids {
		admin.mustDo(t, identifyCmd(nvme.CNSNSDescriptorList, nsid, 0), nil)
		// VS 1.3: the host does not send CNS 08h; if it does, it falls back.
		cpl, _ = admin.do(t, identifyCmd(nvme.CNSCSIndepNamespace, nsid, 0), nil)
		expectStatus(t, "CNS 08h", cpl, nvme.StatusInvalidField)
		_, d := admin.mustDo(t, identifyCmd(nvme.CNSNamespace, nsid, 0), nil)
		ns := nvme.UnmarshalIdentifyNamespace(d)
		if ns.NCAP == 0 || ns.NMIC != 1 || ns.ANAGRPID != nsid || ns.LBADS < 9 || ns.LBADS > 12 {
			t.Fatalf("Identify NS %d: %+v", nsid, ns)
		}
	}
	// Block-layer I/O: the partition scan reads LBA 0.
	ioq[0].mustDo(t, rwCmd(nvme.IORead, 1, 0, 7, 512), nil)

	// nvme disconnect: CC.SHN=01b, wait for SHST=10b, close the sockets.
	admin.mustDo(t, propSetCmd(nvme.PropCC, 0x00460001|1<<14), nil)
	for i := 0; ; i++ {
		cpl, _ = admin.mustDo(t, propGetCmd(nvme.PropCSTS, false), nil)
		if cpl.DW0&nvme.CSTSShstMask == nvme.CSTSShstDone {
			break
		}
		if i > 1e6 {
			t.Fatalf("CSTS %#x: shutdown never completes", cpl.DW0)
		}
	}
	if env.be[1].flushes.Load() == 0 || env.be[2].flushes.Load() == 0 {
		t.Fatal("shutdown did not flush the namespaces")
	}
	for _, q := range ioq {
		q.sq.Release()
	}
	admin.sq.Release()
	if cpl, _ := admin.wait(t, aer); cpl.Status != nvme.StatusAbortSQDeletion {
		t.Fatalf("outstanding AER at teardown: %v", cpl.Status)
	}
	if n := len(env.tgt.Controllers()); n != 0 {
		t.Fatalf("%d controllers left after disconnect", n)
	}
}

// NVMe-oF 1.1 §3.3: every Connect failure, with the status, DNR and the
// IPO/IATTR error location the host decodes.
func TestConnectErrors(t *testing.T) {
	env := newEnv(t, func(c *Config, _ *SubsystemConfig) { c.MQES = 63 })
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 5000)
	a.connectIO(2, 63)
	data := func(cntlid uint16, sub, host string) []byte { return connectData(cntlid, sub, host) }
	unterminated := data(nvme.CNTLIDDynamic, testSubNQN, testHostNQN)
	for i := 256; i < 512; i++ {
		unterminated[i] = 'x'
	}
	tests := []struct {
		name string
		cmd  nvme.Command
		data []byte
		want nvme.Status
		dw0  uint32
	}{
		{"RECFMT 1", func() nvme.Command {
			c := connectCmd(0, 31, 0, 0)
			c[nvme.ConnectOffsetRECFMT] = 1
			return c
		}(), data(nvme.CNTLIDDynamic, testSubNQN, testHostNQN), nvme.StatusConnectIncompatibleFormat, 0},
		{"admin SQSIZE 0", connectCmd(0, 0, 0, 0), data(nvme.CNTLIDDynamic, testSubNQN, testHostNQN),
			nvme.StatusConnectInvalidParameters, nvme.ConnectOffsetSQSIZE},
		{"admin SQSIZE above limit", connectCmd(0, 64, 0, 0), data(nvme.CNTLIDDynamic, testSubNQN, testHostNQN),
			nvme.StatusConnectInvalidParameters, nvme.ConnectOffsetSQSIZE},
		{"admin static CNTLID", connectCmd(0, 31, 0, 0), data(5, testSubNQN, testHostNQN),
			nvme.StatusConnectInvalidParameters, 1<<16 | nvme.ConnectDataCNTLID},
		{"unknown SUBNQN", connectCmd(0, 31, 0, 0), data(nvme.CNTLIDDynamic, "nqn.2024-01.io.basalt:nope", testHostNQN),
			nvme.StatusConnectInvalidParameters, 1<<16 | nvme.ConnectDataSubNQN},
		{"unterminated SUBNQN", connectCmd(0, 31, 0, 0), unterminated,
			nvme.StatusConnectInvalidParameters, 1<<16 | nvme.ConnectDataSubNQN},
		{"host not allowed", connectCmd(0, 31, 0, 0), data(nvme.CNTLIDDynamic, testSubNQN, testHostB),
			nvme.StatusConnectInvalidHost, 1<<16 | nvme.ConnectDataHostNQN},
		{"I/O SQSIZE 0", connectCmd(3, 0, 0, 0), data(a.cntlid, testSubNQN, testHostNQN),
			nvme.StatusConnectInvalidParameters, nvme.ConnectOffsetSQSIZE},
		{"I/O SQSIZE > MQES", connectCmd(3, 64, 0, 0), data(a.cntlid, testSubNQN, testHostNQN),
			nvme.StatusConnectInvalidParameters, nvme.ConnectOffsetSQSIZE},
		{"I/O stale CNTLID", connectCmd(1, 31, 0, 0), data(a.cntlid+1, testSubNQN, testHostNQN),
			nvme.StatusConnectInvalidParameters, 1<<16 | nvme.ConnectDataCNTLID},
		{"I/O other host's CNTLID", connectCmd(1, 31, 0, 0), data(a.cntlid, testSubNQN, "nqn.x:other"),
			nvme.StatusConnectInvalidHost, 1<<16 | nvme.ConnectDataHostNQN},
		{"QID > granted", connectCmd(3, 31, 0, 0), data(a.cntlid, testSubNQN, testHostNQN),
			nvme.StatusConnectInvalidParameters, nvme.ConnectOffsetQID},
		{"QID in use", connectCmd(1, 31, 0, 0), data(a.cntlid, testSubNQN, testHostNQN),
			nvme.StatusCommandSequenceError, 0},
		{"Connect data 512 bytes", func() nvme.Command {
			c := connectCmd(0, 31, 0, 0)
			c.SetSGL(0, 512, nvme.SGLDataBlockOffset)
			return c
		}(), nil, nvme.StatusDataSGLLengthInvalid, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newFakeQueue(env.tgt, env.ports[0])
			defer q.sq.Release()
			cpl, _ := q.do(t, tc.cmd, tc.data)
			expectStatus(t, tc.name, cpl, tc.want)
			if !cpl.Status.DNR() {
				t.Fatalf("%v without DNR: the host would reconnect forever", cpl.Status)
			}
			if cpl.DW0 != tc.dw0 {
				t.Fatalf("DW0 (IPO/IATTR) %#x, want %#x", cpl.DW0, tc.dw0)
			}
			if q.sq.Connected() {
				t.Fatal("queue connected after a failed Connect")
			}
		})
	}
	// A second Connect on a connected queue: Controller Busy.
	cpl, _ := a.io[0].do(t, connectCmd(1, 31, 0, 0), connectData(a.cntlid, testSubNQN, testHostNQN))
	expectStatus(t, "second connect", cpl, nvme.StatusConnectControllerBusy)
}

// NVMe-oF 1.1 §3.3: only Connect is valid before Connect; an I/O queue
// Connect before CC.EN=1 is a sequence error (SPDK).
func TestCommandsBeforeConnect(t *testing.T) {
	env := newEnv(t)
	q := newFakeQueue(env.tgt, env.ports[0])
	for _, cmd := range []nvme.Command{
		identifyCmd(nvme.CNSController, 0, 0), newCmd(nvme.AdminKeepAlive),
		propGetCmd(nvme.PropCAP, true), rwCmd(nvme.IORead, 1, 0, 0, 512),
	} {
		cpl, _ := q.do(t, cmd, nil)
		expectStatus(t, "before connect", cpl, nvme.StatusCommandSequenceError)
	}
	// Admin connected but not enabled.
	admin := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ := admin.mustDo(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	cntlid := uint16(cpl.DW0)
	cpl, _ = admin.do(t, identifyCmd(nvme.CNSController, 0, 0), nil)
	expectStatus(t, "identify before CC.EN", cpl, nvme.StatusCommandSequenceError)
	cpl, _ = q.do(t, connectCmd(1, 31, 0, 0), connectData(cntlid, testSubNQN, testHostNQN))
	expectStatus(t, "I/O connect before CC.EN", cpl, nvme.StatusCommandSequenceError)
	// Unsupported Fabrics commands: Disconnect, and an unknown type.
	for _, fct := range []nvme.FCType{nvme.FCTypeDisconnect, 0x7E} {
		c := newCmd(nvme.OpcodeFabrics)
		c.SetFCType(fct)
		cpl, _ = admin.do(t, c, nil)
		expectStatus(t, "fctype", cpl, nvme.StatusInvalidOpcode)
	}
	// Authentication Send/Receive for a host without DH-HMAC-CHAP secrets:
	// no security protocol is enabled (Invalid Field at SECP).
	for _, cmd := range []nvme.Command{authSendCmd(make([]byte, 72)), authRecvCmd(4096)} {
		r, ok := admin.start(t, cmd, make([]byte, 72))
		if ok {
			t.Fatal("Authentication Send/Receive accepted without secrets")
		}
		cpl, _ = admin.wait(t, r)
		expectStatus(t, "auth without secrets", cpl, nvme.StatusInvalidField)
	}
}

// NVMe-oF 1.1 §3.4, §3.5: Property Get/Set sizes and offsets, and the CC
// state machine.
func TestProperties(t *testing.T) {
	env := newEnv(t, func(c *Config, _ *SubsystemConfig) { c.MQES = 255 })
	a := env.standard()
	q := a.admin
	cpl, _ := q.mustDo(t, propGetCmd(nvme.PropCAP, true), nil)
	full := uint64(cpl.DW0) | uint64(cpl.DW1)<<32
	if want := uint64(255) | 1<<16 | 15<<24 | 1<<37; full != want {
		t.Fatalf("CAP %#x, want %#x", full, want)
	}
	lo, _ := q.mustDo(t, propGetCmd(nvme.PropCAP, false), nil)
	hi, _ := q.mustDo(t, propGetCmd(nvme.PropCAP+4, false), nil)
	if uint64(lo.DW0)|uint64(hi.DW0)<<32 != full {
		t.Fatal("CAP read as two dwords differs")
	}
	cpl, _ = q.mustDo(t, propGetCmd(nvme.PropCC, false), nil)
	if cpl.DW0 != 0x00460001 {
		t.Fatalf("CC %#x", cpl.DW0)
	}
	bad := []struct {
		name string
		cmd  nvme.Command
	}{
		{"get VS 8 bytes", propGetCmd(nvme.PropVS, true)},
		{"get NSSR", propGetCmd(nvme.PropNSSR, false)},
		{"get offset 0x100", propGetCmd(0x100, false)},
		{"get ATTRIB 2", func() nvme.Command { c := propGetCmd(nvme.PropCC, false); c[nvme.PropOffsetATTRIB] = 2; return c }()},
		{"set CAP", propSetCmd(nvme.PropCAP, 1)},
		{"set CSTS", propSetCmd(nvme.PropCSTS, 1)},
		{"set CC 8 bytes", func() nvme.Command { c := propSetCmd(nvme.PropCC, 1); c[nvme.PropOffsetATTRIB] = 1; return c }()},
	}
	for _, tc := range bad {
		cpl, _ := q.do(t, tc.cmd, nil)
		expectStatus(t, tc.name, cpl, nvme.StatusInvalidField)
	}
	// Property Get on an I/O queue: only Connect is a Fabrics command there.
	cpl, _ = a.io[0].do(t, propGetCmd(nvme.PropCAP, true), nil)
	expectStatus(t, "prop get on I/O queue", cpl, nvme.StatusInvalidOpcode)

	// EN 1→0: RDY clears, I/O queues are deleted, I/O is a sequence error.
	q.mustDo(t, propSetCmd(nvme.PropCC, 0x00460000), nil)
	cpl, _ = q.mustDo(t, propGetCmd(nvme.PropCSTS, false), nil)
	if cpl.DW0&nvme.CSTSReady != 0 {
		t.Fatalf("CSTS %#x after EN=0", cpl.DW0)
	}
	for _, io := range a.io {
		waitClosed(t, io)
		if !errors.Is(io.closeReason(), ErrControllerReset) {
			t.Fatalf("close reason %v", io.closeReason())
		}
	}
	cpl, _ = a.io[0].do(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
	expectStatus(t, "I/O while CC.EN=0", cpl, nvme.StatusCommandSequenceError)

	// EN 0→1 with IOSQES 5: CFS, not RDY.
	q.mustDo(t, propSetCmd(nvme.PropCC, 0x00450001), nil)
	cpl, _ = q.mustDo(t, propGetCmd(nvme.PropCSTS, false), nil)
	if cpl.DW0 != nvme.CSTSFatal {
		t.Fatalf("CSTS %#x after bad IOSQES, want CFS", cpl.DW0)
	}
	// Reset and enable properly; MPS 1 (8 KiB pages) is refused too.
	q.mustDo(t, propSetCmd(nvme.PropCC, 0), nil)
	q.mustDo(t, propSetCmd(nvme.PropCC, 0x00460001|1<<7), nil)
	cpl, _ = q.mustDo(t, propGetCmd(nvme.PropCSTS, false), nil)
	if cpl.DW0 != nvme.CSTSFatal {
		t.Fatalf("CSTS %#x after MPS 1", cpl.DW0)
	}
	q.mustDo(t, propSetCmd(nvme.PropCC, 0), nil)
	q.mustDo(t, propSetCmd(nvme.PropCC, 0x00460001), nil)
	cpl, _ = q.mustDo(t, propGetCmd(nvme.PropCSTS, false), nil)
	if cpl.DW0 != nvme.CSTSReady {
		t.Fatalf("CSTS %#x after re-enable", cpl.DW0)
	}
	// SHN 10b (abrupt) also reports SHST complete; SHN 00b clears it.
	q.mustDo(t, propSetCmd(nvme.PropCC, 0x00460001|2<<14), nil)
	waitCSTS(t, q, nvme.CSTSShstMask, nvme.CSTSShstDone)
	q.mustDo(t, propSetCmd(nvme.PropCC, 0x00460001), nil)
	waitCSTS(t, q, nvme.CSTSShstMask, 0)
}

func waitCSTS(t *testing.T, q *fakeQueue, mask, want uint32) {
	t.Helper()
	for i := 0; i < 1e6; i++ {
		cpl, _ := q.mustDo(t, propGetCmd(nvme.PropCSTS, false), nil)
		if cpl.DW0&mask == want {
			return
		}
	}
	t.Fatalf("CSTS never reached %#x under mask %#x", want, mask)
}

// NVMe-oF 1.1 §2.2: SQHD advances modulo SQSIZE+1 in every completion, and is
// FFFFh when SQ flow control is disabled.
func TestSQHD(t *testing.T) {
	env := newEnv(t)
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
	a.admin.mustDo(t, setFeatCmd(nvme.FeatNumberOfQueues, 1|1<<16), nil)
	q := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ := q.mustDo(t, connectCmd(1, 3, 0, 0), connectData(a.cntlid, testSubNQN, testHostNQN))
	if cpl.SQHD != 1 {
		t.Fatalf("Connect SQHD %d", cpl.SQHD)
	}
	for i, want := range []uint16{2, 3, 0, 1, 2} {
		cpl, _ := q.mustDo(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
		if cpl.SQHD != want {
			t.Fatalf("command %d: SQHD %d, want %d", i, cpl.SQHD, want)
		}
	}
	nf := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ = nf.mustDo(t, connectCmd(2, 3, 0, nvme.CATTRDisableSQFlow), connectData(a.cntlid, testSubNQN, testHostNQN))
	if cpl.SQHD != 0xFFFF {
		t.Fatalf("DISSQFC Connect SQHD %#x", cpl.SQHD)
	}
	cpl, _ = nf.mustDo(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
	if cpl.SQHD != 0xFFFF {
		t.Fatalf("DISSQFC SQHD %#x", cpl.SQHD)
	}
}
