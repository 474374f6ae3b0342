package host

import (
	"context"
	"encoding/binary"

	"basalt/pkg/nvme"
)

// ANAGroup is one group descriptor of the ANA log page.
type ANAGroup struct {
	ID     uint32 // ANAGRPID
	CHGCNT uint64
	State  nvme.ANAState
	NSIDs  []uint32 // ascending; empty when read with RGO
}

// ANALog is a decoded ANA log page (NVMe Base 2.0 §5.16.1.13).
type ANALog struct {
	CHGCNT uint64
	Groups []ANAGroup
}

// StateOf returns the ANA state of nsid and whether the log lists it.
func (l *ANALog) StateOf(nsid uint32) (nvme.ANAState, bool) {
	for _, g := range l.Groups {
		for _, id := range g.NSIDs {
			if id == nsid {
				return g.State, true
			}
		}
	}
	return 0, false
}

// anaLogSize is what Linux reads: 16 + NANAGRPID*32 + MNAN*4 bytes.
func (c *Controller) anaLogSize() int {
	return nvme.ANALogHeaderSize + int(c.id.NANAGRPID)*nvme.ANAGroupHeaderSize + int(c.id.MNAN)*4
}

// ANALog reads and decodes the ANA log page the way Linux nvme_read_ana_log
// does: NSID FFFFFFFFh, LSP 0, offset 0, 16 + NANAGRPID*32 + MNAN*4 bytes.
// A log that breaks the rules Linux enforces (group ID 0 or above ANAGRPMAX,
// state 0 or above 0Fh, a descriptor past the end) or lists NSIDs out of
// order is a *ProtocolError.
func (c *Controller) ANALog(ctx context.Context) (ANALog, error) {
	if c.id.CMIC&(1<<3) == 0 {
		return ANALog{}, incompatiblef("controller does not report ANA (CMIC %#x)", c.id.CMIC)
	}
	buf := make([]byte, c.anaLogSize())
	if err := c.GetLogPage(ctx, nvme.LogANA, nvme.NSIDAll, 0, 0, buf); err != nil {
		return ANALog{}, err
	}
	return parseANALog(buf, c.id.ANAGRPMAX)
}

func parseANALog(b []byte, anagrpmax uint32) (ANALog, error) {
	if len(b) < nvme.ANALogHeaderSize {
		return ANALog{}, protocolErrorf(0, "ANA log of %d bytes has no header", len(b))
	}
	h := nvme.UnmarshalANAHeader(b)
	l := ANALog{CHGCNT: h.CHGCNT, Groups: make([]ANAGroup, 0, h.NGRPS)}
	off := nvme.ANALogHeaderSize
	for i := 0; i < int(h.NGRPS); i++ {
		if off+nvme.ANAGroupHeaderSize > len(b) {
			return l, protocolErrorf(0, "ANA group descriptor %d at %d overruns the %d-byte log", i, off, len(b))
		}
		d := nvme.UnmarshalANAGroupDescriptor(b[off:])
		switch {
		case d.ANAGRPID == 0 || d.ANAGRPID > anagrpmax:
			return l, protocolErrorf(0, "ANA group descriptor %d has ANAGRPID %d (ANAGRPMAX %d)", i, d.ANAGRPID, anagrpmax)
		case d.State == 0 || b[off+16] > uint8(nvme.ANAChange):
			return l, protocolErrorf(0, "ANA group %d has invalid state %#x", d.ANAGRPID, b[off+16])
		}
		off += nvme.ANAGroupHeaderSize
		if uint64(off)+uint64(d.NNSIDS)*4 > uint64(len(b)) {
			return l, protocolErrorf(0, "ANA group %d lists %d NSIDs past the end of the log", d.ANAGRPID, d.NNSIDS)
		}
		g := ANAGroup{ID: d.ANAGRPID, CHGCNT: d.CHGCNT, State: d.State, NSIDs: make([]uint32, d.NNSIDS)}
		for j := range g.NSIDs {
			g.NSIDs[j] = binary.LittleEndian.Uint32(b[off:])
			off += 4
			if j > 0 && g.NSIDs[j] <= g.NSIDs[j-1] {
				return l, protocolErrorf(0, "ANA group %d NSIDs not ascending: %d after %d", d.ANAGRPID, g.NSIDs[j], g.NSIDs[j-1])
			}
		}
		l.Groups = append(l.Groups, g)
	}
	return l, nil
}
