package target

import (
	"slices"
	"strings"

	"basalt/pkg/nvme"
)

// The discovery controller (NVMe-oF 1.1 §5; checklist §5). Hosts connect
// to nqn.2014-08.org.nvmexpress.discovery on any port and read the
// discovery log page (LID 70h): one entry per (subsystem the host may
// access) × (port), local ports and other nodes' ports (SetDiscoveryPorts)
// alike, so that `nvme connect-all` against any node creates every path.

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

// discoveryPortsLocked returns the ports listed in discovery log entries:
// the local ones in ID order, then the other nodes'.
func (t *Target) discoveryPortsLocked() []PortConfig {
	ports := make([]PortConfig, 0, len(t.mu.ports)+len(t.mu.extraPorts))
	for _, p := range t.mu.ports {
		ports = append(ports, p.cfg)
	}
	slices.SortFunc(ports, func(a, b PortConfig) int { return int(a.ID) - int(b.ID) })
	return append(ports, t.mu.extraPorts...)
}

// discoveryLog builds the whole discovery log page for hostNQN: the header
// (GENCTR, NUMREC, RECFMT 0) and the entries (TRTYPE TCP, SUBTYPE NVM
// subsystem, TREQ 0, dynamic CNTLID, ASQSZ 32, SECTYPE none). GENCTR and
// the entries are read under one lock, so they are consistent.
func (t *Target) discoveryLog(hostNQN string) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	var subs []*Subsystem
	for _, s := range t.mu.subsystems {
		if s.hostAllowedLocked(hostNQN) {
			subs = append(subs, s)
		}
	}
	slices.SortFunc(subs, func(a, b *Subsystem) int { return strings.Compare(a.nqn, b.nqn) })
	ports := t.discoveryPortsLocked()
	n := len(subs) * len(ports)
	b := make([]byte, nvme.DiscoveryLogHeaderSize+n*nvme.DiscoveryLogEntrySize)
	nvme.EncodeDiscoveryLogHeader(b, t.genctr.Load(), uint64(n))
	off := nvme.DiscoveryLogHeaderSize
	for _, s := range subs {
		for _, p := range ports {
			e := nvme.DiscoveryLogEntry{
				TRTYPE: nvme.TransportTypeTCP, ADRFAM: p.ADRFAM, SUBTYPE: nvme.SubtypeNVM,
				// TREQ 0: libnvme < 1.7 turns TLS on for TREQ 1 or 2 (checklist §7 #1).
				TREQ: nvme.TREQNotSpecified, PORTID: p.ID, CNTLID: nvme.CNTLIDDynamic,
				ASQSZ: nvme.DiscoveryASQSZ, TRSVCID: p.TRSVCID, SUBNQN: s.nqn,
				TRADDR: p.TRADDR, SECTYPE: nvme.SECTYPENone,
			}
			e.Marshal(b[off:])
			off += nvme.DiscoveryLogEntrySize
		}
	}
	return b
}
