package host

import (
	"context"
	"encoding/binary"
	"fmt"

	"basalt/pkg/nvme"
)

// adminExec runs one admin (or Fabrics) command on the admin queue.
func (c *Controller) adminExec(ctx context.Context, cmd *nvme.Command, in, out []byte) (nvme.Completion, error) {
	if c.admin == nil {
		return nvme.Completion{}, c.failure()
	}
	return c.admin.exec(ctx, cmd, in, out, fabricsInlineMax)
}

// PropertyGet reads a controller property (Fabrics Property Get, NVMe-oF
// 1.1 §3.5); size is 4 or 8 bytes.
func (c *Controller) PropertyGet(ctx context.Context, offset uint32, size int) (uint64, error) {
	attrib, err := propertyAttrib(size)
	if err != nil {
		return 0, err
	}
	var cmd nvme.Command
	cmd.SetOpcode(nvme.OpcodeFabrics)
	cmd.SetFCType(nvme.FCTypePropertyGet)
	cmd[nvme.PropOffsetATTRIB] = attrib
	binary.LittleEndian.PutUint32(cmd[nvme.PropOffsetOFST:], offset)
	cpl, err := c.adminExec(ctx, &cmd, nil, nil)
	if err != nil {
		return 0, err
	}
	if size == 4 {
		return uint64(cpl.DW0), nil
	}
	return uint64(cpl.DW0) | uint64(cpl.DW1)<<32, nil
}

// PropertySet writes a controller property (Fabrics Property Set, NVMe-oF
// 1.1 §3.4); size is 4 or 8 bytes.
func (c *Controller) PropertySet(ctx context.Context, offset uint32, size int, value uint64) error {
	attrib, err := propertyAttrib(size)
	if err != nil {
		return err
	}
	var cmd nvme.Command
	cmd.SetOpcode(nvme.OpcodeFabrics)
	cmd.SetFCType(nvme.FCTypePropertySet)
	cmd[nvme.PropOffsetATTRIB] = attrib
	binary.LittleEndian.PutUint32(cmd[nvme.PropOffsetOFST:], offset)
	binary.LittleEndian.PutUint64(cmd[nvme.PropOffsetVALUE:], value)
	_, err = c.adminExec(ctx, &cmd, nil, nil)
	return err
}

func propertyAttrib(size int) (uint8, error) {
	switch size {
	case 4:
		return nvme.PropSize4, nil
	case 8:
		return nvme.PropSize8, nil
	}
	return 0, fmt.Errorf("%w: property size %d, want 4 or 8", ErrInvalidArgument, size)
}

// identify reads one 4096-byte Identify data structure (CNS, CNTID 0, CSI).
func (c *Controller) identify(ctx context.Context, cns uint8, nsid uint32, csi uint8) ([]byte, error) {
	var cmd nvme.Command
	cmd.SetOpcode(nvme.AdminIdentify)
	cmd.SetNSID(nsid)
	cmd.SetCDW(10, uint32(cns))
	cmd.SetCDW(11, uint32(csi)<<24)
	buf := make([]byte, nvme.IdentifySize)
	if _, err := c.adminExec(ctx, &cmd, buf, nil); err != nil {
		return nil, err
	}
	return buf, nil
}

// IdentifyController reads Identify Controller (CNS 01h).
func (c *Controller) IdentifyController(ctx context.Context) (nvme.IdentifyController, error) {
	b, err := c.identify(ctx, nvme.CNSController, 0, 0)
	if err != nil {
		return nvme.IdentifyController{}, err
	}
	return nvme.UnmarshalIdentifyController(b), nil
}

// IdentifyNamespace reads Identify Namespace (CNS 00h) for nsid.
func (c *Controller) IdentifyNamespace(ctx context.Context, nsid uint32) (nvme.IdentifyNamespace, error) {
	b, err := c.identify(ctx, nvme.CNSNamespace, nsid, 0)
	if err != nil {
		return nvme.IdentifyNamespace{}, err
	}
	return nvme.UnmarshalIdentifyNamespace(b), nil
}

// ActiveNamespaces returns every active NSID in ascending order, reading the
// Active Namespace ID list (CNS 02h) 1024 entries at a time like Linux
// nvme_scan_ns_list.
func (c *Controller) ActiveNamespaces(ctx context.Context) ([]uint32, error) {
	var ids []uint32
	prev := uint32(0)
	for {
		b, err := c.identify(ctx, nvme.CNSActiveNSList, prev, 0)
		if err != nil {
			return ids, err
		}
		for i := 0; i < nvme.IdentifySize; i += 4 {
			nsid := binary.LittleEndian.Uint32(b[i:])
			if nsid == 0 {
				return ids, nil
			}
			if nsid <= prev {
				return ids, protocolErrorf(0, "active namespace list not ascending: %d after %d", nsid, prev)
			}
			ids, prev = append(ids, nsid), nsid
		}
	}
}

// NSIdentifiers are the namespace identification descriptors (CNS 03h).
type NSIdentifiers struct {
	EUI64    [8]byte
	NGUID    [16]byte
	UUID     [16]byte
	CSI      uint8
	HasEUI64 bool
	HasNGUID bool
	HasUUID  bool
	HasCSI   bool
}

// NSDescriptors reads the Namespace Identification Descriptor list (CNS 03h).
// Like Linux nvme_identify_ns_descs, a descriptor with a wrong NIDL ends the
// parse; what came before it is returned together with a *ProtocolError.
func (c *Controller) NSDescriptors(ctx context.Context, nsid uint32) (NSIdentifiers, error) {
	b, err := c.identify(ctx, nvme.CNSNSDescriptorList, nsid, 0)
	if err != nil {
		return NSIdentifiers{}, err
	}
	return parseNSDescriptors(b)
}

func parseNSDescriptors(b []byte) (NSIdentifiers, error) {
	var ids NSIdentifiers
	for off := 0; off+4 <= len(b); {
		nidt, nidl := b[off], int(b[off+1])
		if nidl == 0 {
			return ids, nil
		}
		if off+4+nidl > len(b) {
			return ids, protocolErrorf(0, "NS descriptor at %d overruns the list", off)
		}
		nid := b[off+4 : off+4+nidl]
		if want := nidlFor(nidt); want != 0 && nidl != want {
			return ids, protocolErrorf(0, "NS descriptor type %d with bogus length %d", nidt, nidl)
		}
		switch nidt {
		case nvme.NIDTEUI64:
			copy(ids.EUI64[:], nid)
			ids.HasEUI64 = true
		case nvme.NIDTNGUID:
			copy(ids.NGUID[:], nid)
			ids.HasNGUID = true
		case nvme.NIDTUUID:
			copy(ids.UUID[:], nid)
			ids.HasUUID = true
		case nvme.NIDTCSI:
			ids.CSI, ids.HasCSI = nid[0], true
		}
		off += 4 + nidl
	}
	return ids, nil
}

// nidlFor is the NIDL a descriptor type must have, 0 for unknown types.
func nidlFor(nidt uint8) int {
	switch nidt {
	case nvme.NIDTEUI64:
		return 8
	case nvme.NIDTNGUID, nvme.NIDTUUID:
		return 16
	case nvme.NIDTCSI:
		return 1
	}
	return 0
}

// GetLogPage reads len(buf) bytes (a multiple of 4) of log page lid at byte
// offset (dword aligned), with RAE cleared (NVMe Base 2.0 §5.16).
func (c *Controller) GetLogPage(ctx context.Context, lid uint8, nsid uint32, lsp uint8, offset uint64, buf []byte) error {
	return c.getLogPage(ctx, lid, nsid, lsp, false, offset, buf)
}

func (c *Controller) getLogPage(ctx context.Context, lid uint8, nsid uint32, lsp uint8, rae bool, offset uint64, buf []byte) error {
	if len(buf) == 0 || len(buf)%4 != 0 || offset%4 != 0 {
		return fmt.Errorf("%w: log page length %d / offset %d must be non-zero multiples of 4", ErrInvalidArgument, len(buf), offset)
	}
	if c.maxTransfer > 0 && len(buf) > c.maxTransfer {
		return fmt.Errorf("%w: log page length %d exceeds MDTS (%d bytes)", ErrInvalidArgument, len(buf), c.maxTransfer)
	}
	var cmd nvme.Command
	cmd.SetNSID(nsid)
	cmd.EncodeGetLogPage(nvme.GetLogPageCmd{LID: lid, LSP: lsp, RAE: rae, Length: uint32(len(buf)), Offset: offset})
	_, err := c.adminExec(ctx, &cmd, buf, nil)
	return err
}

// GetFeature returns completion DW0 of Get Features (current value) for fid.
func (c *Controller) GetFeature(ctx context.Context, fid uint8, cdw11 uint32) (uint32, error) {
	var cmd nvme.Command
	cmd.SetOpcode(nvme.AdminGetFeatures)
	cmd.SetCDW(10, uint32(fid))
	cmd.SetCDW(11, cdw11)
	cpl, err := c.adminExec(ctx, &cmd, nil, nil)
	return cpl.DW0, err
}

// SetFeature sends Set Features for fid with CDW11 (no data, not saved) and
// returns completion DW0.
func (c *Controller) SetFeature(ctx context.Context, fid uint8, cdw11 uint32) (uint32, error) {
	var cmd nvme.Command
	cmd.SetOpcode(nvme.AdminSetFeatures)
	cmd.SetCDW(10, uint32(fid))
	cmd.SetCDW(11, cdw11)
	cpl, err := c.adminExec(ctx, &cmd, nil, nil)
	return cpl.DW0, err
}

// KeepAlive sends one Keep Alive command (NVMe Base 2.0 §5.25).
func (c *Controller) KeepAlive(ctx context.Context) error {
	var cmd nvme.Command
	cmd.SetOpcode(nvme.AdminKeepAlive)
	_, err := c.adminExec(ctx, &cmd, nil, nil)
	return err
}

// readInitLogs reads the log pages the Linux host reads while initializing
// an I/O controller: Commands Supported and Effects if LPA bit 1, ANA if
// CMIC bit 3 (checking MNAN and the size against MDTS first), and SMART
// (whose failure only warns).
func (c *Controller) readInitLogs(ctx context.Context) error {
	if c.discovery {
		return nil
	}
	if c.id.LPA&(1<<1) != 0 {
		buf := make([]byte, nvme.CommandsEffectsLogSize)
		if err := c.GetLogPage(ctx, nvme.LogCommandsEffects, 0, 0, 0, buf); err != nil {
			return fmt.Errorf("host: reading the Commands Supported and Effects log failed: %w", err)
		}
	}
	if c.id.CMIC&(1<<3) != 0 {
		if c.id.MNAN == 0 || c.id.MNAN > c.id.NN {
			return incompatiblef("Invalid MNAN value %d (NN %d)", c.id.MNAN, c.id.NN)
		}
		if size := c.anaLogSize(); c.maxTransfer > 0 && size > c.maxTransfer {
			c.log.Warn("nvme host: ANA log page size larger than MDTS; disabling ANA support",
				"size", size, "mdts", c.maxTransfer)
		} else if l, err := c.ANALog(ctx); err != nil {
			return fmt.Errorf("host: reading the ANA log failed: %w", err)
		} else {
			c.events.ana.Store(&l)
		}
	}
	smart := make([]byte, nvme.SMARTLogSize)
	if err := c.GetLogPage(ctx, nvme.LogSMART, nvme.NSIDAll, 0, 0, smart); err != nil {
		c.log.Warn("nvme host: reading the SMART log failed", "err", err)
	}
	return nil
}
