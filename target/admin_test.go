package target

import (
	"bytes"
	"reflect"
	"testing"

	"basalt/pkg/nvme"
)

// NVMe Base 2.0 §5.17.2.1: the Identify Controller fields the Linux host
// checks, field by field.
func TestIdentifyController(t *testing.T) {
	env := newEnv(t, func(c *Config, s *SubsystemConfig) {
		c.MDTS, c.InCapsuleDataSize, c.MQES = 6, 16384, 255
		s.Serial, s.Model = "SN-CLUSTER-1", "Basalt Volume"
	})
	a := env.standard()
	_, data := a.admin.mustDo(t, identifyCmd(nvme.CNSController, 0, 0), nil)
	id := nvme.UnmarshalIdentifyController(data)
	want := nvme.IdentifyController{
		SN: "SN-CLUSTER-1", MN: "Basalt Volume", FR: "1.0", CMIC: 0x0B, MDTS: 6, CNTLID: a.cntlid,
		VER: 0x00010300, OAES: 1<<8 | 1<<11, CTRATT: 1, CNTRLTYPE: 1, ACL: 3, AERL: 3, FRMW: 3,
		LPA: 0x07, ELPE: 63, KAS: 10, ANATT: 10, ANACAP: 0x5F, ANAGRPMAX: DefaultMaxANAGroupID, NANAGRPID: 128,
		SQES: 0x66, CQES: 0x44, MAXCMD: 256, NN: 128, ONCS: 0x0C, VWC: 1, SGLS: 0x00100001,
		MNAN: 128, SubNQN: testSubNQN, IOCCSZ: 4 + 16384/16, IORCSZ: 1, MSDBD: 1,
	}
	if id != want {
		t.Fatalf("Identify Controller\n got %+v\nwant %+v", id, want)
	}
	if le16 := uint16(data[2048]) | uint16(data[2049])<<8; le16 != 0x9c4 {
		t.Fatalf("PSD0 max power %#x", le16)
	}
	// A second controller of the same host has its own CNTLID.
	b := env.connectAdmin(testSubNQN, testHostNQN, env.ports[1], 5000)
	_, data = b.admin.mustDo(t, identifyCmd(nvme.CNSController, 0, 0), nil)
	if got := nvme.UnmarshalIdentifyController(data).CNTLID; got != b.cntlid || got == a.cntlid {
		t.Fatalf("second controller CNTLID %#x (connect %#x, first %#x)", got, b.cntlid, a.cntlid)
	}
}

// NVM Command Set 1.0 §4.1.5.1, NVMe Base 2.0 §5.17.2: Identify Namespace and
// the other CNS values the Linux host reads.
func TestIdentifyNamespaceAndLists(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := a.admin
	_, data := q.mustDo(t, identifyCmd(nvme.CNSNamespace, 2, 0), nil)
	ns := nvme.UnmarshalIdentifyNamespace(data)
	want := nvme.IdentifyNamespace{
		NSZE: 512, NCAP: 512, NUSE: 512, NMIC: 1, DLFEAT: 0x09, ANAGRPID: 2,
		NGUID: [16]byte{2, 2}, LBADS: 12,
	}
	if ns != want {
		t.Fatalf("Identify NS 2\n got %+v\nwant %+v", ns, want)
	}
	// Inactive NSID: all zeroes, success (NCAP 0 = absent).
	_, data = q.mustDo(t, identifyCmd(nvme.CNSNamespace, 7, 0), nil)
	if !bytes.Equal(data, make([]byte, 4096)) {
		t.Fatal("inactive NSID returned non-zero data")
	}
	for _, nsid := range []uint32{0, nvme.NSIDAll} {
		cpl, _ := q.do(t, identifyCmd(nvme.CNSNamespace, nsid, 0), nil)
		expectStatus(t, "identify ns", cpl, nvme.StatusInvalidNamespace)
	}
	// Active NSID list: NSIDs greater than CDW1.NSID, zero-terminated.
	_, list := q.mustDo(t, identifyCmd(nvme.CNSActiveNSList, 1, 0), nil)
	if le32(list) != 2 || le32(list[4:]) != 0 {
		t.Fatalf("NS list after 1: %v", list[:8])
	}
	for _, nsid := range []uint32{0xFFFFFFFE, nvme.NSIDAll} {
		cpl, _ := q.do(t, identifyCmd(nvme.CNSActiveNSList, nsid, 0), nil)
		expectStatus(t, "ns list", cpl, nvme.StatusInvalidNamespace)
	}
	// Descriptors: UUID, NGUID, CSI, then NIDL 0.
	_, d := q.mustDo(t, identifyCmd(nvme.CNSNSDescriptorList, 1, 0), nil)
	wantDesc := []byte{3, 16, 0, 0, 0xA, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		2, 16, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0}
	if !bytes.Equal(d[:len(wantDesc)], wantDesc) || !bytes.Equal(d[len(wantDesc):], make([]byte, 4096-len(wantDesc))) {
		t.Fatalf("descriptors % x", d[:48])
	}
	cpl, _ := q.do(t, identifyCmd(nvme.CNSNSDescriptorList, 9, 0), nil)
	expectStatus(t, "descriptors of inactive ns", cpl, nvme.StatusInvalidField)
	// CNS 06h: CSI 0 → zeroes; other CSI → Invalid Field. CNS 08h, 10h → Invalid Field.
	cpl, d = q.mustDo(t, identifyCmd(nvme.CNSCSController, 0, 0), nil)
	if !bytes.Equal(d, make([]byte, 4096)) {
		t.Fatal("CNS 06h not zero")
	}
	for _, tc := range []struct {
		cns, csi uint8
	}{{nvme.CNSCSController, 2}, {nvme.CNSCSIndepNamespace, 0}, {0x10, 0}, {0xFF, 0}} {
		cpl, _ = q.do(t, identifyCmd(tc.cns, 1, tc.csi), nil)
		expectStatus(t, "identify cns", cpl, nvme.StatusInvalidField)
	}
	// Transfer length must be 4096.
	c := identifyCmd(nvme.CNSController, 0, 0)
	c.SetSGL(0, 2048, nvme.SGLTransportDataBlock)
	cpl, _ = q.do(t, c, nil)
	expectStatus(t, "identify 2048 bytes", cpl, nvme.StatusDataSGLLengthInvalid)
}

// NVMe Base 2.0 §5.27: Set/Get Features.
func TestFeatures(t *testing.T) {
	env := newEnv(t)
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 5000)
	q := a.admin
	set := func(fid uint8, d11 uint32, want nvme.Status) nvme.Completion {
		t.Helper()
		cpl, _ := q.do(t, setFeatCmd(fid, d11), nil)
		expectStatus(t, "set feature", cpl, want)
		return cpl
	}
	get := func(fid uint8, sel, d11 uint32) uint32 {
		t.Helper()
		cpl, _ := q.mustDo(t, getFeatCmd(fid, sel, d11), nil)
		return cpl.DW0
	}
	// Number of Queues: min(NSQR, NCQR)+1, capped at MaxIOQueues (32).
	if cpl := set(nvme.FeatNumberOfQueues, 3|5<<16, nvme.StatusSuccess); cpl.DW0 != 3|3<<16 {
		t.Fatalf("NQ DW0 %#x", cpl.DW0)
	}
	if cpl := set(nvme.FeatNumberOfQueues, 200|200<<16, nvme.StatusSuccess); cpl.DW0 != 31|31<<16 {
		t.Fatalf("NQ capped DW0 %#x", cpl.DW0)
	}
	set(nvme.FeatNumberOfQueues, 0xFFFF, nvme.StatusInvalidField)
	if v := get(nvme.FeatNumberOfQueues, 0, 0); v != 31|31<<16 {
		t.Fatalf("get NQ %#x", v)
	}
	// Keep Alive Timer in ms.
	set(nvme.FeatKeepAliveTimer, 15000, nvme.StatusSuccess)
	if v := get(nvme.FeatKeepAliveTimer, 0, 0); v != 15000 {
		t.Fatalf("KATO %d", v)
	}
	// Async event config: only OAES and SMART bits.
	set(nvme.FeatAsyncEventConfig, 1<<8|1<<11, nvme.StatusSuccess)
	set(nvme.FeatAsyncEventConfig, 1<<31, nvme.StatusInvalidField)
	set(nvme.FeatAsyncEventConfig, 1<<9, nvme.StatusInvalidField)
	if v := get(nvme.FeatAsyncEventConfig, 0, 0); v != 1<<8|1<<11 {
		t.Fatalf("AEC %#x", v)
	}
	// Volatile write cache.
	set(nvme.FeatVolatileWC, 0, nvme.StatusSuccess)
	if v := get(nvme.FeatVolatileWC, 0, 0); v != 0 {
		t.Fatalf("VWC %d", v)
	}
	if v := get(nvme.FeatVolatileWC, nvme.FeatSelDefault, 0); v != 1 {
		t.Fatalf("VWC default %d", v)
	}
	set(nvme.FeatVolatileWC, 1, nvme.StatusSuccess)
	// The rest: accepted and reported back, or refused where unsupported.
	set(nvme.FeatArbitration, 0x03020107, nvme.StatusSuccess)
	if v := get(nvme.FeatArbitration, 0, 0); v != 0x03020107 {
		t.Fatalf("arbitration %#x", v)
	}
	set(nvme.FeatPowerManagement, 1, nvme.StatusInvalidField)
	set(nvme.FeatPowerManagement, 0, nvme.StatusSuccess)
	set(nvme.FeatTemperatureThresh, 0x0160, nvme.StatusSuccess)
	set(nvme.FeatTemperatureThresh, 1<<20|0x0100, nvme.StatusSuccess)
	set(nvme.FeatTemperatureThresh, 3<<16|0x0100, nvme.StatusInvalidField)
	if over, under := get(nvme.FeatTemperatureThresh, 0, 0), get(nvme.FeatTemperatureThresh, 0, 1<<20); over != 0x160 || under != 0x100 {
		t.Fatalf("temperature thresholds %#x %#x", over, under)
	}
	if v := get(nvme.FeatTemperatureThresh, nvme.FeatSelDefault, 0); v != 0x157 {
		t.Fatalf("default over-temperature %#x", v)
	}
	set(nvme.FeatErrorRecovery, 1<<16, nvme.StatusInvalidField)
	set(nvme.FeatErrorRecovery, 100, nvme.StatusSuccess)
	set(nvme.FeatInterruptCoalesce, 0x0A05, nvme.StatusSuccess)
	set(nvme.FeatWriteAtomicity, 1, nvme.StatusSuccess)
	if get(nvme.FeatErrorRecovery, 0, 0) != 100 || get(nvme.FeatInterruptCoalesce, 0, 0) != 0x0A05 || get(nvme.FeatWriteAtomicity, 0, 0) != 1 {
		t.Fatal("stored features not reported back")
	}
	c := setFeatCmd(nvme.FeatHostIdentifier, 0)
	c.SetSGL(0, 16, nvme.SGLDataBlockOffset)
	cpl, _ := q.do(t, c, make([]byte, 16))
	expectStatus(t, "set host id", cpl, nvme.StatusCommandSequenceError)
	set(nvme.FeatAPST, 0, nvme.StatusInvalidField)
	set(0x7F, 0, nvme.StatusInvalidField)
	// Saving is not supported (SV bit).
	cpl, _ = q.do(t, setFeatCmd(nvme.FeatArbitration, 0), nil)
	expectStatus(t, "arbitration", cpl, nvme.StatusSuccess)
	c = setFeatCmd(nvme.FeatArbitration, 0)
	c.SetCDW(10, c.CDW(10)|nvme.FeatSaveBit)
	cpl, _ = q.do(t, c, nil)
	expectStatus(t, "SV", cpl, nvme.StatusFeatureNotSaveable)
	// SEL 3: capabilities (changeable); SEL 4+: Invalid Field.
	if v := get(nvme.FeatArbitration, nvme.FeatSelCapabilities, 0); v != nvme.FeatCapChangeable {
		t.Fatalf("capabilities %#x", v)
	}
	cpl, _ = q.do(t, getFeatCmd(nvme.FeatArbitration, 4, 0), nil)
	expectStatus(t, "SEL 4", cpl, nvme.StatusInvalidField)
	// Features with data: Host Behavior (512 bytes), Host Identifier (16).
	hb := make([]byte, 512)
	hb[0] = 1
	c = setFeatCmd(nvme.FeatHostBehavior, 0)
	c.SetSGL(0, 512, nvme.SGLDataBlockOffset)
	q.mustDo(t, c, hb)
	c = getFeatCmd(nvme.FeatHostBehavior, 0, 0)
	c.SetSGL(0, 512, nvme.SGLTransportDataBlock)
	if _, got := q.mustDo(t, c, nil); !bytes.Equal(got, hb) {
		t.Fatal("host behavior not reported back")
	}
	c = getFeatCmd(nvme.FeatHostIdentifier, 0, 1)
	c.SetSGL(0, 16, nvme.SGLTransportDataBlock)
	if _, got := q.mustDo(t, c, nil); !bytes.Equal(got, testHostID[:]) {
		t.Fatalf("host identifier % x", got)
	}
	c = getFeatCmd(nvme.FeatHostIdentifier, 0, 0)
	c.SetSGL(0, 16, nvme.SGLTransportDataBlock)
	cpl, _ = q.do(t, c, nil)
	expectStatus(t, "host id without EXHID", cpl, nvme.StatusInvalidField)
	// A feature without data must not carry a data SGL.
	c = setFeatCmd(nvme.FeatArbitration, 0)
	c.SetSGL(0, 4096, nvme.SGLTransportDataBlock)
	cpl, _ = q.do(t, c, nil)
	expectStatus(t, "data on a data-less feature", cpl, nvme.StatusDataSGLLengthInvalid)
	// Number of Queues once I/O queues exist: Command Sequence Error.
	set(nvme.FeatNumberOfQueues, 1|1<<16, nvme.StatusSuccess)
	io := newFakeQueue(env.tgt, env.ports[0])
	io.mustDo(t, connectCmd(1, 31, 0, 0), connectData(a.cntlid, testSubNQN, testHostNQN))
	set(nvme.FeatNumberOfQueues, 3|3<<16, nvme.StatusCommandSequenceError)
}

// NVMe Base 2.0 §5.16: log pages, offsets, RAE.
func TestGetLogPage(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := a.admin
	// Two failures land in the error log, newest first.
	cpl, _ := a.io[0].do(t, rwCmd(nvme.IORead, 1, 4096, 0, 512), nil)
	expectStatus(t, "out of range", cpl, nvme.StatusLBAOutOfRange)
	bad := rwCmd(nvme.IORead, 9, 0, 0, 512)
	cpl, _ = a.io[1].do(t, bad, nil)
	expectStatus(t, "inactive nsid", cpl, nvme.StatusInvalidField)
	_, log := q.mustDo(t, getLogCmd(nvme.LogError, 0, false, 0, 4096, 0), nil)
	e0, e1 := nvme.UnmarshalErrorLogEntry(log), nvme.UnmarshalErrorLogEntry(log[64:])
	if e0.ErrorCount != 2 || e0.SQID != 2 || e0.CID != bad.CID() || e0.Status != nvme.StatusInvalidField || e0.ParamErrorLoc != 4 || e0.NSID != 9 {
		t.Fatalf("newest error entry %+v", e0)
	}
	if e1.ErrorCount != 1 || e1.SQID != 1 || e1.Status != nvme.StatusLBAOutOfRange || e1.LBA != 4096 || e1.ParamErrorLoc != 40 {
		t.Fatalf("older error entry %+v", e1)
	}
	// SMART counts this controller's I/O.
	a.io[0].mustDo(t, rwCmd(nvme.IOWrite, 1, 0, 7, 512), make([]byte, 4096))
	a.io[0].mustDo(t, rwCmd(nvme.IORead, 1, 0, 7, 512), nil)
	_, log = q.mustDo(t, getLogCmd(nvme.LogSMART, 0, false, nvme.NSIDAll, 512, 0), nil)
	s := nvme.UnmarshalSMARTLog(log)
	if s.HostReadCommands != 1 || s.HostWriteCommands != 1 || s.DataUnitsWritten != 1 || s.AvailableSpare != 100 || s.ErrorLogEntriesNum != 2 {
		t.Fatalf("SMART %+v", s)
	}
	_, log = q.mustDo(t, getLogCmd(nvme.LogFirmwareSlot, 0, false, 0, 512, 0), nil)
	if log[0] != 1 || string(log[8:11]) != "1.0" {
		t.Fatalf("firmware slot % x", log[:16])
	}
	// Commands Supported and Effects.
	_, log = q.mustDo(t, getLogCmd(nvme.LogCommandsEffects, 0, false, 0, 4096, 0), nil)
	for op, want := range map[int]uint32{int(nvme.AdminIdentify): 1, int(nvme.AdminKeepAlive): 1, 0x10: 0} {
		if got := le32(log[4*op:]); got != want {
			t.Fatalf("admin effects[%#x] %#x", op, got)
		}
	}
	for op, want := range map[nvme.Opcode]uint32{nvme.IORead: 1, nvme.IOWrite: 3, nvme.IOFlush: 1, nvme.IOWriteZeroes: 3, nvme.IODatasetMgmt: 3, nvme.IOCompare: 0} {
		if got := le32(log[1024+4*int(op):]); got != want {
			t.Fatalf("I/O effects[%#x] %#x, want %#x", op, got, want)
		}
	}
	// Offsets: any dword-aligned window equals the slice of the full log.
	_, full := q.mustDo(t, getLogCmd(nvme.LogCommandsEffects, 0, false, 0, 4096, 0), nil)
	for _, w := range []struct{ off, n uint32 }{{0, 4}, {1024, 64}, {4000, 96}, {4092, 4}} {
		_, part := q.mustDo(t, getLogCmd(nvme.LogCommandsEffects, 0, false, 0, w.n, uint64(w.off)), nil)
		if !bytes.Equal(part, full[w.off:w.off+w.n]) {
			t.Fatalf("window %+v differs", w)
		}
	}
	// Reading past the end zero-fills; offset beyond the log, unaligned
	// offset, oversized NUMD and unknown LIDs fail.
	_, part := q.mustDo(t, getLogCmd(nvme.LogCommandsEffects, 0, false, 0, 64, 4096), nil)
	if !bytes.Equal(part, make([]byte, 64)) {
		t.Fatal("read at end not zero")
	}
	for _, tc := range []struct {
		name string
		cmd  nvme.Command
		want nvme.Status
	}{
		{"offset beyond", getLogCmd(nvme.LogCommandsEffects, 0, false, 0, 4, 4100), nvme.StatusInvalidField},
		{"unaligned", getLogCmd(nvme.LogCommandsEffects, 0, false, 0, 4, 2), nvme.StatusInvalidField},
		{"too long", getLogCmd(nvme.LogCommandsEffects, 0, false, 0, 8196, 0), nvme.StatusInvalidField},
		{"discovery on I/O ctrl", getLogCmd(nvme.LogDiscovery, 0, false, 0, 1024, 0), nvme.StatusInvalidLogPage},
		{"unknown LID", getLogCmd(0xC1, 0, false, 0, 512, 0), nvme.StatusInvalidLogPage},
	} {
		cpl, _ := q.do(t, tc.cmd, nil)
		expectStatus(t, tc.name, cpl, tc.want)
	}
	c := getLogCmd(nvme.LogSMART, 0, false, 0, 512, 0)
	c.SetSGL(0, 4096, nvme.SGLTransportDataBlock)
	cpl, _ = q.do(t, c, nil)
	expectStatus(t, "SGL != NUMD", cpl, nvme.StatusDataSGLLengthInvalid)
}

// NVMe Base 2.0 §5.16.1.13: ANA log layout — groups ascending, NSIDs
// ascending per group, per-port states, RGO, CHGCNT.
func TestANALog(t *testing.T) {
	env := newEnv(t)
	for _, nsid := range []uint32{7, 5, 6} { // 5 and 7 share group 5
		grp := uint32(0)
		if nsid == 7 {
			grp = 5
		}
		if err := env.sub.AddNamespace(NamespaceConfig{NSID: nsid, Backend: newMemBackend(1<<16, 512), ANAGroup: grp}); err != nil {
			t.Fatal(err)
		}
	}
	a := env.standard()
	b := env.connectAdmin(testSubNQN, testHostNQN, env.ports[1], 5000)
	env.tgt.SetANAState(5, 2, nvme.ANAInaccessible)
	env.tgt.SetANAState(2, 2, nvme.ANANonOptimized)
	before := env.tgt.Stats().ANAChangeCount
	env.tgt.SetANAState(2, 2, nvme.ANANonOptimized) // no change: no bump
	if env.tgt.Stats().ANAChangeCount != before {
		t.Fatal("CHGCNT bumped without a change")
	}
	type grp = anaGroupView
	read := func(q *fakeQueue, rgo bool) (nvme.ANAHeader, []grp) {
		var lsp uint8
		if rgo {
			lsp = 1
		}
		_, log := q.mustDo(t, getLogCmd(nvme.LogANA, lsp, false, nvme.NSIDAll, 16+128*36, 0), nil)
		h := nvme.UnmarshalANAHeader(log)
		var out []grp
		off := 16
		for range h.NGRPS {
			d := nvme.UnmarshalANAGroupDescriptor(log[off:])
			g := grp{id: d.ANAGRPID, state: d.State}
			off += 32
			for range d.NNSIDS {
				g.nsids = append(g.nsids, le32(log[off:]))
				off += 4
			}
			out = append(out, g)
		}
		return h, out
	}
	h, ga := read(a.admin, false)
	wantA := []grp{{1, 1, []uint32{1}}, {2, 1, []uint32{2}}, {5, 1, []uint32{5, 7}}, {6, 1, []uint32{6}}}
	if !reflect.DeepEqual(ga, wantA) || h.CHGCNT != before {
		t.Fatalf("port 1 ANA log %+v (CHGCNT %d, want %d)", ga, h.CHGCNT, before)
	}
	_, gb := read(b.admin, false)
	wantB := []grp{{1, 1, []uint32{1}}, {2, 2, []uint32{2}}, {5, 3, []uint32{5, 7}}, {6, 1, []uint32{6}}}
	if !reflect.DeepEqual(gb, wantB) {
		t.Fatalf("port 2 ANA log %+v", gb)
	}
	_, gr := read(b.admin, true)
	for i, g := range gr {
		if g.id != wantB[i].id || g.state != wantB[i].state || len(g.nsids) != 0 {
			t.Fatalf("RGO group %+v", g)
		}
	}
	// I/O through port 2 to group 5 fails over; through port 1 it works.
	q2 := newFakeQueue(env.tgt, env.ports[1])
	b.admin.mustDo(t, setFeatCmd(nvme.FeatNumberOfQueues, 0), nil)
	q2.mustDo(t, connectCmd(1, 31, 0, 0), connectData(b.cntlid, testSubNQN, testHostNQN))
	cpl, _ := q2.do(t, rwCmd(nvme.IORead, 7, 0, 0, 512), nil)
	expectStatus(t, "inaccessible path", cpl, nvme.StatusANAInaccessible)
	if cpl.Status.DNR() {
		t.Fatal("ANA error with DNR: the host would not fail over")
	}
	q2.mustDo(t, rwCmd(nvme.IORead, 2, 0, 0, 4096), nil) // non-optimized is usable
	a.io[0].mustDo(t, rwCmd(nvme.IORead, 7, 0, 0, 512), nil)
	env.tgt.SetANAState(5, 2, nvme.ANAChange)
	cpl, _ = q2.do(t, rwCmd(nvme.IOWrite, 5, 0, 0, 512), make([]byte, 512))
	expectStatus(t, "change state", cpl, nvme.StatusANATransition)
	env.tgt.SetANAState(5, 2, nvme.ANAPersistentLoss)
	flush := newCmd(nvme.IOFlush)
	flush.SetNSID(5)
	cpl, _ = q2.do(t, flush, nil)
	expectStatus(t, "persistent loss", cpl, nvme.StatusANAPersistentLoss)
	// Invalid changes are ignored.
	env.tgt.SetANAState(0, 1, nvme.ANAInaccessible)
	env.tgt.SetANAState(DefaultMaxANAGroupID+1, 1, nvme.ANAInaccessible)
	env.tgt.SetANAState(1, 1, 7)
	if s := env.tgt.ANAState(1, 1); s != nvme.ANAOptimized {
		t.Fatalf("state after invalid changes %v", s)
	}
}

// anaGroupView is one decoded ANA group descriptor.
type anaGroupView struct {
	id    uint32
	state nvme.ANAState
	nsids []uint32
}
