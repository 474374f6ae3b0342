package target

import (
	"basalt/pkg/nvme"
)

// Admin commands of an I/O controller (NVMe Base 2.0 §5). Handlers run inline
// on the admin queue's receive goroutine.

// Identify Controller constants.
const (
	cmicMultiPortMultiCtrlANA = 0x0B // bit0 multi-port, bit1 multi-controller, bit3 ANA
	ctrattHostID128           = 1 << 0
	aclAbortLimit             = 3
	frmwSlot1ReadOnly         = 0x03 // slot 1 read-only, one slot
	lpaSMARTPerNamespace      = 1 << 0
	lpaCommandsEffects        = 1 << 1
	lpaExtendedData           = 1 << 2 // Get Log Page offsets
	anattSeconds              = 10
	// anacapAll: optimized, non-optimized, inaccessible, persistent loss,
	// change states reported; bit 6: ANAGRPID does not change while attached.
	anacapAll      = 0x1F | 1<<6
	sqesNVM        = 0x66
	cqesNVM        = 0x44
	oncsDSMWZ      = 1<<2 | 1<<3 // Dataset Management, Write Zeroes
	vwcPresent     = 0x01
	sglsSupported  = 0x00100001 // SGLs supported; bit 20: SGL offset (in-capsule data)
	msdbdOne       = 1
	psdMaxPower    = 0x9c4 // nvmet's fake power state 0
	psdEntryLatUS  = 0x10
	psdExitLatUS   = 0x4
	discoveryMDTS  = 1 // 8 KiB: the admin data buffer
	iorcszOneEntry = 1
)

// parseAdminCmd selects the handler of an admin command (cf.
// nvmet_parse_admin_cmd); it performs no I/O.
func (c *Controller) parseAdminCmd(r *Request) nvme.Status {
	if !c.ready() {
		// NVMe Base 2.0 §3.5.1: commands other than Fabrics ones need CSTS.RDY.
		return r.fail(nvme.StatusCommandSequenceError, nvme.SQEOffsetOpcode)
	}
	switch r.Cmd.Opcode() {
	case nvme.AdminGetLogPage:
		return c.parseGetLogPage(r)
	case nvme.AdminIdentify:
		r.execute = executeIdentify
		return r.expectData(DirC2H, nvme.IdentifySize)
	case nvme.AdminAbort:
		r.execute = executeAbort
		return r.expectData(DirNone, 0)
	case nvme.AdminSetFeatures:
		return c.parseSetFeatures(r)
	case nvme.AdminGetFeatures:
		return c.parseGetFeatures(r)
	case nvme.AdminAsyncEventReq:
		r.execute = executeAER
		return r.expectData(DirNone, 0)
	case nvme.AdminKeepAlive:
		r.execute = executeKeepAlive
		return r.expectData(DirNone, 0)
	default:
		return r.fail(nvme.StatusInvalidOpcode, nvme.SQEOffsetOpcode)
	}
}

// executeIdentify returns one 4096-byte Identify structure (NVMe Base 2.0
// §5.17). CNS 08h is Invalid Field so that a host falls back to CNS 00h.
func executeIdentify(r *Request) {
	c := r.sq.ctrl.Load()
	buf := r.Data[:nvme.IdentifySize]
	var st nvme.Status
	switch cns := uint8(r.Cmd.CDW(10)); {
	case cns == nvme.CNSController:
		c.identifyController(buf)
	case c.discovery:
		st = r.fail(nvme.StatusInvalidField, nvme.IdentifyOffsetCNS)
	case cns == nvme.CNSNamespace:
		st = c.identifyNamespace(r, buf)
	case cns == nvme.CNSActiveNSList:
		st = c.identifyNSList(r, buf)
	case cns == nvme.CNSNSDescriptorList:
		st = c.identifyDescriptors(r, buf)
	case cns == nvme.CNSCSController:
		// CSI 0 (NVM): all limits zero = none.
		if r.Cmd[nvme.IdentifyOffsetCSI] != 0 {
			st = r.fail(nvme.StatusInvalidField, nvme.IdentifyOffsetCSI)
		} else {
			clear(buf)
		}
	default:
		st = r.fail(nvme.StatusInvalidField, nvme.IdentifyOffsetCNS)
	}
	r.sq.complete(r, st)
}

// identifyController fills Identify Controller (CNS 01h). The values that
// the host compares across paths (SN, MN, CMIC, MDTS, NN, MNAN, ANA fields,
// ONCS, VWC, AWUPF) depend only on the configuration.
func (c *Controller) identifyController(buf []byte) {
	cfg := &c.t.cfg
	id := nvme.IdentifyController{
		SN: c.subsys.serial, MN: c.subsys.model, FR: cfg.Firmware,
		CNTLID: c.cntlid, VER: nvme.VS13, OAES: c.oaes(), CTRATT: ctrattHostID128,
		ACL: aclAbortLimit, AERL: aerLimit - 1, FRMW: frmwSlot1ReadOnly,
		ELPE: errorLogSlots - 1, KAS: keepAliveGranularity,
		SGLS: sglsSupported, SubNQN: c.subsys.nqn,
	}
	if c.discovery {
		id.CNTRLTYPE = nvme.ControllerTypeDiscovery
		id.MDTS = discoveryMDTS
		id.LPA = lpaExtendedData
		// MAXCMD as on I/O controllers (nvmet does the same): the Linux host
		// clamps its queue_size to MAXCMD and warns "queue_size 128 > ctrl
		// sqsize 32, clamping down" on every discovery otherwise.
		id.MAXCMD = cfg.MQES + 1
	} else {
		nn := cfg.MaxNamespaces
		id.CNTRLTYPE = nvme.ControllerTypeIO
		id.CMIC = cmicMultiPortMultiCtrlANA
		id.MDTS = cfg.MDTS
		id.LPA = lpaSMARTPerNamespace | lpaCommandsEffects | lpaExtendedData
		id.ANATT, id.ANACAP, id.ANAGRPMAX, id.NANAGRPID = anattSeconds, anacapAll, cfg.MaxANAGroupID, nn
		id.SQES, id.CQES, id.MAXCMD = sqesNVM, cqesNVM, cfg.MQES+1
		id.NN, id.MNAN = nn, nn
		id.ONCS, id.VWC = oncsDSMWZ, vwcPresent
		id.IOCCSZ = uint32(4 + cfg.icdSize()/16)
		id.IORCSZ, id.MSDBD = iorcszOneEntry, msdbdOne
	}
	id.Marshal(buf)
	nvme.SetPowerStateDescriptor0(buf, psdMaxPower, psdEntryLatUS, psdExitLatUS)
}

// inactiveNSIDStatus is the status of a command whose NSID names no active
// namespace (NVMe Base 2.0 §3.2.1.2, §3.2.1.5): Invalid Namespace or Format
// for an invalid NSID (0, above NN, or the broadcast value FFFFFFFFh where
// the command does not take it), Invalid Field in Command for a valid NSID
// that is inactive (no namespace attached, or one being removed). nvmet
// answers Invalid Namespace for both.
func (t *Target) inactiveNSIDStatus(nsid uint32) nvme.Status {
	if nsid == 0 || nsid > t.cfg.MaxNamespaces {
		return nvme.StatusInvalidNamespace
	}
	return nvme.StatusInvalidField
}

// identifyNamespace fills Identify Namespace (CNS 00h). An inactive NSID
// returns zeroes (NCAP 0 = not present: CNS 00h's exception to Invalid
// Field); an invalid one, FFFFFFFFh included (no Namespace Management), is
// Invalid Namespace.
func (c *Controller) identifyNamespace(r *Request, buf []byte) nvme.Status {
	nsid := r.Cmd.NSID()
	ns := c.subsys.table().lookup(nsid)
	if ns == nil {
		if st := c.t.inactiveNSIDStatus(nsid); st == nvme.StatusInvalidNamespace {
			return r.fail(st, nvme.SQEOffsetNSID)
		}
		clear(buf)
		return nvme.StatusSuccess
	}
	id := ns.identify()
	id.Marshal(buf)
	return nvme.StatusSuccess
}

// identifyNSList fills the Active Namespace ID list (CNS 02h): up to 1024
// NSIDs greater than CDW1.NSID, ascending, zero-terminated.
func (c *Controller) identifyNSList(r *Request, buf []byte) nvme.Status {
	after := r.Cmd.NSID()
	if after >= nvme.NSIDAll-1 {
		return r.fail(nvme.StatusInvalidNamespace, nvme.SQEOffsetNSID)
	}
	clear(buf)
	off := 0
	for _, ns := range c.subsys.table().list {
		if ns.nsid <= after {
			continue
		}
		if off == len(buf) {
			break
		}
		putLE32(buf[off:], ns.nsid)
		off += 4
	}
	return nvme.StatusSuccess
}

// identifyDescriptors fills the Namespace Identification Descriptor list
// (CNS 03h): UUID and NGUID when set, and the CSI (NVM) always, as nvmet.
// The host skips a namespace whose list fails, so this must succeed for
// every active NSID; any other NSID fails as §3.2.1.5 says.
func (c *Controller) identifyDescriptors(r *Request, buf []byte) nvme.Status {
	nsid := r.Cmd.NSID()
	ns := c.subsys.table().lookup(nsid)
	if ns == nil {
		return r.fail(c.t.inactiveNSIDStatus(nsid), nvme.SQEOffsetNSID)
	}
	clear(buf)
	off := 0
	if ns.uuid != ([16]byte{}) {
		off = nvme.AppendNSDescriptor(buf, off, nvme.NIDTUUID, ns.uuid[:])
	}
	if ns.nguid != ([16]byte{}) {
		off = nvme.AppendNSDescriptor(buf, off, nvme.NIDTNGUID, ns.nguid[:])
	}
	nvme.AppendNSDescriptor(buf, off, nvme.NIDTCSI, []byte{0})
	return nvme.StatusSuccess
}

// executeAbort never aborts: DW0 bit 0 set = "command not aborted" (nvmet;
// the Linux TCP host resets instead of aborting).
func executeAbort(r *Request) {
	r.Cpl.DW0 = 1
	r.sq.complete(r, nvme.StatusSuccess)
}

// executeKeepAlive restarts the keep-alive timer; it always succeeds (the
// Linux host stops sending them after one fails).
func executeKeepAlive(r *Request) {
	r.sq.ctrl.Load().touch()
	r.sq.complete(r, nvme.StatusSuccess)
}

// executeAER parks an Asynchronous Event Request until an event occurs, or
// completes it at once with a queued event (NVMe Base 2.0 §5.2). More than
// AERL+1 outstanding → Asynchronous Event Request Limit Exceeded.
func executeAER(r *Request) {
	c := r.sq.ctrl.Load()
	c.mu.Lock()
	switch {
	case c.mu.dead:
		c.mu.Unlock()
		r.sq.complete(r, nvme.StatusAbortSQDeletion)
	case len(c.mu.events) > 0:
		dw0 := c.mu.events[0]
		c.mu.events = c.mu.events[1:]
		c.mu.Unlock()
		r.Cpl.DW0 = dw0
		r.sq.complete(r, nvme.StatusSuccess)
	case len(c.mu.aers) >= aerLimit:
		c.mu.Unlock()
		r.sq.complete(r, nvme.StatusAERLimitExceeded)
	default:
		c.mu.aers = append(c.mu.aers, r)
		c.mu.Unlock()
	}
}
