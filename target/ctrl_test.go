package target

import (
	"errors"
	"testing"
	"time"

	"basalt/pkg/nvme"
)

// NVMe Base 2.0 §5.2: AERs are long-lived, events queue while none is
// outstanding, an event kind stays masked until its log is read with RAE=0,
// AERL+1 is the limit, and teardown aborts the AERs.
func TestAsyncEvents(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := a.admin
	// An event before any AER is queued and completes the next AER at once.
	env.tgt.SetANAState(1, 1, nvme.ANANonOptimized)
	cpl, _ := q.mustDo(t, newCmd(nvme.AdminAsyncEventReq), nil)
	if cpl.DW0 != 0x000C0302 {
		t.Fatalf("AEN DW0 %#x, want ANA change", cpl.DW0)
	}
	// Masked until the ANA log is read with RAE = 0.
	aer, _ := q.start(t, newCmd(nvme.AdminAsyncEventReq), nil)
	env.tgt.SetANAState(1, 1, nvme.ANAOptimized)
	q.mustDo(t, getLogCmd(nvme.LogANA, 0, true, nvme.NSIDAll, 4096, 0), nil) // RAE=1: still masked
	env.tgt.SetANAState(1, 1, nvme.ANANonOptimized)
	select {
	case <-q.done:
		t.Fatal("masked ANA event completed an AER")
	case <-time.After(10 * time.Millisecond):
	}
	q.mustDo(t, getLogCmd(nvme.LogANA, 0, false, nvme.NSIDAll, 4096, 0), nil)
	env.tgt.SetANAState(1, 1, nvme.ANAOptimized)
	if cpl, _ := q.wait(t, aer); cpl.DW0 != nvme.AENANAChange || !cpl.Status.Success() {
		t.Fatalf("AER after unmask: %#x %v", cpl.DW0, cpl.Status)
	}
	// A group on another port, or not in this subsystem: no event.
	aer, _ = q.start(t, newCmd(nvme.AdminAsyncEventReq), nil)
	q.mustDo(t, getLogCmd(nvme.LogANA, 0, false, nvme.NSIDAll, 4096, 0), nil)
	env.tgt.SetANAState(1, 2, nvme.ANAInaccessible)
	env.tgt.SetANAState(50, 1, nvme.ANAInaccessible)
	// Namespace attached: Namespace Attribute Changed, and the Changed
	// Namespace List names it (then is cleared).
	if err := env.sub.AddNamespace(NamespaceConfig{NSID: 9, Backend: newMemBackend(1<<16, 512)}); err != nil {
		t.Fatal(err)
	}
	if cpl, _ := q.wait(t, aer); cpl.DW0 != nvme.AENNSAttrChanged {
		t.Fatalf("AEN %#x, want NS attribute changed", cpl.DW0)
	}
	_, log := q.mustDo(t, getLogCmd(nvme.LogChangedNSList, 0, false, 0, 4096, 0), nil)
	if le32(log) != 9 || le32(log[4:]) != 0 {
		t.Fatalf("changed NS list % x", log[:8])
	}
	_, log = q.mustDo(t, getLogCmd(nvme.LogChangedNSList, 0, false, 0, 4096, 0), nil)
	if le32(log) != 0 {
		t.Fatal("changed NS list not cleared by the read")
	}
	// Disabled by Set Features 0Bh: no event.
	q.mustDo(t, setFeatCmd(nvme.FeatAsyncEventConfig, 0), nil)
	aer, _ = q.start(t, newCmd(nvme.AdminAsyncEventReq), nil)
	if err := env.sub.RemoveNamespace(9); err != nil {
		t.Fatal(err)
	}
	env.tgt.SetANAState(2, 1, nvme.ANAInaccessible)
	// AERL+1 = 4 outstanding; the 5th exceeds the limit.
	var more []*Request
	for range 3 {
		r, _ := q.start(t, newCmd(nvme.AdminAsyncEventReq), nil)
		more = append(more, r)
	}
	cpl, _ = q.do(t, newCmd(nvme.AdminAsyncEventReq), nil)
	expectStatus(t, "5th AER", cpl, nvme.StatusAERLimitExceeded)
	// Teardown completes every outstanding AER exactly once.
	q.sq.Release()
	for _, r := range append(more, aer) {
		if cpl, _ := q.wait(t, r); cpl.Status != nvme.StatusAbortSQDeletion {
			t.Fatalf("AER at teardown: %v", cpl.Status)
		}
	}
}

// NVMe Base 2.0 §3.9: the Connect KATO is enforced with a small grace; Keep
// Alive restarts the timer; expiry tears down the whole association and frees
// the CNTLID.
func TestKeepAliveExpiry(t *testing.T) {
	env := newEnv(t, func(c *Config, _ *SubsystemConfig) { c.KeepAliveGrace = 500 * time.Millisecond })
	a := env.standard()
	env.clk.BlockUntil(1)
	env.clk.Advance(4 * time.Second)
	a.admin.mustDo(t, newCmd(nvme.AdminKeepAlive), nil)
	env.clk.Advance(5 * time.Second) // 5 s after the Keep Alive: within KATO + grace
	env.clk.BlockUntil(1)
	for _, q := range append(a.io, a.admin) {
		if q.isClosed() {
			t.Fatal("queue closed within KATO + grace")
		}
	}
	// I/O commands are not keep-alive traffic (TBKAS is not advertised).
	a.io[0].mustDo(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
	env.clk.Advance(501 * time.Millisecond)
	for _, q := range append(a.io, a.admin) {
		waitClosed(t, q)
		if !errors.Is(q.closeReason(), ErrKeepAliveExpired) {
			t.Fatalf("close reason %v", q.closeReason())
		}
	}
	cpl, _ := a.admin.do(t, propGetCmd(nvme.PropCSTS, false), nil)
	if cpl.Status != nvme.StatusAbortSQDeletion {
		t.Fatalf("command on an expired controller: %v", cpl.Status)
	}
	if len(env.tgt.Controllers()) != 0 {
		t.Fatal("expired controller still listed")
	}
	// The transport releases the queues; the host reconnects with a new
	// association, and an I/O Connect naming the old CNTLID fails.
	for _, q := range append(a.io, a.admin) {
		q.sq.Release()
	}
	b := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 5000)
	if b.cntlid == a.cntlid {
		t.Fatalf("CNTLID %#x reused at once", b.cntlid)
	}
	q := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ = q.do(t, connectCmd(1, 31, 0, 0), connectData(a.cntlid, testSubNQN, testHostNQN))
	expectStatus(t, "stale CNTLID", cpl, nvme.StatusConnectInvalidParameters)
	// Set Features KATO re-arms the timer with the new value.
	b.admin.mustDo(t, setFeatCmd(nvme.FeatKeepAliveTimer, 60000), nil)
	env.clk.Advance(30 * time.Second)
	if b.admin.isClosed() {
		t.Fatal("closed before the new KATO")
	}
	env.clk.Advance(31 * time.Second)
	waitClosed(t, b.admin)
}

// KATO 0 disables the timer for I/O controllers; discovery controllers then
// get DiscoveryKATO (SPDK's 120 s).
func TestKeepAliveZero(t *testing.T) {
	env := newEnv(t)
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
	d := env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, env.ports[0], 0)
	env.clk.BlockUntil(1)
	env.clk.Advance(121 * time.Second)
	waitClosed(t, d.admin)
	if a.admin.isClosed() {
		t.Fatal("KATO 0 I/O controller expired")
	}
}

// Closing the admin queue destroys the controller and closes its I/O queues
// (the Linux host then reconnects with a new admin Connect); closing an I/O
// queue frees only its QID.
func TestAdminReleaseDestroysController(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	a.io[1].sq.Release()
	a.io[1].sq.Release() // idempotent
	if a.io[0].isClosed() || a.admin.isClosed() {
		t.Fatal("I/O queue release closed other queues")
	}
	q := newFakeQueue(env.tgt, env.ports[0])
	q.mustDo(t, connectCmd(2, 31, 0, 0), connectData(a.cntlid, testSubNQN, testHostNQN))
	a.admin.sq.Release()
	waitClosed(t, a.io[0])
	waitClosed(t, q)
	if !errors.Is(q.closeReason(), ErrAdminQueueGone) {
		t.Fatalf("close reason %v", q.closeReason())
	}
	if st := env.tgt.Stats(); st.Controllers != 0 || st.DoubleCompletions != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Host access lists (a subsystem's allowed host NQNs): a host sees
// only subsystems it may access; revoking access tears its controllers down.
func TestHostAccess(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ := q.do(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostB))
	expectStatus(t, "host B", cpl, nvme.StatusConnectInvalidHost)
	env.sub.AllowHost(testHostB)
	if !env.sub.HostAllowed(testHostB) {
		t.Fatal("AllowHost had no effect")
	}
	b := env.connectAdmin(testSubNQN, testHostB, env.ports[0], 5000)
	env.sub.DisallowHost(testHostB)
	waitClosed(t, b.admin)
	if !errors.Is(b.admin.closeReason(), ErrHostRemoved) || a.admin.isClosed() {
		t.Fatal("DisallowHost closed the wrong controllers")
	}
	q2 := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ = q2.do(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostB))
	expectStatus(t, "host B after revoke", cpl, nvme.StatusConnectInvalidHost)
	env.sub.SetAllowAnyHost(true)
	env.connectAdmin(testSubNQN, "nqn.2014-08.org.nvmexpress:uuid:anyone", env.ports[0], 0)
	env.sub.SetAllowAnyHost(false)
	if hosts, any := env.sub.Hosts(); any || len(hosts) != 1 || hosts[0] != testHostNQN {
		t.Fatalf("hosts %v any %v", hosts, any)
	}
	if n := len(env.tgt.Controllers()); n != 1 {
		t.Fatalf("%d controllers after SetAllowAnyHost(false), want host A's only", n)
	}
	// Removing the subsystem tears down the rest.
	if err := env.tgt.RemoveSubsystem(testSubNQN); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, a.admin)
	if err := env.tgt.RemoveSubsystem(testSubNQN); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second RemoveSubsystem: %v", err)
	}
}

// Dynamic CNTLIDs come from the configured range (disjoint per node: the
// Linux host rejects a controller whose CNTLID another controller of the
// subsystem already has) and are unique; an exhausted range answers
// Controller Busy.
func TestCNTLIDRange(t *testing.T) {
	env := newEnv(t, func(c *Config, _ *SubsystemConfig) { c.CNTLIDMin, c.CNTLIDMax = 0x2001, 0x2003 })
	seen := map[uint16]bool{}
	var as []*assoc
	for range 3 {
		a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
		if a.cntlid < 0x2001 || a.cntlid > 0x2003 || seen[a.cntlid] {
			t.Fatalf("CNTLID %#x", a.cntlid)
		}
		seen[a.cntlid] = true
		as = append(as, a)
	}
	q := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ := q.do(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	expectStatus(t, "exhausted", cpl, nvme.StatusConnectControllerBusy)
	as[1].admin.sq.Release()
	if b := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0); b.cntlid != as[1].cntlid {
		t.Fatalf("freed CNTLID %#x not reused, got %#x", as[1].cntlid, b.cntlid)
	}
}

// Close tears down every controller and refuses new associations.
func TestTargetClose(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	d := env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, env.ports[0], 0)
	if err := env.tgt.Close(); err != nil {
		t.Fatal(err)
	}
	for _, q := range append(a.io, a.admin, d.admin) {
		waitClosed(t, q)
	}
	q := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ := q.do(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	expectStatus(t, "connect after close", cpl, nvme.StatusConnectControllerBusy)
	if _, err := env.tgt.AddPort(PortConfig{ID: 9, TRADDR: "192.0.2.9", TRSVCID: "4420"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddPort after Close: %v", err)
	}
	if err := env.tgt.Close(); err != nil {
		t.Fatal(err)
	}
}

// Config defaults and validation.
func TestConfig(t *testing.T) {
	var c Config
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.MDTS != 5 || c.InCapsuleDataSize != 8192 || c.MQES != 127 || c.CNTLIDMin != 1 || c.CNTLIDMax != 0xFFEF || c.MaxNamespaces != 128 ||
		c.MaxANAGroupID != DefaultMaxANAGroupID {
		t.Fatalf("defaults %+v", c)
	}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
	}{
		{"CNTLID range inverted", func(c *Config) { c.CNTLIDMin, c.CNTLIDMax = 10, 5 }},
		{"CNTLID max reserved", func(c *Config) { c.CNTLIDMax = 0xFFF0 }},
		{"MDTS 11", func(c *Config) { c.MDTS = 11 }},
		{"MQES 65535", func(c *Config) { c.MQES = 0xFFFF }},
		{"ICD not multiple of 16", func(c *Config) { c.InCapsuleDataSize = 100 }},
		{"ICD above MDTS", func(c *Config) { c.InCapsuleDataSize = 1 << 20 }},
		{"MaxNamespaces too large for the ANA log", func(c *Config) { c.MaxNamespaces = 228 }},
		{"MaxANAGroupID below MaxNamespaces", func(c *Config) { c.MaxANAGroupID = c.MaxNamespaces - 1 }},
		{"MaxANAGroupID above the limit", func(c *Config) { c.MaxANAGroupID = maxANAGroupIDLimit + 1 }},
		{"serial too long", func(c *Config) { c.Serial = "012345678901234567890" }},
		{"model not ASCII", func(c *Config) { c.Model = "Basalt\x00" }},
	} {
		c := Config{}
		c.EnsureDefaults()
		tc.mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted it", tc.name)
		}
	}
	// Negative in-capsule size: no ICD on I/O queues, IOCCSZ 4.
	tgt, err := New(Config{InCapsuleDataSize: -1})
	if err != nil || tgt.cfg.icdSize() != 0 {
		t.Fatalf("InCapsuleDataSize -1: %v", err)
	}
	tgt.Close()
}

// Port and subsystem configuration errors.
func TestConfigErrors(t *testing.T) {
	env := newEnv(t)
	for _, pc := range []PortConfig{
		{ID: 1, TRADDR: "192.0.2.7", TRSVCID: "4420"}, // duplicate ID
		{ID: 7, TRADDR: "0.0.0.0", TRSVCID: "4420"},   // wildcard
		{ID: 7, TRADDR: "::", TRSVCID: "4420"},
		{ID: 7, TRADDR: "192.0.2.7"},               // no TRSVCID
		{ID: 7, TRADDR: "node-a", TRSVCID: "4420"}, // not an IP, no ADRFAM
	} {
		if _, err := env.tgt.AddPort(pc); err == nil {
			t.Errorf("AddPort(%+v) accepted", pc)
		}
	}
	p, err := env.tgt.AddPort(PortConfig{ID: 7, TRADDR: "2001:db8::1", TRSVCID: "4420"})
	if err != nil || p.Config().ADRFAM != nvme.AddressFamilyIPv6 {
		t.Fatalf("IPv6 port: %v %+v", err, p)
	}
	if err := env.tgt.RemovePort(7); err != nil {
		t.Fatal(err)
	}
	if err := env.tgt.RemovePort(7); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	be := newMemBackend(1<<16, 512)
	for _, sc := range []SubsystemConfig{
		{NQN: testSubNQN},        // exists
		{NQN: nvme.DiscoveryNQN}, // reserved
		{NQN: ""},
		{NQN: "nqn.x:a", Namespaces: []NamespaceConfig{{NSID: 0, Backend: be}}},
		{NQN: "nqn.x:b", Namespaces: []NamespaceConfig{{NSID: 129, Backend: be}}},
		{NQN: "nqn.x:c", Namespaces: []NamespaceConfig{{NSID: 1}}},
		{NQN: "nqn.x:d", Namespaces: []NamespaceConfig{{NSID: 1, Backend: newMemBackend(1000, 512)}}},
		{NQN: "nqn.x:e", Namespaces: []NamespaceConfig{{NSID: 1, Backend: newMemBackend(1<<16, 256)}}},
		{NQN: "nqn.x:f", Namespaces: []NamespaceConfig{{NSID: 1, Backend: be, ANAGroup: DefaultMaxANAGroupID + 1}}},
		{NQN: "nqn.x:g", Namespaces: []NamespaceConfig{{NSID: 1, Backend: be}, {NSID: 1, Backend: be}}},
	} {
		if _, err := env.tgt.AddSubsystem(sc); err == nil {
			t.Errorf("AddSubsystem(%q) accepted", sc.NQN)
		}
	}
	if err := env.sub.AddNamespace(NamespaceConfig{NSID: 1, Backend: be}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate NSID: %v", err)
	}
	if err := env.sub.RemoveNamespace(77); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove unknown: %v", err)
	}
	if env.tgt.Subsystem("nqn.none") != nil || env.tgt.Subsystem(testSubNQN) != env.sub {
		t.Fatal("Subsystem lookup")
	}
}

// The read-only accessors the daemon's status pages use.
func TestAccessors(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	if got := env.tgt.Subsystems(); len(got) != 1 || got[0] != testSubNQN || env.sub.NQN() != testSubNQN {
		t.Fatalf("Subsystems %v", got)
	}
	nss := env.sub.Namespaces()
	if len(nss) != 2 || nss[0].NSID() != 1 || nss[1].ANAGroup() != 2 || nss[1].Backend() != env.be[2] ||
		nss[1].BlockSize() != 4096 || nss[0].Blocks() != 2048 {
		t.Fatalf("namespaces %+v", nss)
	}
	c := a.admin.sq.Controller()
	if c == nil || c.CNTLID() != a.cntlid || a.io[1].sq.Controller() != c || a.io[1].sq.QID() != 2 {
		t.Fatal("SQ → controller")
	}
	infos := env.tgt.Controllers()
	if len(infos) != 1 || infos[0].CNTLID != a.cntlid || infos[0].IOQueues != 2 || !infos[0].Enabled ||
		infos[0].KATO != 5*time.Second || infos[0].HostNQN != testHostNQN || infos[0].PortID != 1 || infos[0].HostID != testHostID {
		t.Fatalf("controllers %+v", infos)
	}
	if cfg := env.tgt.Config(); cfg.CNTLIDMin != 0x1001 || cfg.MDTS != 5 {
		t.Fatalf("config %+v", cfg)
	}
	if st := env.tgt.Stats(); st.Subsystems != 1 || st.Namespaces != 2 || st.Ports != 2 || st.Controllers != 1 || st.IOQueues != 2 {
		t.Fatalf("stats %+v", st)
	}
}
