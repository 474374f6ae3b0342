package target

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/nvme"
)

// Errors returned by the configuration API, and the reasons passed to
// QueueOps.Close.
var (
	ErrClosed           = errors.New("target: closed")
	ErrInvalidConfig    = errors.New("target: invalid configuration")
	ErrExists           = errors.New("target: already exists")
	ErrNotFound         = errors.New("target: not found")
	ErrKeepAliveExpired = errors.New("target: keep alive timer expired")
	ErrAdminQueueGone   = errors.New("target: admin queue released")
	ErrControllerReset  = errors.New("target: controller reset (CC.EN 1→0)")
	ErrHostRemoved      = errors.New("target: host no longer allowed")
	ErrSubsystemRemoved = errors.New("target: subsystem removed")
	ErrNamespaceRemoved = errors.New("target: namespace removed with commands in flight")
	// ErrDrainTimeout: a removal finished with commands still in the
	// backend after Config.DrainTimeout.
	ErrDrainTimeout = errors.New("target: commands still in flight after the drain timeout")
)

// Defaults for Config fields left zero.
const (
	DefaultCNTLIDMin         = 1
	DefaultCNTLIDMax         = 0xFFEF // highest valid dynamic CNTLID
	DefaultMDTS              = 5      // 2^5 × 4 KiB = 128 KiB
	DefaultInCapsuleDataSize = 8192
	DefaultMaxIOQueues       = 32
	DefaultMQES              = 127 // 0's based: 128 entries
	DefaultMaxNamespaces     = 128
	// DefaultMaxANAGroupID is ANAGRPMAX: a cluster gives each volume (one
	// subsystem) an ANA group ID unique in the cluster, so IDs range far
	// above the namespaces of one subsystem.
	DefaultMaxANAGroupID  = 0xFFFF
	DefaultKeepAliveGrace = time.Second
	DefaultDiscoveryKATO  = 120 * time.Second
	// AdminQueueDepth is the largest admin queue (SQSIZE 31, as Linux sends).
	AdminQueueDepth = 32
	// AdminMaxTransfer is the data buffer of admin commands and of Fabrics
	// commands on any queue.
	AdminMaxTransfer = nvme.AdminICDSize
	// maxNamespacesLimit keeps the full ANA log (16 + 36 bytes per
	// namespace with one group each) within AdminMaxTransfer.
	maxNamespacesLimit = (AdminMaxTransfer - nvme.ANALogHeaderSize) / (nvme.ANAGroupHeaderSize + 4)
	// maxANAGroupIDLimit bounds ANAGRPMAX (the per-port state table keeps
	// a chunk pointer per anaChunkSize IDs).
	maxANAGroupIDLimit = 1 << 20
)

// Config configures a Target. Zero fields take the defaults above; all
// nodes of a cluster must use the same MDTS, MQES, MaxNamespaces, Serial and
// Model (the host compares Identify data across paths) and disjoint CNTLID
// ranges.
type Config struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// CNTLIDMin and CNTLIDMax bound the dynamic controller IDs this target
	// hands out (NVMe-oF 1.1 §3.3: unique within the subsystem, and so
	// across the nodes of a cluster).
	CNTLIDMin, CNTLIDMax uint16
	// MDTS is the maximum data transfer size of I/O commands, 2^MDTS × 4 KiB
	// (1..10).
	MDTS uint8
	// InCapsuleDataSize is the in-capsule data accepted on I/O queues
	// (multiple of 16; negative: none). IOCCSZ = 4 + InCapsuleDataSize/16.
	InCapsuleDataSize int
	// MaxIOQueues is the most I/O queues one controller grants.
	MaxIOQueues int
	// MQES is CAP.MQES, the largest I/O SQSIZE accepted (0's based).
	MQES uint16
	// Serial, Model and Firmware are the defaults for Identify SN, MN, FR.
	Serial, Model, Firmware string
	// MaxNamespaces is NN, MNAN and NANAGRPID: NSIDs are 1..MaxNamespaces,
	// and a subsystem has at most that many ANA groups. At most 227, so
	// that the ANA log the Linux host reads (16 + 32 × NANAGRPID + 4 ×
	// MNAN bytes) fits one 8 KiB admin transfer.
	MaxNamespaces uint32
	// MaxANAGroupID is ANAGRPMAX: ANA group IDs are 1..MaxANAGroupID,
	// at least MaxNamespaces (the default group of a namespace is its
	// NSID), at most 2^20. The IDs need not be dense: a cluster gives every
	// volume its own. Default DefaultMaxANAGroupID.
	MaxANAGroupID uint32
	// KeepAliveGrace is added to the host's KATO before a controller is
	// torn down for lack of Keep Alive commands.
	KeepAliveGrace time.Duration
	// DiscoveryKATO is enforced on discovery controllers that connect with
	// KATO 0, so abandoned ones do not live forever (cf. SPDK).
	DiscoveryKATO time.Duration
	// DrainTimeout bounds how long RemoveNamespace and RemoveSubsystem
	// wait for the commands in flight on the namespaces they remove; after
	// Close, all removals together end within DrainTimeout of it.
	// Default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// DHCHAP configures in-band authentication (see auth.go).
	DHCHAP DHCHAPConfig
	// DiscoveryAuth makes the discovery controller hold a host to its
	// credentials as a volume's subsystem does: DH-HMAC-CHAP for a host
	// with a DH-HMAC-CHAP secret, TLS for one with a PSK. Off (the
	// default, as the kernel's nvmet), the discovery controller asks
	// neither (it still takes a TLS connection): nvme-cli's `discover`
	// and `connect-all` do not authenticate to it, and what it shows a
	// host is only which subsystems that host NQN may reach, and where.
	DiscoveryAuth bool
}

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.CNTLIDMin == 0 {
		c.CNTLIDMin = DefaultCNTLIDMin
	}
	if c.CNTLIDMax == 0 {
		c.CNTLIDMax = DefaultCNTLIDMax
	}
	if c.MDTS == 0 {
		c.MDTS = DefaultMDTS
	}
	if c.InCapsuleDataSize == 0 {
		c.InCapsuleDataSize = DefaultInCapsuleDataSize
	}
	if c.MaxIOQueues == 0 {
		c.MaxIOQueues = DefaultMaxIOQueues
	}
	if c.MQES == 0 {
		c.MQES = DefaultMQES
	}
	c.Serial = cmp.Or(c.Serial, "basalt")
	c.Model = cmp.Or(c.Model, "Basalt")
	c.Firmware = cmp.Or(c.Firmware, "1.0")
	if c.MaxNamespaces == 0 {
		c.MaxNamespaces = DefaultMaxNamespaces
	}
	if c.MaxANAGroupID == 0 {
		c.MaxANAGroupID = max(DefaultMaxANAGroupID, c.MaxNamespaces)
	}
	if c.KeepAliveGrace == 0 {
		c.KeepAliveGrace = DefaultKeepAliveGrace
	}
	if c.DiscoveryKATO == 0 {
		c.DiscoveryKATO = DefaultDiscoveryKATO
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
}

// Validate reports every invalid field (call EnsureDefaults first).
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.CNTLIDMin < 1 || c.CNTLIDMax > DefaultCNTLIDMax || c.CNTLIDMin > c.CNTLIDMax {
		bad("CNTLID range [%d, %d] not within [1, %d]", c.CNTLIDMin, c.CNTLIDMax, DefaultCNTLIDMax)
	}
	if c.MDTS < 1 || c.MDTS > 10 {
		bad("MDTS %d not in 1..10", c.MDTS)
	}
	if c.InCapsuleDataSize > 0 && c.InCapsuleDataSize%16 != 0 || c.InCapsuleDataSize > 4096<<c.MDTS {
		bad("InCapsuleDataSize %d: not a multiple of 16 or above MDTS", c.InCapsuleDataSize)
	}
	if c.MaxIOQueues < 1 || c.MaxIOQueues > 0xFFFE {
		bad("MaxIOQueues %d not in 1..65534", c.MaxIOQueues)
	}
	if c.MQES < 1 || c.MQES == 0xFFFF {
		bad("MQES %d not in 1..65534 (MAXCMD = MQES+1 is 16 bits)", c.MQES)
	}
	if c.MaxNamespaces < 1 || c.MaxNamespaces > maxNamespacesLimit {
		bad("MaxNamespaces %d not in 1..%d", c.MaxNamespaces, maxNamespacesLimit)
	}
	if c.MaxANAGroupID < c.MaxNamespaces || c.MaxANAGroupID > maxANAGroupIDLimit {
		bad("MaxANAGroupID %d not in MaxNamespaces (%d)..%d", c.MaxANAGroupID, c.MaxNamespaces, maxANAGroupIDLimit)
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"Serial", c.Serial, 20}, {"Model", c.Model, 40}, {"Firmware", c.Firmware, 8}} {
		if !printableASCII(f.v, f.max) {
			bad("%s %q: not printable ASCII of at most %d bytes", f.name, f.v, f.max)
		}
	}
	if c.KeepAliveGrace < 0 || c.DiscoveryKATO < 0 || c.DrainTimeout < 0 {
		bad("negative KeepAliveGrace, DiscoveryKATO or DrainTimeout")
	}
	if err := c.DHCHAP.validate(); err != nil {
		bad("%v", err)
	}
	return errors.Join(errs...)
}

func printableASCII(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7E {
			return false
		}
	}
	return true
}

// maxTransfer is the I/O queue maximum data transfer size in bytes.
func (c *Config) maxTransfer() int { return 4096 << c.MDTS }

// icdSize is the in-capsule data size of I/O queues in bytes.
func (c *Config) icdSize() int { return max(c.InCapsuleDataSize, 0) }

// Target is an NVMe-oF target: subsystems with namespaces, ports, the
// discovery service, and the controllers hosts create by connecting (≈
// struct nvmet_subsys + nvmet_port + the nvmet globals). It is
// transport-independent: a transport creates one SQ per connection.
//
// Lock order: Target.mu, then Controller.mu. The I/O path takes neither.
type Target struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock
	// ctx is canceled by Close; every SQ context derives from it.
	ctx    context.Context
	cancel context.CancelFunc

	mu struct {
		sync.Mutex
		closed     bool
		closedAt   time.Time // when Close was called
		subsystems map[string]*Subsystem
		ports      map[uint16]*Port
		// remote are the subsystems served on other nodes' ports,
		// normalized (SetRemoteSubsystems).
		remote     []RemoteSubsystem
		ana        map[uint16]*anaPort // by port ID
		ctrls      map[ctrlKey]*Controller
		sqs        map[*SQ]struct{} // queues not yet released
		nextCNTLID uint16
		// retired accumulates the counters of released queues.
		retired counterTotals
	}
	// discovery is the discovery subsystem (nqn.2014-08.org.nvmexpress.discovery).
	discovery *Subsystem
	// defaultPort serves SQs created without a port.
	defaultPort *Port
	// genctr is the discovery log generation counter.
	genctr atomic.Uint64
	// anaChgcnt is the ANA log change count.
	anaChgcnt atomic.Uint64
	// doubleCompletions counts requests a handler tried to complete twice
	// (a bug; tests assert it stays 0).
	doubleCompletions atomic.Uint64
	// ctrlWG tracks the controllers' keep-alive goroutines.
	ctrlWG sync.WaitGroup
}

// New returns a Target with no subsystems and no ports.
func New(cfg Config) (*Target, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Target{cfg: cfg, log: cfg.Logger, clock: cfg.Clock}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.mu.subsystems = make(map[string]*Subsystem)
	t.mu.ports = make(map[uint16]*Port)
	t.mu.ana = make(map[uint16]*anaPort)
	t.mu.ctrls = make(map[ctrlKey]*Controller)
	t.mu.sqs = make(map[*SQ]struct{})
	t.mu.nextCNTLID = cfg.CNTLIDMin
	t.discovery = newSubsystem(t, SubsystemConfig{NQN: nvme.DiscoveryNQN, AllowAnyHost: true}, true)
	t.defaultPort = &Port{t: t, ana: t.anaPortLocked(0)}
	return t, nil
}

// Config returns the configuration in effect (defaults filled).
func (t *Target) Config() Config { return t.cfg }

// PortConfig describes a port as hosts reach it: the advertised address
// (never a wildcard), listed in discovery log entries.
type PortConfig struct {
	// ID is the PORTID; unique across the cluster.
	ID uint16
	// TRADDR and TRSVCID are the advertised address and TCP port.
	TRADDR, TRSVCID string
	// ADRFAM is 1 (IPv4) or 2 (IPv6); 0 derives it from TRADDR.
	ADRFAM uint8
	// TLS is what the port offers of the TLS secure channel; the
	// discovery log tells hosts when it is required.
	TLS TLSMode
}

func (pc *PortConfig) normalize() error {
	if pc.TRSVCID == "" || len(pc.TRSVCID) > 32 || len(pc.TRADDR) > 255 {
		return fmt.Errorf("%w: port %d: bad TRSVCID %q or TRADDR", ErrInvalidConfig, pc.ID, pc.TRSVCID)
	}
	addr, err := netip.ParseAddr(pc.TRADDR)
	if err != nil {
		if pc.ADRFAM == 0 || pc.TRADDR == "" {
			return fmt.Errorf("%w: port %d: TRADDR %q: %v", ErrInvalidConfig, pc.ID, pc.TRADDR, err)
		}
		return nil
	}
	if addr.IsUnspecified() {
		// NVMe-oF 1.1 §5.3: a host cannot connect to a wildcard.
		return fmt.Errorf("%w: port %d: wildcard TRADDR %q cannot be advertised", ErrInvalidConfig, pc.ID, pc.TRADDR)
	}
	if pc.ADRFAM == 0 {
		pc.ADRFAM = nvme.AddressFamilyIPv6
		if addr.Unmap().Is4() {
			pc.ADRFAM = nvme.AddressFamilyIPv4
		}
	}
	return nil
}

// Port is a local port: transports pass it to NewSQ so that controllers
// know their path (ANA state is kept per port, as nvmet does).
type Port struct {
	t   *Target
	cfg PortConfig
	ana *anaPort
}

// ID returns the port's PORTID.
func (p *Port) ID() uint16 { return p.cfg.ID }

// Config returns the port's configuration.
func (p *Port) Config() PortConfig { return p.cfg }

// AddPort registers a local port. Its ID must differ from every other port.
func (t *Target) AddPort(cfg PortConfig) (*Port, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return nil, ErrClosed
	}
	if _, ok := t.mu.ports[cfg.ID]; ok {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: port %d", ErrExists, cfg.ID)
	}
	p := &Port{t: t, cfg: cfg, ana: t.anaPortLocked(cfg.ID)}
	t.mu.ports[cfg.ID] = p
	disc := t.discoveryChangedLocked()
	t.mu.Unlock()
	postAll(disc, nvme.AENDiscoveryChange, nvme.AECDiscoveryChange)
	return p, nil
}

// RemovePort unregisters a local port; controllers connected through it
// stay until their connections close.
func (t *Target) RemovePort(id uint16) error {
	t.mu.Lock()
	if _, ok := t.mu.ports[id]; !ok {
		t.mu.Unlock()
		return fmt.Errorf("%w: port %d", ErrNotFound, id)
	}
	delete(t.mu.ports, id)
	disc := t.discoveryChangedLocked()
	t.mu.Unlock()
	postAll(disc, nvme.AENDiscoveryChange, nvme.AECDiscoveryChange)
	return nil
}

// ctrlKey names a controller: CNTLIDs are unique within a subsystem (NVMe
// Base 2.0 §3.1.1; the Linux host rejects a second controller of a
// subsystem with a CNTLID it already has), not across subsystems, so every
// subsystem has the whole [CNTLIDMin, CNTLIDMax] range on this node.
type ctrlKey struct {
	subsys *Subsystem
	id     uint16
}

// allocCNTLIDLocked returns a controller ID of the configured range that no
// controller of s has, trying from the one after the last handed out (by
// any subsystem), or false when s has used the whole range.
func (t *Target) allocCNTLIDLocked(s *Subsystem) (uint16, bool) {
	lo, hi := t.cfg.CNTLIDMin, t.cfg.CNTLIDMax
	n := int(hi-lo) + 1
	id := t.mu.nextCNTLID
	for range n {
		if id < lo || id > hi {
			id = lo
		}
		if _, used := t.mu.ctrls[ctrlKey{s, id}]; !used {
			t.mu.nextCNTLID = id + 1
			return id, true
		}
		id++
	}
	return 0, false
}

// Close tears down every controller (closing all their queues) and refuses
// new connections. It is idempotent.
func (t *Target) Close() error {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return nil
	}
	t.mu.closed = true
	t.mu.closedAt = t.clock.Now()
	ctrls := t.controllersLocked(nil)
	t.mu.Unlock()
	for _, c := range ctrls {
		c.destroy(ErrClosed)
	}
	t.cancel()
	t.ctrlWG.Wait()
	return nil
}

// controllersLocked returns the controllers for which keep returns true
// (all when keep is nil), in CNTLID order, then subsystem NQN order.
func (t *Target) controllersLocked(keep func(*Controller) bool) []*Controller {
	var out []*Controller
	for _, c := range t.mu.ctrls {
		if keep == nil || keep(c) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *Controller) int {
		return cmp.Or(cmp.Compare(a.cntlid, b.cntlid), strings.Compare(a.subsys.nqn, b.subsys.nqn))
	})
	return out
}

// Stats are the target-wide counters for status pages and metrics.
type Stats struct {
	Subsystems, Namespaces, Ports               int
	Controllers, DiscoveryControllers, IOQueues int
	// Commands and the rest sum over all queues, live and released.
	Commands, Errors, ReadCommands, WriteCommands uint64
	BytesRead, BytesWritten                       uint64
	// DoubleCompletions must be 0; anything else is a bug in the core.
	DoubleCompletions uint64
	// DiscoveryGeneration is the discovery log GENCTR; ANAChangeCount the
	// ANA log CHGCNT.
	DiscoveryGeneration, ANAChangeCount uint64
}

// Stats returns the current counters.
func (t *Target) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{Subsystems: len(t.mu.subsystems), Ports: len(t.mu.ports)}
	for _, sub := range t.mu.subsystems {
		s.Namespaces += len(sub.table().list)
	}
	for _, c := range t.mu.ctrls {
		if c.discovery {
			s.DiscoveryControllers++
		} else {
			s.Controllers++
		}
	}
	sum := t.mu.retired
	for sq := range t.mu.sqs {
		if sq.QID() > 0 {
			s.IOQueues++
		}
		sum.add(sq.counters.totals())
	}
	s.Commands, s.Errors = sum.commands, sum.errors
	s.ReadCommands, s.WriteCommands = sum.readCmds, sum.writeCmds
	s.BytesRead, s.BytesWritten = sum.bytesRead, sum.bytesWritten
	s.DoubleCompletions = t.doubleCompletions.Load()
	s.DiscoveryGeneration, s.ANAChangeCount = t.genctr.Load(), t.anaChgcnt.Load()
	return s
}

// ControllerInfo describes one controller for status listings.
type ControllerInfo struct {
	CNTLID    uint16
	SubNQN    string
	HostNQN   string
	HostID    [16]byte
	PortID    uint16
	Discovery bool
	Enabled   bool
	IOQueues  int
	KATO      time.Duration
}

// Controllers lists the live controllers in CNTLID order.
func (t *Target) Controllers() []ControllerInfo {
	t.mu.Lock()
	ctrls := t.controllersLocked(nil)
	t.mu.Unlock()
	out := make([]ControllerInfo, 0, len(ctrls))
	for _, c := range ctrls {
		out = append(out, c.info())
	}
	return out
}
