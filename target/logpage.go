package target

import (
	"basalt/pkg/nvme"
)

// Get Log Page (NVMe Base 2.0 §5.16; checklist §3.5). Every log is built
// whole and then copied from the requested offset (LPOL/LPOU, dword
// aligned); the part of the transfer beyond the log's end is zero-filled.

const (
	logOffsetLID  = nvme.SQEOffsetCDW10
	logOffsetNUMD = nvme.SQEOffsetCDW10 + 2
	logOffsetLPO  = nvme.SQEOffsetCDW10 + 8 // CDW12
	raeBit        = 1 << 15
)

// parseGetLogPage checks NUMD and the offset; the LID is checked when the
// command runs.
func (c *Controller) parseGetLogPage(r *Request) nvme.Status {
	d10, d11 := r.Cmd.CDW(10), r.Cmd.CDW(11)
	numd := uint64(d10>>16) | uint64(d11&0xFFFF)<<16
	length := (numd + 1) * 4
	off := uint64(r.Cmd.CDW(12)) | uint64(r.Cmd.CDW(13))<<32
	if off&3 != 0 {
		return r.fail(nvme.StatusInvalidField, logOffsetLPO)
	}
	if length > AdminMaxTransfer {
		return r.fail(nvme.StatusInvalidField, logOffsetNUMD)
	}
	r.execute = executeGetLogPage
	return r.expectData(DirC2H, uint32(length))
}

// executeGetLogPage returns the requested part of one log. Reading a log
// that clears an event kind with RAE = 0 unmasks that event kind.
func executeGetLogPage(r *Request) {
	c := r.sq.ctrl.Load()
	d10 := r.Cmd.CDW(10)
	lid, lsp, rae := uint8(d10), uint8(d10>>8)&0x7F, d10&raeBit != 0
	off := uint64(r.Cmd.CDW(12)) | uint64(r.Cmd.CDW(13))<<32
	var log []byte
	var event uint32
	switch {
	case c.discovery && lid == nvme.LogDiscovery:
		log, event = c.t.discoveryLog(c.hostNQN), nvme.AECDiscoveryChange
	case c.discovery:
	case lid == nvme.LogError:
		log = c.errorLog()
	case lid == nvme.LogSMART:
		log = c.smartLog()
	case lid == nvme.LogFirmwareSlot:
		log = make([]byte, nvme.FirmwareSlotLogSize)
		nvme.EncodeFirmwareSlotLog(log, c.t.cfg.Firmware)
	case lid == nvme.LogChangedNSList:
		log, event = c.changedNSLog(), nvme.AECNSAttrChanged
	case lid == nvme.LogCommandsEffects:
		log = commandsEffectsLog()
	case lid == nvme.LogANA:
		log, event = c.anaLog(lsp&nvme.ANALSPReturnGroupsOnly != 0), nvme.AECANAChange
	}
	if log == nil {
		r.sq.complete(r, r.fail(nvme.StatusInvalidLogPage, logOffsetLID))
		return
	}
	if off > uint64(len(log)) {
		r.sq.complete(r, r.fail(nvme.StatusInvalidField, logOffsetLPO))
		return
	}
	dst := r.Data[:r.TransferLen]
	n := copy(dst, log[off:])
	clear(dst[n:])
	if !rae && event != 0 {
		c.clearEvent(event)
	}
	r.sq.complete(r, nvme.StatusSuccess)
}

// errorLog returns the Error Information log, newest entry first.
func (c *Controller) errorLog() []byte {
	b := make([]byte, errorLogSlots*nvme.ErrorLogEntrySize)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := uint64(0); i < errorLogSlots && i < c.mu.errCount; i++ {
		e := c.mu.errLog[(c.mu.errCount-i)%errorLogSlots]
		e.Marshal(b[int(i)*nvme.ErrorLogEntrySize:])
	}
	return b
}

// smartLog returns the SMART / Health Information log: no critical
// warnings, full spare, and the controller's I/O counters (data units are
// thousands of 512-byte units, rounded up).
func (c *Controller) smartLog() []byte {
	var sum counterTotals
	for _, sq := range c.queueList() {
		sum.add(sq.counters.totals())
	}
	c.mu.Lock()
	errs := c.mu.errCount
	c.mu.Unlock()
	units := func(bytes uint64) uint64 { return (bytes/512 + 999) / 1000 }
	s := nvme.SMARTLog{
		AvailableSpare: 100, SpareThreshold: 10,
		DataUnitsRead: units(sum.bytesRead), DataUnitsWritten: units(sum.bytesWritten),
		HostReadCommands: sum.readCmds, HostWriteCommands: sum.writeCmds,
		ErrorLogEntriesNum: errs,
	}
	b := make([]byte, nvme.SMARTLogSize)
	s.Marshal(b)
	return b
}

// changedNSLog returns and clears the Changed Namespace List: the NSIDs
// whose attributes changed since the last read, or FFFFFFFFh in entry 0
// when more than 1024 changed.
func (c *Controller) changedNSLog() []byte {
	b := make([]byte, nvme.ChangedNSListSize)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.changedOvf {
		putLE32(b, nvme.NSIDAll)
	} else {
		for i, nsid := range c.mu.changedNS {
			putLE32(b[4*i:], nsid)
		}
	}
	c.mu.changedNS, c.mu.changedOvf = c.mu.changedNS[:0], false
	return b
}

// commandsEffectsLog returns the Commands Supported and Effects log: the
// admin and NVM commands the controller implements, with LBCC (logical
// block content change) on the write-type ones.
func commandsEffectsLog() []byte {
	b := make([]byte, nvme.CommandsEffectsLogSize)
	for _, op := range []nvme.Opcode{
		nvme.AdminGetLogPage, nvme.AdminIdentify, nvme.AdminAbort, nvme.AdminSetFeatures,
		nvme.AdminGetFeatures, nvme.AdminAsyncEventReq, nvme.AdminKeepAlive,
	} {
		putLE32(b[4*int(op):], nvme.EffectCSUPP)
	}
	io := b[nvme.CommandsEffectsIOOffset:]
	putLE32(io[4*int(nvme.IOFlush):], nvme.EffectCSUPP)
	putLE32(io[4*int(nvme.IORead):], nvme.EffectCSUPP)
	for _, op := range []nvme.Opcode{nvme.IOWrite, nvme.IOWriteZeroes, nvme.IODatasetMgmt} {
		putLE32(io[4*int(op):], nvme.EffectCSUPP|nvme.EffectLBCC)
	}
	return b
}
