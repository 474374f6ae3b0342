package target

import (
	"basalt/pkg/backend"
	"basalt/pkg/nvme"
)

// Get Log Page (NVMe Base 2.0 §5.16). Every log is built whole and then
// copied from the requested offset (LPOL/LPOU, dword aligned); the part of
// the transfer beyond the log's end is zero-filled.

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
		// Built from the offset on: log holds bytes [off, ...).
		part, size := c.t.discoveryLogPart(c.hostNQN, off, uint64(r.TransferLen))
		if off > size {
			r.sq.complete(r, r.fail(nvme.StatusInvalidField, logOffsetLPO))
			return
		}
		log, event, off = part, nvme.AECDiscoveryChange, 0
		if log == nil {
			log = []byte{} // off = size: an empty part, not an unknown log
		}
	case c.discovery:
	case lid == nvme.LogError:
		log = c.errorLog()
	case lid == nvme.LogSMART:
		var st nvme.Status
		if log, st = c.smartLog(r.Cmd.NSID()); !st.Success() {
			r.sq.complete(r, r.fail(st, nvme.SQEOffsetNSID))
			return
		}
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

// SMART / Health Information (LID 02h, NVMe Base 2.0 §5.16.1.3). Basalt
// has no sensors and knows no wear of its drives; a namespace's fields come
// from its backend's health (backend.HealthReporter, a store volume through
// every wrapper), and a backend without one (memory, file) reports a
// healthy device:
//
//	Critical Warning     bit 0 spare below threshold; bit 1 composite
//	                     temperature at or beyond a threshold the host set;
//	                     bit 2 a drive lost or not yet rebuilt, a read not
//	                     recovered, or a failed store; bit 3 read only
//	Composite Temp.      smartTemperatureK: a fixed, plausible 300 K (27 °C),
//	                     below the default 343 K threshold (0 K would read
//	                     as a measurement of absolute zero)
//	Available Spare      redundancy left: 100 × (parity − drives lost) /
//	                     parity; without parity, 100 while every drive is
//	                     healthy, else 0
//	Spare Threshold      smartSpareThreshold (50 %): a parity-1 store falls
//	                     below it at its first lost drive, parity-2 at its
//	                     second
//	Percentage Used      how full the store is (used / capacity, rounded up,
//	                     at most 255): for a store, running out of space is
//	                     what ends its life for writes
//	Data Units, Host     NSID FFFFFFFFh (or 0): this controller's I/O;
//	Read/Write Commands  a namespace's NSID: its I/O through every
//	                     controller on this node
//	Media Errors         reads the store could not recover
//	Error Log Entries    this controller's
//
// NSID FFFFFFFFh aggregates the controller's namespaces: warnings are
// or-ed, the lowest spare and the highest use and media error count are
// reported (namespaces on one node usually share its store, each reporting
// the store's count).
const (
	smartTemperatureK   = 300
	smartSpareThreshold = 50
)

// countIO counts a read or write of n bytes that ended with err, for the
// queue's statistics and the namespace's SMART log.
func (r *Request) countIO(write bool, n uint32, err error) {
	r.sq.counters.countIO(write, n, err)
	if r.ns != nil {
		r.ns.io.countIO(write, n, err)
	}
}

// countIO counts one command, and its n bytes if it succeeded.
func (q *queueCounters) countIO(write bool, n uint32, err error) {
	cmds, bytes := &q.readCmds, &q.bytesRead
	if write {
		cmds, bytes = &q.writeCmds, &q.bytesWritten
	}
	cmds.Add(1)
	if err == nil {
		bytes.Add(uint64(n))
	}
}

// smartLog returns the SMART / Health Information log for nsid: one
// namespace, or the controller as a whole for FFFFFFFFh (and 0, which older
// hosts send); another NSID fails with the status §3.2.1.5 names.
func (c *Controller) smartLog(nsid uint32) ([]byte, nvme.Status) {
	var sum counterTotals
	tab := c.subsys.table()
	nss := tab.list
	switch ns := tab.lookup(nsid); {
	case nsid == 0 || nsid == nvme.NSIDAll:
		for _, sq := range c.queueList() {
			sum.add(sq.counters.totals())
		}
	case ns == nil:
		return nil, c.t.inactiveNSIDStatus(nsid)
	default:
		sum, nss = ns.io.totals(), []*Namespace{ns}
	}
	c.mu.Lock()
	errs, over, under := c.mu.errCount, c.mu.feat.tempOver, c.mu.feat.tempUnder
	c.mu.Unlock()
	units := func(bytes uint64) uint64 { return (bytes/512 + 999) / 1000 }
	s := nvme.SMARTLog{
		CompositeTemp: smartTemperatureK, AvailableSpare: 100, SpareThreshold: smartSpareThreshold,
		DataUnitsRead: units(sum.bytesRead), DataUnitsWritten: units(sum.bytesWritten),
		HostReadCommands: sum.readCmds, HostWriteCommands: sum.writeCmds,
		ErrorLogEntriesNum: errs,
	}
	if smartTemperatureK >= over || smartTemperatureK <= under {
		s.CriticalWarning |= nvme.SMARTWarnTemperature
	}
	for _, ns := range nss {
		if !ns.acquire() {
			continue
		}
		h, ok := backend.HealthOf(ns.be)
		ns.release()
		if ok {
			addHealth(&s, h)
		}
	}
	if s.AvailableSpare < s.SpareThreshold {
		s.CriticalWarning |= nvme.SMARTWarnSpare
	}
	b := make([]byte, nvme.SMARTLogSize)
	s.Marshal(b)
	return b, nvme.StatusSuccess
}

// addHealth folds one backend's health into s: warnings or-ed, the lower
// spare, the higher use and media error count.
func addHealth(s *nvme.SMARTLog, h backend.Health) {
	if h.FailedDrives > 0 || h.MediaErrors > 0 || h.Failed {
		s.CriticalWarning |= nvme.SMARTWarnReliability
	}
	if h.ReadOnly {
		s.CriticalWarning |= nvme.SMARTWarnReadOnly
	}
	s.AvailableSpare = min(s.AvailableSpare, spareLeft(h))
	s.PercentageUsed = max(s.PercentageUsed, percentUsed(h))
	s.MediaErrors = max(s.MediaErrors, h.MediaErrors)
}

// spareLeft is the redundancy h has left, in percent.
func spareLeft(h backend.Health) uint8 {
	switch {
	case h.FailedDrives == 0:
		return 100
	case h.Parity <= h.FailedDrives:
		return 0
	}
	return uint8(100 * (h.Parity - h.FailedDrives) / h.Parity)
}

// percentUsed is how full h's storage is, in percent rounded up (at most
// 255); storage without capacity left is full.
func percentUsed(h backend.Health) uint8 {
	switch {
	case h.CapacityBytes > 0:
		return uint8(min((h.UsedBytes*100+h.CapacityBytes-1)/h.CapacityBytes, 255))
	case h.Drives > 0 || h.UsedBytes > 0:
		return 100
	}
	return 0
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
