package target

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"basalt/pkg/nvme"
)

// nqnMaxLen is the longest NQN the NVMe Base specification allows (§4.5).
const nqnMaxLen = 223

// SubsystemConfig describes an NVM subsystem. Every node that exports a
// volume uses the same NQN, Serial, Model and namespace identities, so the
// host merges the paths into one multipath device.
type SubsystemConfig struct {
	NQN           string
	Serial, Model string // default: Config.Serial, Config.Model
	// AllowAnyHost admits every host NQN; otherwise only Hosts.
	AllowAnyHost bool
	Hosts        []string
	// Secrets are the credentials of the hosts that have any, by host
	// NQN (secrets.go).
	Secrets    map[string]HostSecrets
	Namespaces []NamespaceConfig
}

// Subsystem is an NVM subsystem (≈ struct nvmet_subsys): namespaces and the
// hosts allowed to connect. Its methods are safe for concurrent use.
type Subsystem struct {
	t             *Target
	nqn           string
	serial, model string
	discovery     bool
	// allowAny, hosts and removed are guarded by t.mu.
	allowAny bool
	hosts    map[string]bool
	removed  bool
	// secrets are the hosts' credentials (secrets.go), guarded by t.mu.
	secrets map[string]HostSecrets
	// ns is replaced, never modified, under t.mu; the I/O path loads it
	// without locks.
	ns atomic.Pointer[nsTable]
}

// nsTable is an immutable snapshot of a subsystem's active namespaces.
type nsTable struct {
	byID []*Namespace // index NSID (1..MaxNamespaces); nil when inactive
	list []*Namespace // ascending NSID
}

func newSubsystem(t *Target, cfg SubsystemConfig, discovery bool) *Subsystem {
	s := &Subsystem{
		t: t, nqn: cfg.NQN, discovery: discovery, allowAny: cfg.AllowAnyHost,
		serial: cmp.Or(cfg.Serial, t.cfg.Serial), model: cmp.Or(cfg.Model, t.cfg.Model),
		hosts: make(map[string]bool),
	}
	for _, h := range cfg.Hosts {
		s.hosts[h] = true
	}
	for h, sec := range cfg.Secrets {
		if !sec.IsZero() {
			if s.secrets == nil {
				s.secrets = make(map[string]HostSecrets)
			}
			s.secrets[h] = sec
		}
	}
	s.ns.Store(&nsTable{byID: make([]*Namespace, t.cfg.MaxNamespaces+1)})
	return s
}

func validNQN(nqn string) bool {
	return nqn != "" && len(nqn) <= nqnMaxLen && !strings.ContainsRune(nqn, 0)
}

// AddSubsystem creates a subsystem with its namespaces. The NQN must be new
// and not the discovery NQN.
func (t *Target) AddSubsystem(cfg SubsystemConfig) (*Subsystem, error) {
	if !validNQN(cfg.NQN) || cfg.NQN == nvme.DiscoveryNQN {
		return nil, fmt.Errorf("%w: subsystem NQN %q", ErrInvalidConfig, cfg.NQN)
	}
	if !printableASCII(cfg.Serial, 20) || !printableASCII(cfg.Model, 40) {
		return nil, fmt.Errorf("%w: subsystem %s: Serial/Model not printable ASCII of 20/40 bytes", ErrInvalidConfig, cfg.NQN)
	}
	for _, h := range cfg.Hosts {
		if !validNQN(h) {
			return nil, fmt.Errorf("%w: subsystem %s: host NQN %q", ErrInvalidConfig, cfg.NQN, h)
		}
	}
	s := newSubsystem(t, cfg, false)
	tab := s.table()
	for _, nc := range cfg.Namespaces {
		ns, err := s.newNamespace(nc, tab)
		if err != nil {
			return nil, err
		}
		tab = tab.with(ns)
	}
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return nil, ErrClosed
	}
	if _, ok := t.mu.subsystems[cfg.NQN]; ok {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: subsystem %s", ErrExists, cfg.NQN)
	}
	s.ns.Store(tab)
	t.mu.subsystems[cfg.NQN] = s
	disc := t.discoveryChangedLocked()
	t.mu.Unlock()
	t.anaChgcnt.Add(1)
	postAll(disc, nvme.AENDiscoveryChange, nvme.AECDiscoveryChange)
	return s, nil
}

// RemoveSubsystem tears down the subsystem's controllers and waits until
// commands in flight on its namespaces have finished, for at most
// Config.DrainTimeout in all (Target.drain); an error wrapping
// ErrDrainTimeout says some are still in the backend (the subsystem is
// gone all the same).
func (t *Target) RemoveSubsystem(nqn string) error {
	t.mu.Lock()
	s := t.mu.subsystems[nqn]
	if s == nil {
		t.mu.Unlock()
		return fmt.Errorf("%w: subsystem %s", ErrNotFound, nqn)
	}
	delete(t.mu.subsystems, nqn)
	s.removed = true
	ctrls := t.controllersLocked(func(c *Controller) bool { return c.subsys == s })
	disc := t.discoveryChangedLocked()
	tab := s.table()
	s.ns.Store(&nsTable{byID: make([]*Namespace, len(tab.byID))})
	t.mu.Unlock()
	postAll(disc, nvme.AENDiscoveryChange, nvme.AECDiscoveryChange)
	for _, c := range ctrls {
		c.destroy(ErrSubsystemRemoved)
	}
	return t.drain(s, tab.list, true)
}

// Subsystem returns the subsystem named nqn, or nil.
func (t *Target) Subsystem(nqn string) *Subsystem {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.subsystems[nqn]
}

// Subsystems returns the NQNs of all subsystems, sorted.
func (t *Target) Subsystems() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.mu.subsystems))
	for nqn := range t.mu.subsystems {
		out = append(out, nqn)
	}
	slices.Sort(out)
	return out
}

// NQN returns the subsystem NQN.
func (s *Subsystem) NQN() string { return s.nqn }

func (s *Subsystem) table() *nsTable { return s.ns.Load() }

// hostAllowedLocked reports whether hostNQN may connect (t.mu held).
func (s *Subsystem) hostAllowedLocked(hostNQN string) bool {
	return s.allowAny || s.hosts[hostNQN]
}

// HostAllowed reports whether hostNQN may connect to s.
func (s *Subsystem) HostAllowed(hostNQN string) bool {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.hostAllowedLocked(hostNQN)
}

// Hosts returns the allowed host NQNs, sorted, and whether any host is allowed.
func (s *Subsystem) Hosts() (hosts []string, any bool) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	for h := range s.hosts {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return hosts, s.allowAny
}

// AllowHost lets hostNQN connect; the discovery log changes for that host.
func (s *Subsystem) AllowHost(hostNQN string) {
	t := s.t
	t.mu.Lock()
	if s.hosts[hostNQN] || !validNQN(hostNQN) {
		t.mu.Unlock()
		return
	}
	s.hosts[hostNQN] = true
	disc := t.discoveryChangedLocked()
	t.mu.Unlock()
	postAll(disc, nvme.AENDiscoveryChange, nvme.AECDiscoveryChange)
}

// DisallowHost revokes hostNQN's access: its controllers on s are torn down
// (unless AllowAnyHost admits it anyway) and later Connects fail with
// Invalid Host.
func (s *Subsystem) DisallowHost(hostNQN string) {
	t := s.t
	t.mu.Lock()
	if !s.hosts[hostNQN] {
		t.mu.Unlock()
		return
	}
	delete(s.hosts, hostNQN)
	var ctrls []*Controller
	if !s.allowAny {
		ctrls = t.controllersLocked(func(c *Controller) bool { return c.subsys == s && c.hostNQN == hostNQN })
	}
	disc := t.discoveryChangedLocked()
	t.mu.Unlock()
	postAll(disc, nvme.AENDiscoveryChange, nvme.AECDiscoveryChange)
	for _, c := range ctrls {
		c.destroy(ErrHostRemoved)
	}
}

// SetAllowAnyHost changes whether every host may connect. Turning it off
// tears down the controllers of hosts not in the host list.
func (s *Subsystem) SetAllowAnyHost(allow bool) {
	t := s.t
	t.mu.Lock()
	if s.allowAny == allow {
		t.mu.Unlock()
		return
	}
	s.allowAny = allow
	var ctrls []*Controller
	if !allow {
		ctrls = t.controllersLocked(func(c *Controller) bool { return c.subsys == s && !s.hosts[c.hostNQN] })
	}
	disc := t.discoveryChangedLocked()
	t.mu.Unlock()
	postAll(disc, nvme.AENDiscoveryChange, nvme.AECDiscoveryChange)
	for _, c := range ctrls {
		c.destroy(ErrHostRemoved)
	}
}

// controllers returns the live I/O controllers of s.
func (s *Subsystem) controllers() []*Controller {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.t.controllersLocked(func(c *Controller) bool { return c.subsys == s })
}
