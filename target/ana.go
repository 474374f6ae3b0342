package target

import (
	"slices"
	"sync/atomic"

	"basalt/pkg/nvme"
)

// Asymmetric Namespace Access (NVMe Base 2.0 §8.1.3). Each namespace is in
// one ANA group (by default its own: ANAGRPID = NSID), with an ID in
// 1..Config.MaxANAGroupID (ANAGRPMAX). A controller reports NANAGRPID =
// MaxNamespaces: its subsystem, with at most that many namespaces, has at
// most that many groups, so its ANA log is at most 16 + 36 × MaxNamespaces
// bytes however large the IDs (the Linux host sizes the log it reads as
// 16 + 32 × NANAGRPID + 4 × MNAN and checks each ID against ANAGRPMAX only). The state of a group
// is kept per port, as nvmet does (port->ana_state[grpid]): a node's port
// reports "optimized" for the volumes whose Raft group it leads and
// "inaccessible" for the others. Unset states read as optimized.

// anaPort holds the ANA state of every group as seen through one port,
// indexed by group ID (1..Config.MaxANAGroupID) in chunks of anaChunkSize
// groups that are allocated on a group's first state change, so that a
// large ANAGRPMAX costs a pointer per chunk until groups are used.
// Lock-free for the I/O path; chunks are installed with t.mu held.
type anaPort struct {
	id     uint16
	chunks []atomic.Pointer[anaChunk]
}

// anaChunkSize is the number of groups one anaChunk holds.
const anaChunkSize = 256

// anaChunk holds the states of groups [k*anaChunkSize, (k+1)*anaChunkSize).
type anaChunk struct {
	states [anaChunkSize]atomic.Uint32 // nvme.ANAState; 0 = never set = optimized
	chgcnt [anaChunkSize]atomic.Uint64 // CHGCNT at the group's last change
}

// anaPortLocked returns the table of port id, creating it (t.mu held, or
// during New).
func (t *Target) anaPortLocked(id uint16) *anaPort {
	if p := t.mu.ana[id]; p != nil {
		return p
	}
	n := t.cfg.MaxANAGroupID/anaChunkSize + 1
	p := &anaPort{id: id, chunks: make([]atomic.Pointer[anaChunk], n)}
	t.mu.ana[id] = p
	return p
}

// chunk returns the chunk of group grp, nil while no group of it changed.
func (p *anaPort) chunk(grp uint32) *anaChunk { return p.chunks[grp/anaChunkSize].Load() }

// chunkLocked returns the chunk of group grp, allocating it (t.mu held).
func (p *anaPort) chunkLocked(grp uint32) *anaChunk {
	if c := p.chunk(grp); c != nil {
		return c
	}
	c := new(anaChunk)
	p.chunks[grp/anaChunkSize].Store(c)
	return c
}

// state returns the ANA state of group grp on this port.
func (p *anaPort) state(grp uint32) nvme.ANAState {
	if c := p.chunk(grp); c != nil {
		if v := c.states[grp%anaChunkSize].Load(); v != 0 {
			return nvme.ANAState(v)
		}
	}
	return nvme.ANAOptimized
}

// chgcnt returns the CHGCNT of group grp's last change on this port (0:
// never changed).
func (p *anaPort) chgcnt(grp uint32) uint64 {
	if c := p.chunk(grp); c != nil {
		return c.chgcnt[grp%anaChunkSize].Load()
	}
	return 0
}

func validANAState(s nvme.ANAState) bool {
	switch s {
	case nvme.ANAOptimized, nvme.ANANonOptimized, nvme.ANAInaccessible, nvme.ANAPersistentLoss, nvme.ANAChange:
		return true
	}
	return false
}

// SetANAState sets the state of ANA group `group` as seen through port
// portID. On a change it bumps the ANA log CHGCNT and sends an ANA Change
// event (AEN 0x000C0302) to every controller connected through that port
// whose subsystem has a namespace in the group. Invalid groups or states
// are logged and ignored.
//
// Keep at least one path of every group optimized or non-optimized: the
// Linux host queues I/O forever while every path is inaccessible.
func (t *Target) SetANAState(group uint32, portID uint16, s nvme.ANAState) {
	if group == 0 || group > t.cfg.MaxANAGroupID || !validANAState(s) {
		t.log.Error("invalid ANA state change ignored", "group", group, "port", portID, "state", s)
		return
	}
	t.mu.Lock()
	p := t.anaPortLocked(portID)
	if p.state(group) == s {
		t.mu.Unlock()
		return
	}
	c := p.chunkLocked(group)
	c.states[group%anaChunkSize].Store(uint32(s))
	c.chgcnt[group%anaChunkSize].Store(t.anaChgcnt.Add(1))
	ctrls := t.controllersLocked(func(c *Controller) bool {
		return !c.discovery && c.port.ana == p && c.subsys.hasGroup(group)
	})
	t.mu.Unlock()
	t.log.Info("ANA state changed", "group", group, "port", portID, "state", s, "controllers", len(ctrls))
	postAll(ctrls, nvme.AENANAChange, nvme.AECANAChange)
}

// ANAState returns the state of group as seen through port portID.
func (t *Target) ANAState(group uint32, portID uint16) nvme.ANAState {
	if group == 0 || group > t.cfg.MaxANAGroupID {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.anaPortLocked(portID).state(group)
}

// hasGroup reports whether an active namespace of s is in ANA group grp.
func (s *Subsystem) hasGroup(grp uint32) bool {
	for _, ns := range s.table().list {
		if ns.anaGroup == grp {
			return true
		}
	}
	return false
}

// anaStatus returns the path status for I/O to ns through port p: success
// when the group is optimized or non-optimized, else the matching SCT 3
// status, never with DNR, so the host fails over: the Linux host completes a
// command whose status has DNR with the error, SCT 3 or not.
func (p *anaPort) anaStatus(ns *Namespace) nvme.Status {
	switch p.state(ns.anaGroup) {
	case nvme.ANAOptimized, nvme.ANANonOptimized:
		return nvme.StatusSuccess
	case nvme.ANAInaccessible:
		return nvme.StatusANAInaccessible
	case nvme.ANAPersistentLoss:
		return nvme.StatusANAPersistentLoss
	default:
		return nvme.StatusANATransition
	}
}

// anaLog builds the ANA log page (LID 0Ch) for controller c: one descriptor
// per group that holds an active namespace, in ascending group order, each
// listing its NSIDs in ascending order (the Linux host's merge loop relies
// on it), or no NSIDs when rgo (LSP bit 0, Return Groups Only) is set.
func (c *Controller) anaLog(rgo bool) []byte {
	list := c.subsys.table().list // ascending NSID
	var groups []uint32
	for _, ns := range list {
		groups = append(groups, ns.anaGroup)
	}
	slices.Sort(groups)
	groups = slices.Compact(groups)
	size := nvme.ANALogHeaderSize + len(groups)*nvme.ANAGroupHeaderSize
	if !rgo {
		size += 4 * len(list)
	}
	b := make([]byte, size)
	h := nvme.ANAHeader{CHGCNT: c.t.anaChgcnt.Load(), NGRPS: uint16(len(groups))}
	h.Marshal(b)
	off := nvme.ANALogHeaderSize
	ap := c.port.ana
	for _, g := range groups {
		d := nvme.ANAGroupDescriptor{ANAGRPID: g, CHGCNT: ap.chgcnt(g), State: ap.state(g)}
		var nsids []uint32
		if !rgo {
			for _, ns := range list {
				if ns.anaGroup == g {
					nsids = append(nsids, ns.nsid)
				}
			}
		}
		d.NNSIDS = uint32(len(nsids))
		d.Marshal(b[off:])
		off += nvme.ANAGroupHeaderSize
		for _, id := range nsids {
			putLE32(b[off:], id)
			off += 4
		}
	}
	return b
}
