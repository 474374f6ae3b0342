package target

import (
	"fmt"
	"runtime"
	"testing"

	"basalt/pkg/nvme"
)

// A cluster exports each volume as its own subsystem with NSID 1 and an
// ANA group ID unique in the cluster, so group IDs go far above
// MaxNamespaces. Identify reports ANAGRPMAX = MaxANAGroupID and NANAGRPID
// = MaxNamespaces; each controller's ANA log holds its subsystem's group
// only, within the size the Linux host reads (16 + 32 × NANAGRPID + 4 ×
// MNAN); states stay per port and group.
func TestANAGroupIDsAboveMaxNamespaces(t *testing.T) {
	env := newEnv(t)
	groups := []uint32{200, anaChunkSize*7 + 3, DefaultMaxANAGroupID}
	var assocs []*assoc
	for i, g := range groups {
		nqn := fmt.Sprintf("nqn.2026-11.io.basalt:v%d", i)
		_, err := env.tgt.AddSubsystem(SubsystemConfig{NQN: nqn, AllowAnyHost: true,
			Namespaces: []NamespaceConfig{{NSID: 1, Backend: newMemBackend(1<<16, 512), ANAGroup: g}}})
		if err != nil {
			t.Fatalf("group %d: %v", g, err)
		}
		assocs = append(assocs, env.connectAdmin(nqn, testHostNQN, env.ports[1], 5000))
	}
	env.tgt.SetANAState(groups[1], 2, nvme.ANAInaccessible)
	for i, a := range assocs {
		_, data := a.admin.mustDo(t, identifyCmd(nvme.CNSController, 0, 0), nil)
		id := nvme.UnmarshalIdentifyController(data)
		if id.ANAGRPMAX != DefaultMaxANAGroupID || id.NANAGRPID != DefaultMaxNamespaces || id.NANAGRPID > id.ANAGRPMAX {
			t.Fatalf("ANAGRPMAX %d NANAGRPID %d", id.ANAGRPMAX, id.NANAGRPID)
		}
		size := uint32(nvme.ANALogHeaderSize) + id.NANAGRPID*nvme.ANAGroupHeaderSize + id.MNAN*4
		if size > AdminMaxTransfer {
			t.Fatalf("the ANA log the host reads (%d bytes) exceeds the admin transfer", size)
		}
		_, log := a.admin.mustDo(t, getLogCmd(nvme.LogANA, 0, false, nvme.NSIDAll, size, 0), nil)
		h := nvme.UnmarshalANAHeader(log)
		d := nvme.UnmarshalANAGroupDescriptor(log[nvme.ANALogHeaderSize:])
		want := nvme.ANAOptimized
		if i == 1 {
			want = nvme.ANAInaccessible
		}
		if h.NGRPS != 1 || d.ANAGRPID != groups[i] || d.State != want || d.NNSIDS != 1 ||
			le32(log[nvme.ANALogHeaderSize+nvme.ANAGroupHeaderSize:]) != 1 {
			t.Fatalf("subsystem %d: ANA log header %+v descriptor %+v (want group %d %v)", i, h, d, groups[i], want)
		}
	}
	// Port 1 never changed: its table has no chunk; port 2 has one.
	env.tgt.mu.Lock()
	p1, p2 := env.tgt.mu.ana[1], env.tgt.mu.ana[2]
	env.tgt.mu.Unlock()
	if n1, n2 := usedChunks(p1), usedChunks(p2); n1 != 0 || n2 != 1 {
		t.Fatalf("chunks allocated: port 1 %d, port 2 %d (want 0, 1)", n1, n2)
	}
	if s := env.tgt.ANAState(groups[1], 1); s != nvme.ANAOptimized {
		t.Fatalf("group %d on port 1: %v", groups[1], s)
	}
}

func usedChunks(p *anaPort) int {
	n := 0
	for i := range p.chunks {
		if p.chunks[i].Load() != nil {
			n++
		}
	}
	return n
}

// Controller IDs are unique within a subsystem, so each subsystem has the
// whole range: a node serving a thousand volumes to one host needs a
// thousand controllers but only one CNTLID per volume. An I/O Connect
// names its controller by SUBNQN and CNTLID together.
func TestCNTLIDRangePerSubsystem(t *testing.T) {
	env := newEnv(t, func(c *Config, _ *SubsystemConfig) { c.CNTLIDMin, c.CNTLIDMax = 0x2001, 0x2002 })
	const other = "nqn.2026-11.io.basalt:other"
	if _, err := env.tgt.AddSubsystem(SubsystemConfig{NQN: other, AllowAnyHost: true,
		Namespaces: []NamespaceConfig{{NSID: 1, Backend: newMemBackend(1<<16, 512)}}}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]map[uint16]*assoc{testSubNQN: {}, other: {}}
	for range 2 {
		for _, nqn := range []string{testSubNQN, other} {
			a := env.connectAdmin(nqn, testHostNQN, env.ports[0], 0)
			if a.cntlid < 0x2001 || a.cntlid > 0x2002 || ids[nqn][a.cntlid] != nil {
				t.Fatalf("%s: CNTLID %#x", nqn, a.cntlid)
			}
			ids[nqn][a.cntlid] = a
		}
	}
	for _, nqn := range []string{testSubNQN, other} {
		q := newFakeQueue(env.tgt, env.ports[0])
		cpl, _ := q.do(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, nqn, testHostNQN))
		expectStatus(t, nqn+" exhausted", cpl, nvme.StatusConnectControllerBusy)
	}
	// An I/O queue of the other subsystem's controller 0x2001 joins that
	// controller, not the test subsystem's 0x2001.
	a := ids[other][0x2001]
	a.admin.mustDo(t, setFeatCmd(nvme.FeatNumberOfQueues, 0), nil)
	q := newFakeQueue(env.tgt, env.ports[0])
	q.mustDo(t, connectCmd(1, 31, 0, 0), connectData(0x2001, other, testHostNQN))
	for nqn, byID := range ids {
		for id, a := range byID {
			want := 0
			if nqn == other && id == 0x2001 {
				want = 1
			}
			if got := a.admin.sq.ctrl.Load().info().IOQueues; got != want {
				t.Fatalf("%s controller %#x has %d I/O queues, want %d", nqn, id, got, want)
			}
		}
	}
	if n := len(env.tgt.Controllers()); n != 4 {
		t.Fatalf("%d controllers listed, want 4", n)
	}
}

// A discovery log of hundreds of entries is read in 4 KiB pieces by
// offset (as nvme-cli does): the pieces put together are the log, and
// each piece costs far less memory than the whole log.
func TestDiscoveryLogInPieces(t *testing.T) {
	env := newEnv(t)
	const subs = 300
	for i := range subs {
		nqn := fmt.Sprintf("nqn.2026-11.io.basalt:v%04d", i)
		if _, err := env.tgt.AddSubsystem(SubsystemConfig{NQN: nqn, AllowAnyHost: true}); err != nil {
			t.Fatal(err)
		}
	}
	d := env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, env.ports[0], 0)
	const piece = 4096
	_, hdr := d.admin.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, false, 0, piece, 0), nil)
	numrec := le64(hdr[8:])
	if numrec != (subs+1)*2 { // every subsystem, the test one too, on both ports
		t.Fatalf("NUMREC %d", numrec)
	}
	size := nvme.DiscoveryLogHeaderSize + int(numrec)*nvme.DiscoveryLogEntrySize
	log := make([]byte, 0, size)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for off := 0; off < size; off += piece {
		_, b := d.admin.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, false, 0, piece, uint64(off)), nil)
		log = append(log, b[:min(piece, size-off)]...)
	}
	runtime.ReadMemStats(&ms1)
	pieces := uint64((size + piece - 1) / piece)
	if perPiece := (ms1.TotalAlloc - ms0.TotalAlloc) / pieces; perPiece > uint64(size)/4 {
		t.Fatalf("%d bytes allocated per 4 KiB piece of a %d-byte log", perPiece, size)
	}
	if le64(log) != le64(hdr) {
		t.Fatalf("GENCTR changed while reading")
	}
	prev := ""
	for i := range int(numrec) {
		e := log[nvme.DiscoveryLogHeaderSize+i*nvme.DiscoveryLogEntrySize:]
		nqn := cStr(e[256:512])
		port := uint16(e[4]) | uint16(e[5])<<8
		if want := uint16(i%2 + 1); port != want || (i%2 == 0 && nqn <= prev) || (i%2 == 1 && nqn != prev) {
			t.Fatalf("entry %d: %s on port %d after %s", i, nqn, port, prev)
		}
		prev = nqn
	}
	// Reading at the end returns zeroes; past it is Invalid Field.
	cpl, b := d.admin.do(t, getLogCmd(nvme.LogDiscovery, 0, false, 0, 16, uint64(size)), nil)
	expectStatus(t, "read at the end", cpl, nvme.StatusSuccess)
	if le64(b) != 0 {
		t.Fatalf("bytes at the end: %x", b)
	}
	cpl, _ = d.admin.do(t, getLogCmd(nvme.LogDiscovery, 0, false, 0, 16, uint64(size)+4), nil)
	expectStatus(t, "read past the end", cpl, nvme.StatusInvalidField)
}

func cStr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
