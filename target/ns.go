package target

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"basalt/pkg/backend"
	"basalt/pkg/invariant"
	"basalt/pkg/nvme"
)

// NamespaceConfig describes a namespace. NSID, NGUID, UUID and ANAGroup
// must be identical on every node that exports the volume (the host merges
// paths only when all identifiers match).
type NamespaceConfig struct {
	NSID    uint32
	Backend backend.Backend
	NGUID   [16]byte
	UUID    [16]byte
	// ANAGroup is the ANA group ID; 0 means NSID (one group per namespace).
	ANAGroup uint32
}

// NonBlocker is an optional capability of a backend.Backend. A backend
// whose NonBlocking returns true promises that none of its methods waits for
// I/O, timers, the network or other goroutines' progress (short internal
// locks held only around memory copies are allowed), and that it keeps no
// reference to a buffer once the call it was passed to returns. The core
// then executes the namespace's I/O commands inline in SQ.Execute, on the
// transport's receive goroutine, instead of handing them to a queue worker
// (and the transport may lend them its read buffer: SQ.DoneWithDataOnReturn).
// Backends without it, or returning false, always get a worker. A backend
// that is also a backend.AsyncWriter has its writes started inline in any
// case, and lent data only if it copies on submit (backend.CopiesOnSubmit):
// its WriteAtAsync may keep p until it calls back.
type NonBlocker interface {
	NonBlocking() bool
}

// Namespace is an active namespace of a subsystem (≈ struct nvmet_ns).
type Namespace struct {
	subsys   *Subsystem
	nsid     uint32
	be       backend.Backend
	nguid    [16]byte
	uuid     [16]byte
	anaGroup uint32
	lbaShift uint8
	// inline: the backend never blocks (NonBlocker), so its I/O commands
	// run on the transport's receive goroutine instead of a queue worker.
	inline bool
	// aw is the backend as a backend.AsyncWriter, or nil: its writes then
	// run on the receive goroutine, completing when the backend calls back,
	// instead of holding a queue worker while they wait.
	aw backend.AsyncWriter
	// copiesOnSubmit: aw is done with a write's data when WriteAtAsync
	// returns (backend.CopiesOnSubmit), so the transport may lend it.
	copiesOnSubmit bool
	// nsze is the size in logical blocks; NotifyNamespaceChanged updates it.
	nsze atomic.Uint64
	// io counts the namespace's reads and writes on this node, for its
	// SMART / Health Information log (logpage.go).
	io queueCounters

	// inflight counts commands that resolved this namespace and have not
	// completed; removal waits for it to drain.
	inflight  atomic.Int64
	removed   atomic.Bool
	drained   chan struct{}
	drainOnce sync.Once
}

// NSID returns the namespace ID.
func (ns *Namespace) NSID() uint32 { return ns.nsid }

// Backend returns the namespace's backend.
func (ns *Namespace) Backend() backend.Backend { return ns.be }

// ANAGroup returns the namespace's ANA group ID.
func (ns *Namespace) ANAGroup() uint32 { return ns.anaGroup }

// BlockSize returns the LBA size in bytes.
func (ns *Namespace) BlockSize() int { return 1 << ns.lbaShift }

// Blocks returns NSZE, the size in logical blocks.
func (ns *Namespace) Blocks() uint64 { return ns.nsze.Load() }

// inRange reports whether [slba, slba+nlb) lies within the namespace.
func (ns *Namespace) inRange(slba, nlb uint64) bool {
	nsze := ns.nsze.Load()
	return slba < nsze && nlb <= nsze-slba
}

// acquire takes an in-flight reference; false when the namespace is being
// removed (the caller treats it as inactive).
func (ns *Namespace) acquire() bool {
	ns.inflight.Add(1)
	if ns.removed.Load() {
		ns.release()
		return false
	}
	return true
}

// release drops an in-flight reference. Dropping more than were taken is
// a broken invariant (a request completed twice past the core's guard).
func (ns *Namespace) release() {
	switch n := ns.inflight.Add(-1); {
	case n == 0 && ns.removed.Load():
		ns.drainOnce.Do(func() { close(ns.drained) })
	case n < 0:
		_ = invariant.Failf("target: namespace %d released %d more times than acquired", ns.nsid, -n)
	}
}

// InFlight returns the number of commands holding the namespace: resolved
// by Init and not completed yet. Every one releases it exactly once, so
// it returns to zero once they have all completed (tests check it).
func (ns *Namespace) InFlight() int64 { return ns.inflight.Load() }

// markRemoved makes later commands treat the namespace as inactive; once
// no command holds it, drained is closed.
func (ns *Namespace) markRemoved() {
	ns.removed.Store(true)
	if ns.inflight.Load() == 0 {
		ns.drainOnce.Do(func() { close(ns.drained) })
	}
}

// newNamespace validates cfg against s and the table it will join.
func (s *Subsystem) newNamespace(cfg NamespaceConfig, tab *nsTable) (*Namespace, error) {
	nn := s.t.cfg.MaxNamespaces
	if cfg.NSID == 0 || cfg.NSID > nn {
		return nil, fmt.Errorf("%w: NSID %d not in 1..%d", ErrInvalidConfig, cfg.NSID, nn)
	}
	if tab.byID[cfg.NSID] != nil {
		return nil, fmt.Errorf("%w: namespace %d in %s", ErrExists, cfg.NSID, s.nqn)
	}
	if cfg.Backend == nil {
		return nil, fmt.Errorf("%w: namespace %d: nil backend", ErrInvalidConfig, cfg.NSID)
	}
	bs := cfg.Backend.BlockSize()
	size := cfg.Backend.Size()
	// NVM Command Set 1.0 §4.1.5.1: the Linux host accepts
	// LBA sizes of 512 B to 4 KiB.
	if bs < 512 || bs > 4096 || bs&(bs-1) != 0 {
		return nil, fmt.Errorf("%w: namespace %d: block size %d", ErrInvalidConfig, cfg.NSID, bs)
	}
	if size <= 0 || size%int64(bs) != 0 {
		return nil, fmt.Errorf("%w: namespace %d: size %d not a positive multiple of %d", ErrInvalidConfig, cfg.NSID, size, bs)
	}
	grp := cfg.ANAGroup
	if grp == 0 {
		grp = cfg.NSID
	}
	if grp > s.t.cfg.MaxANAGroupID {
		return nil, fmt.Errorf("%w: namespace %d: ANA group %d above ANAGRPMAX %d", ErrInvalidConfig, cfg.NSID, grp, s.t.cfg.MaxANAGroupID)
	}
	ns := &Namespace{
		subsys: s, nsid: cfg.NSID, be: cfg.Backend, nguid: cfg.NGUID, uuid: cfg.UUID,
		anaGroup: grp, lbaShift: uint8(bits.TrailingZeros(uint(bs))), drained: make(chan struct{}),
	}
	if nb, ok := cfg.Backend.(NonBlocker); ok {
		ns.inline = nb.NonBlocking()
	}
	ns.aw, _ = backend.AsAsyncWriter(cfg.Backend)
	ns.copiesOnSubmit = ns.aw != nil && backend.CopiesOnSubmit(cfg.Backend)
	ns.nsze.Store(uint64(size) / uint64(bs))
	return ns, nil
}

// with returns a copy of tab with ns added.
func (tab *nsTable) with(ns *Namespace) *nsTable {
	out := &nsTable{byID: append([]*Namespace(nil), tab.byID...)}
	out.byID[ns.nsid] = ns
	out.rebuildList()
	return out
}

// without returns a copy of tab without nsid.
func (tab *nsTable) without(nsid uint32) *nsTable {
	out := &nsTable{byID: append([]*Namespace(nil), tab.byID...)}
	out.byID[nsid] = nil
	out.rebuildList()
	return out
}

func (tab *nsTable) rebuildList() {
	tab.list = tab.list[:0]
	for _, ns := range tab.byID {
		if ns != nil {
			tab.list = append(tab.list, ns)
		}
	}
}

// lookup returns the active namespace nsid, or nil.
func (tab *nsTable) lookup(nsid uint32) *Namespace {
	if uint64(nsid) >= uint64(len(tab.byID)) {
		return nil
	}
	return tab.byID[nsid]
}

// Namespace returns the active namespace nsid, or nil.
func (s *Subsystem) Namespace(nsid uint32) *Namespace { return s.table().lookup(nsid) }

// Namespaces returns the active namespaces in ascending NSID order.
func (s *Subsystem) Namespaces() []*Namespace {
	return append([]*Namespace(nil), s.table().list...)
}

// AddNamespace attaches a namespace; every controller of the subsystem gets
// a Namespace Attribute Changed event (NVMe Base 2.0 §5.2.1, AEN 0x00040002).
func (s *Subsystem) AddNamespace(cfg NamespaceConfig) error {
	t := s.t
	t.mu.Lock()
	if s.removed || t.mu.closed {
		t.mu.Unlock()
		return fmt.Errorf("%w: subsystem %s", ErrNotFound, s.nqn)
	}
	tab := s.table()
	ns, err := s.newNamespace(cfg, tab)
	if err != nil {
		t.mu.Unlock()
		return err
	}
	s.ns.Store(tab.with(ns))
	ctrls := t.controllersLocked(func(c *Controller) bool { return c.subsys == s })
	t.mu.Unlock()
	t.anaChgcnt.Add(1)
	for _, c := range ctrls {
		c.namespaceChanged(cfg.NSID)
	}
	return nil
}

// RemoveNamespace detaches a namespace, notifies the subsystem's
// controllers, and waits until commands in flight on it have finished, so
// that the caller may close the backend afterwards. The wait is bounded by
// Config.DrainTimeout (see Target.drain): half of it for the commands to
// finish, then the subsystem's controllers are destroyed (their
// connections end, and commands still waiting for host data are aborted),
// then the rest. If commands are still in the backend at the end, the
// namespace is removed all the same and the error wraps ErrDrainTimeout:
// they complete, and release the namespace, when the backend returns.
func (s *Subsystem) RemoveNamespace(nsid uint32) error {
	t := s.t
	t.mu.Lock()
	tab := s.table()
	ns := tab.lookup(nsid)
	if ns == nil {
		t.mu.Unlock()
		return fmt.Errorf("%w: namespace %d in %s", ErrNotFound, nsid, s.nqn)
	}
	s.ns.Store(tab.without(nsid))
	ctrls := t.controllersLocked(func(c *Controller) bool { return c.subsys == s })
	t.mu.Unlock()
	t.anaChgcnt.Add(1)
	for _, c := range ctrls {
		c.namespaceChanged(nsid)
	}
	return t.drain(s, []*Namespace{ns}, false)
}

// NotifyNamespaceChanged re-reads the backend's size (after a resize) and
// sends Namespace Attribute Changed events.
func (s *Subsystem) NotifyNamespaceChanged(nsid uint32) error {
	ns := s.Namespace(nsid)
	if ns == nil {
		return fmt.Errorf("%w: namespace %d in %s", ErrNotFound, nsid, s.nqn)
	}
	size := ns.be.Size()
	if size <= 0 || size%int64(ns.BlockSize()) != 0 {
		return fmt.Errorf("%w: namespace %d: size %d", ErrInvalidConfig, nsid, size)
	}
	ns.nsze.Store(uint64(size) >> ns.lbaShift)
	for _, c := range s.controllers() {
		c.namespaceChanged(nsid)
	}
	return nil
}

// identify fills an Identify Namespace structure (NVM Command Set 1.0
// §4.1.5.1): NCAP = NSZE (NCAP 0 makes the Linux host drop the namespace) and
// NMIC 1 (shared), without which the host refuses the same NSID on a second
// controller.
func (ns *Namespace) identify() nvme.IdentifyNamespace {
	nsze := ns.nsze.Load()
	return nvme.IdentifyNamespace{
		NSZE: nsze, NCAP: nsze, NUSE: nsze,
		NMIC: 1, // shared: the same namespace is reachable through every node
		// Deallocated blocks read as zeroes and Write Zeroes may deallocate
		// (backend.Backend: trimmed blocks read as zeroes).
		DLFEAT:   nvme.DLFEATReadZeroes | nvme.DLFEATWriteZeroesDeac,
		ANAGRPID: ns.anaGroup,
		NGUID:    ns.nguid,
		LBADS:    ns.lbaShift,
	}
}
