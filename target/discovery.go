package target

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"basalt/pkg/nvme"
)

// The discovery controller (NVMe-oF 1.1 §5). Hosts connect to
// nqn.2014-08.org.nvmexpress.discovery on any port and read the discovery log
// page (LID 70h), filtered by host NQN:
//
//	local subsystems the host may access (NQN order)  × local ports (PORTID order)
//	remote subsystems the host may access (NQN order) × their ports (PORTID, TRADDR, TRSVCID order)
//
// Remote subsystems (SetRemoteSubsystems) are served on other nodes'
// ports; a subsystem may be both local and remote. So `nvme connect-all`
// against any node creates every path of every volume the host may use.

// RemoteSubsystem is a subsystem served on other nodes' ports: the
// discovery log lists it on Ports for the hosts it admits (AllowAnyHost,
// or a host NQN in Hosts). It exports nothing here.
type RemoteSubsystem struct {
	NQN          string
	AllowAnyHost bool
	Hosts        []string
	// Ports are the other nodes' ports serving NQN. A port whose ID is
	// also a local port's is not listed (port IDs are unique across the
	// cluster: the local port wins).
	Ports []PortConfig
}

// hostAllowed reports whether hostNQN may access rs.
func (rs *RemoteSubsystem) hostAllowed(hostNQN string) bool {
	_, found := slices.BinarySearch(rs.Hosts, hostNQN)
	return rs.AllowAnyHost || found
}

// SetRemoteSubsystems replaces the remote subsystems listed in discovery
// logs. Invalid entries are dropped (and logged when the set changes): a
// subsystem whose NQN is
// invalid, the discovery NQN or repeated; a host NQN that is invalid; a
// port whose address is invalid or a wildcard. Repeated hosts and ports
// (same ID, TRADDR and TRSVCID) count once. GENCTR is bumped and the
// discovery change AEN (0x0070F002) sent only when the result differs
// from the current set.
func (t *Target) SetRemoteSubsystems(subs []RemoteSubsystem) {
	keep, dropped := normalizeRemote(subs)
	t.mu.Lock()
	if slices.EqualFunc(keep, t.mu.remote, equalRemote) {
		t.mu.Unlock()
		return
	}
	t.mu.remote = keep
	disc := t.discoveryChangedLocked()
	t.mu.Unlock()
	for _, err := range dropped {
		t.log.Warn("remote discovery entry dropped", "err", err)
	}
	postAll(disc, nvme.AENDiscoveryChange, nvme.AECDiscoveryChange)
}

// normalizeRemote returns subs validated, deduplicated and sorted (by NQN;
// hosts; ports by ID, TRADDR, TRSVCID), in new slices, and an error
// wrapping ErrInvalidConfig for each thing it dropped.
func normalizeRemote(subs []RemoteSubsystem) (keep []RemoteSubsystem, dropped []error) {
	seen := make(map[string]bool, len(subs))
	for _, rs := range subs {
		if !validNQN(rs.NQN) || rs.NQN == nvme.DiscoveryNQN || seen[rs.NQN] {
			dropped = append(dropped, fmt.Errorf("%w: remote subsystem NQN %q invalid or repeated", ErrInvalidConfig, rs.NQN))
			continue
		}
		seen[rs.NQN] = true
		n := RemoteSubsystem{NQN: rs.NQN, AllowAnyHost: rs.AllowAnyHost}
		for _, h := range rs.Hosts {
			if !validNQN(h) {
				dropped = append(dropped, fmt.Errorf("%w: remote subsystem %s: host NQN %q", ErrInvalidConfig, rs.NQN, h))
				continue
			}
			n.Hosts = append(n.Hosts, h)
		}
		for _, pc := range rs.Ports {
			if err := pc.normalize(); err != nil {
				dropped = append(dropped, fmt.Errorf("remote subsystem %s: %w", rs.NQN, err))
				continue
			}
			n.Ports = append(n.Ports, pc)
		}
		slices.Sort(n.Hosts)
		n.Hosts = slices.Compact(n.Hosts)
		slices.SortFunc(n.Ports, comparePorts)
		n.Ports = slices.CompactFunc(n.Ports, func(a, b PortConfig) bool { return comparePorts(a, b) == 0 })
		keep = append(keep, n)
	}
	slices.SortFunc(keep, func(a, b RemoteSubsystem) int { return strings.Compare(a.NQN, b.NQN) })
	return keep, dropped
}

// comparePorts orders ports by (ID, TRADDR, TRSVCID), the identity of a
// discovery log entry besides its SUBNQN.
func comparePorts(a, b PortConfig) int {
	return cmp.Or(cmp.Compare(a.ID, b.ID), strings.Compare(a.TRADDR, b.TRADDR), strings.Compare(a.TRSVCID, b.TRSVCID))
}

func equalRemote(a, b RemoteSubsystem) bool {
	return a.NQN == b.NQN && a.AllowAnyHost == b.AllowAnyHost &&
		slices.Equal(a.Hosts, b.Hosts) && slices.Equal(a.Ports, b.Ports)
}

// parseDiscoveryCmd accepts the commands nvmet accepts on a discovery
// controller (nvmet_parse_discovery_cmd): Identify (CNS 01h), Get Log Page
// (70h), Get/Set Features (KATO, AEN config), AER and Keep Alive.
func (c *Controller) parseDiscoveryCmd(r *Request) nvme.Status {
	switch r.Cmd.Opcode() {
	case nvme.AdminIdentify, nvme.AdminGetLogPage, nvme.AdminSetFeatures,
		nvme.AdminGetFeatures, nvme.AdminAsyncEventReq, nvme.AdminKeepAlive:
		return c.parseAdminCmd(r)
	default:
		return r.fail(nvme.StatusInvalidOpcode, nvme.SQEOffsetOpcode)
	}
}

// discoveryChangedLocked bumps GENCTR after a change that may alter a
// discovery log and returns the discovery controllers to notify (AEN
// 0x0070F002) once t.mu is released.
func (t *Target) discoveryChangedLocked() []*Controller {
	t.genctr.Add(1)
	return t.controllersLocked(func(c *Controller) bool { return c.discovery })
}

// discoveryEntry pairs a SUBNQN with a port: one discovery log entry.
type discoveryEntry struct {
	nqn  string
	port PortConfig
}

// discoveryEntriesLocked lists hostNQN's discovery log entries in log
// order (see the top of this file). Each (SUBNQN, PORTID, TRADDR, TRSVCID)
// appears once: local NQNs and port IDs are unique, remote ones are
// deduplicated by SetRemoteSubsystems, and remote ports never carry a
// local port's ID.
func (t *Target) discoveryEntriesLocked(hostNQN string) []discoveryEntry {
	local := make([]PortConfig, 0, len(t.mu.ports))
	for _, p := range t.mu.ports {
		local = append(local, p.cfg)
	}
	slices.SortFunc(local, comparePorts)
	var subs []string
	for nqn, s := range t.mu.subsystems {
		if s.hostAllowedLocked(hostNQN) {
			subs = append(subs, nqn)
		}
	}
	slices.Sort(subs)
	var out []discoveryEntry
	for _, nqn := range subs {
		for _, p := range local {
			out = append(out, discoveryEntry{nqn, p})
		}
	}
	for i := range t.mu.remote {
		rs := &t.mu.remote[i]
		if !rs.hostAllowed(hostNQN) {
			continue
		}
		for _, p := range rs.Ports {
			if _, isLocal := t.mu.ports[p.ID]; !isLocal {
				out = append(out, discoveryEntry{rs.NQN, p})
			}
		}
	}
	return out
}

// discoveryLogPart returns bytes [off, off+n) of hostNQN's discovery log
// page (fewer where the log ends first; nil when off is at or past its
// end) and the log's size. The page is the header (GENCTR, NUMREC, RECFMT
// 0) and the entries (TRTYPE TCP, SUBTYPE NVM subsystem, TREQ, dynamic
// CNTLID, ASQSZ 32, SECTYPE: see discoveryLogEntry), 1 KiB each; only the records that
// overlap the range are encoded, so a host that reads a log of thousands
// of entries in 4 KiB pieces (nvme-cli does) pays for listing the entries,
// not for encoding the whole log, per piece. GENCTR and the entries are
// read under one lock, so they are consistent; a host that reads in pieces
// compares GENCTR before and after.
func (t *Target) discoveryLogPart(hostNQN string, off, n uint64) (part []byte, size uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	entries := t.discoveryEntriesLocked(hostNQN)
	const rec = nvme.DiscoveryLogEntrySize // = DiscoveryLogHeaderSize
	size = uint64(nvme.DiscoveryLogHeaderSize + len(entries)*rec)
	if off >= size || n == 0 {
		return nil, size
	}
	end := min(off+n, size)
	first, last := off/rec, (end-1)/rec // records, 0 = the header
	b := make([]byte, (last-first+1)*rec)
	for i := first; i <= last; i++ {
		dst := b[(i-first)*rec:]
		if i == 0 {
			nvme.EncodeDiscoveryLogHeader(dst, t.genctr.Load(), uint64(len(entries)))
			continue
		}
		e := discoveryLogEntry(entries[i-1])
		e.Marshal(dst)
	}
	return b[off-first*rec : end-first*rec], size
}

// discoveryLogEntry is the log entry of de.
func discoveryLogEntry(de discoveryEntry) nvme.DiscoveryLogEntry {
	p := de.port
	// TREQ 0 and SECTYPE none unless the port requires TLS: libnvme < 1.7
	// turns TLS on for TREQ 1 or 2, and a kernel without NVMe/TCP TLS
	// (Debian 12's) then fails the connect. A port that requires TLS
	// cannot serve such a host anyway.
	treq, sectype := uint8(nvme.TREQNotSpecified), uint8(nvme.SECTYPENone)
	if p.TLS == TLSRequired {
		treq, sectype = nvme.TREQSecureChannelRequired, nvme.SECTYPETLS13
	}
	return nvme.DiscoveryLogEntry{
		TRTYPE: nvme.TransportTypeTCP, ADRFAM: p.ADRFAM, SUBTYPE: nvme.SubtypeNVM,
		TREQ: treq, PORTID: p.ID, CNTLID: nvme.CNTLIDDynamic,
		ASQSZ: nvme.DiscoveryASQSZ, TRSVCID: p.TRSVCID, SUBNQN: de.nqn,
		TRADDR: p.TRADDR, SECTYPE: sectype,
	}
}
