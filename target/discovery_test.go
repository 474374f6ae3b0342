package target

import (
	"bytes"
	"testing"

	"basalt/pkg/nvme"
)

// readDiscoveryLog reads the log as libnvme's nvme_discovery_log does: the
// 1024-byte header with RAE=1, then header+entries in 4 KiB chunks with
// offsets and RAE=0; it checks GENCTR did not move in between.
func readDiscoveryLog(t *testing.T, q *fakeQueue) (genctr uint64, entries []nvme.DiscoveryLogEntry) {
	t.Helper()
	_, hdr := q.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, true, 0, 1024, 0), nil)
	genctr, numrec := nvme.DecodeDiscoveryLogHeader(hdr)
	total := 1024 + 1024*int(numrec)
	var full []byte
	for off := 0; off < total; off += 4096 {
		n := min(4096, total-off)
		_, part := q.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, false, 0, uint32(n), uint64(off)), nil)
		full = append(full, part...)
	}
	if g, _ := nvme.DecodeDiscoveryLogHeader(full); g != genctr {
		t.Fatalf("GENCTR moved during the read: %d → %d", genctr, g)
	}
	for i := range int(numrec) {
		entries = append(entries, nvme.UnmarshalDiscoveryLogEntry(full[1024+1024*i:]))
	}
	return genctr, entries
}

// NVMe-oF 1.1 §5: the discovery controller and its log: entries for every
// subsystem the host may access × its ports (this node's and the other
// nodes'), TREQ 0 (libnvme < 1.7 turns TLS on for TREQ 1 or 2), SECTYPE 0,
// distinct PORTIDs, GENCTR and the discovery AEN on change, offsets.
func TestDiscovery(t *testing.T) {
	env := newEnv(t)
	if _, err := env.tgt.AddSubsystem(SubsystemConfig{NQN: "nqn.2024-01.io.basalt:open", AllowAnyHost: true}); err != nil {
		t.Fatal(err)
	}
	others := []PortConfig{
		{ID: 10, TRADDR: "198.51.100.2", TRSVCID: "4420"},
		{ID: 1, TRADDR: "198.51.100.9", TRSVCID: "4420"}, // a local PORTID: not listed
		{ID: 11, TRADDR: "0.0.0.0", TRSVCID: "4420"},     // wildcard: dropped
		{ID: 12, TRADDR: "2001:db8::3", TRSVCID: "4420"}, // IPv6
	}
	env.tgt.SetRemoteSubsystems([]RemoteSubsystem{
		{NQN: "nqn.2024-01.io.basalt:open", AllowAnyHost: true, Ports: others},
		{NQN: testSubNQN, Hosts: []string{testHostNQN}, Ports: others},
	})
	d := env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, env.ports[1], 0)
	_, data := d.admin.mustDo(t, identifyCmd(nvme.CNSController, 0, 0), nil)
	id := nvme.UnmarshalIdentifyController(data)
	if id.CNTRLTYPE != nvme.ControllerTypeDiscovery || id.CNTLID != d.cntlid || id.SubNQN != nvme.DiscoveryNQN ||
		id.OAES != 1<<31 || id.LPA&4 == 0 || id.SGLS&3 == 0 {
		t.Fatalf("discovery Identify %+v", id)
	}
	gen, entries := readDiscoveryLog(t, d.admin)
	type key struct {
		nqn  string
		port uint16
	}
	want := map[key]string{
		{"nqn.2024-01.io.basalt:open", 1}: "192.0.2.1", {"nqn.2024-01.io.basalt:open", 2}: "192.0.2.2",
		{"nqn.2024-01.io.basalt:open", 10}: "198.51.100.2", {"nqn.2024-01.io.basalt:open", 12}: "2001:db8::3",
		{testSubNQN, 1}: "192.0.2.1", {testSubNQN, 2}: "192.0.2.2",
		{testSubNQN, 10}: "198.51.100.2", {testSubNQN, 12}: "2001:db8::3",
	}
	if len(entries) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(entries), len(want), entries)
	}
	for _, e := range entries {
		addr, ok := want[key{e.SUBNQN, e.PORTID}]
		wantFam := uint8(nvme.AddressFamilyIPv4)
		if e.PORTID == 12 {
			wantFam = nvme.AddressFamilyIPv6
		}
		if !ok || e.TRADDR != addr || e.TRTYPE != nvme.TransportTypeTCP || e.ADRFAM != wantFam ||
			e.SUBTYPE != nvme.SubtypeNVM || e.TREQ != 0 || e.SECTYPE != 0 || e.CNTLID != 0xFFFF ||
			e.ASQSZ != 32 || e.TRSVCID != "4420" {
			t.Fatalf("entry %+v", e)
		}
		delete(want, key{e.SUBNQN, e.PORTID})
	}
	// Host B sees only the open subsystem.
	b := env.connectAdmin(nvme.DiscoveryNQN, testHostB, env.ports[0], 0)
	if _, eb := readDiscoveryLog(t, b.admin); len(eb) != 4 {
		t.Fatalf("host B sees %d entries", len(eb))
	} else {
		for _, e := range eb {
			if e.SUBNQN != "nqn.2024-01.io.basalt:open" {
				t.Fatalf("host B sees %s", e.SUBNQN)
			}
		}
	}
	// A change bumps GENCTR and sends AEN 0x0070F002; the next event waits
	// until the log is read with RAE=0.
	aer, _ := d.admin.start(t, newCmd(nvme.AdminAsyncEventReq), nil)
	env.sub.AllowHost(testHostB)
	if cpl, _ := d.admin.wait(t, aer); cpl.DW0 != nvme.AENDiscoveryChange {
		t.Fatalf("discovery AEN %#x", cpl.DW0)
	}
	gen2, _ := readDiscoveryLog(t, d.admin)
	if gen2 <= gen {
		t.Fatalf("GENCTR %d → %d", gen, gen2)
	}
	// The remote entries of the test subsystem keep their own host list.
	if _, eb := readDiscoveryLog(t, b.admin); len(eb) != 6 {
		t.Fatalf("host B after AllowHost: %d entries", len(eb))
	}
	aer, _ = d.admin.start(t, newCmd(nvme.AdminAsyncEventReq), nil)
	env.tgt.SetRemoteSubsystems(nil)
	if cpl, _ := d.admin.wait(t, aer); cpl.DW0 != nvme.AENDiscoveryChange {
		t.Fatalf("discovery AEN %#x", cpl.DW0)
	}
	if _, e := readDiscoveryLog(t, d.admin); len(e) != 4 {
		t.Fatalf("%d entries after dropping the other nodes' ports", len(e))
	}
	// Odd windows of the log equal slices of the whole.
	_, hdr := d.admin.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, true, 0, 1024, 0), nil)
	_, n := nvme.DecodeDiscoveryLogHeader(hdr)
	total := uint32(1024 + 1024*n)
	_, full := d.admin.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, true, 0, total, 0), nil)
	_, part := d.admin.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, true, 0, 1500, 1536), nil)
	if !bytes.Equal(part, full[1536:1536+1500]) {
		t.Fatal("discovery log window differs")
	}
}

// nvmet_parse_discovery_cmd: a discovery controller accepts only its few
// commands; it has no namespaces and no I/O queues.
func TestDiscoveryRejects(t *testing.T) {
	env := newEnv(t)
	d := env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, env.ports[0], 0)
	for _, tc := range []struct {
		name string
		cmd  nvme.Command
		want nvme.Status
	}{
		{"identify ns", identifyCmd(nvme.CNSNamespace, 1, 0), nvme.StatusInvalidField},
		{"identify ns list", identifyCmd(nvme.CNSActiveNSList, 0, 0), nvme.StatusInvalidField},
		{"SMART log", getLogCmd(nvme.LogSMART, 0, false, 0, 512, 0), nvme.StatusInvalidLogPage},
		{"ANA log", getLogCmd(nvme.LogANA, 0, false, 0, 512, 0), nvme.StatusInvalidLogPage},
		{"number of queues", setFeatCmd(nvme.FeatNumberOfQueues, 0), nvme.StatusInvalidField},
		{"abort", newCmd(nvme.AdminAbort), nvme.StatusInvalidOpcode},
		{"create I/O SQ", newCmd(0x01), nvme.StatusInvalidOpcode},
	} {
		cpl, _ := d.admin.do(t, tc.cmd, nil)
		expectStatus(t, tc.name, cpl, tc.want)
	}
	d.admin.mustDo(t, setFeatCmd(nvme.FeatKeepAliveTimer, 30000), nil)
	d.admin.mustDo(t, setFeatCmd(nvme.FeatAsyncEventConfig, 1<<31), nil)
	d.admin.mustDo(t, newCmd(nvme.AdminKeepAlive), nil)
	cpl, _ := d.admin.do(t, setFeatCmd(nvme.FeatAsyncEventConfig, 1<<11), nil)
	expectStatus(t, "ANA AEN on discovery", cpl, nvme.StatusInvalidField)
	q := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ = q.do(t, connectCmd(1, 31, 0, 0), connectData(d.cntlid, nvme.DiscoveryNQN, testHostNQN))
	expectStatus(t, "I/O queue on discovery", cpl, nvme.StatusConnectInvalidParameters)
	// CC with zero queue entry sizes is fine for a discovery controller.
	d2 := newFakeQueue(env.tgt, env.ports[0])
	d2.mustDo(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, nvme.DiscoveryNQN, testHostB))
	d2.mustDo(t, propSetCmd(nvme.PropCC, 1), nil)
	if cpl, _ := d2.mustDo(t, propGetCmd(nvme.PropCSTS, false), nil); cpl.DW0 != nvme.CSTSReady {
		t.Fatalf("discovery CSTS %#x", cpl.DW0)
	}
	// The Linux host warns "queue_size 128 > ctrl sqsize 32, clamping down"
	// unless a discovery controller reports MQES and MAXCMD of at least its
	// default queue_size (seen in tests/e2e against Debian 12's kernel).
	if cpl, _ := d2.mustDo(t, propGetCmd(nvme.PropCAP, true), nil); cpl.DW0&0xFFFF != uint32(DefaultMQES) {
		t.Fatalf("discovery CAP.MQES %d, want %d", cpl.DW0&0xFFFF, DefaultMQES)
	}
}
