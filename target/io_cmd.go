package target

import (
	"basalt/pkg/backend"
	"basalt/pkg/nvme"
)

// NVM command set I/O commands (NVM Command Set 1.0 §3): Read, Write, Flush,
// Write Zeroes, Dataset Management. Parsing runs on the receive goroutine and
// takes no locks; execution runs on a queue worker, or inline on the receive
// goroutine when the backend never blocks (NonBlocker).

const (
	ioOffsetSLBA  = nvme.SQEOffsetCDW10     // CDW10-11
	ioOffsetNLB   = nvme.SQEOffsetCDW10 + 8 // CDW12 bits 15:0
	dsmOffsetNR   = nvme.SQEOffsetCDW10
	dsmOffsetAttr = nvme.SQEOffsetCDW10 + 4 // CDW11
)

// parseIOCmd validates an I/O command (cf. nvmet_parse_io_cmd and
// nvmet_bdev_parse_io_cmd): controller enabled, namespace active, ANA state
// usable on this path, LBA range inside the namespace, transfer within MDTS
// and equal to the SGL length.
func (sq *SQ) parseIOCmd(c *Controller, r *Request) nvme.Status {
	if !c.ready() {
		// SPDK: I/O while CC.EN = 0 is a Command Sequence Error.
		return r.fail(nvme.StatusCommandSequenceError, nvme.SQEOffsetOpcode)
	}
	op := r.Cmd.Opcode()
	switch op {
	case nvme.IORead, nvme.IOWrite, nvme.IOFlush, nvme.IOWriteZeroes, nvme.IODatasetMgmt:
	default:
		return r.fail(nvme.StatusInvalidOpcode, nvme.SQEOffsetOpcode)
	}
	nsid := r.Cmd.NSID()
	if op == nvme.IOFlush && nsid == nvme.NSIDAll {
		r.execute = executeFlushAll
		return r.expectData(DirNone, 0)
	}
	ns := c.subsys.table().lookup(nsid)
	if ns == nil || !ns.acquire() {
		return r.fail(sq.t.inactiveNSIDStatus(nsid), nvme.SQEOffsetNSID)
	}
	r.ns = ns
	if st := sq.port.ana.anaStatus(ns); !st.Success() {
		return r.fail(st, nvme.SQEOffsetNSID)
	}
	switch op {
	case nvme.IORead, nvme.IOWrite:
		return sq.parseReadWrite(r, ns)
	case nvme.IOFlush:
		r.execute = executeFlush
		return r.expectData(DirNone, 0)
	case nvme.IOWriteZeroes:
		if !ns.inRange(r.Cmd.SLBA(), uint64(r.Cmd.NLB())+1) {
			return r.fail(nvme.StatusLBAOutOfRange, ioOffsetSLBA)
		}
		r.execute = executeWriteZeroes
		return r.expectData(DirNone, 0)
	default:
		return sq.parseDSM(r)
	}
}

// parseReadWrite checks SLBA+NLB ≤ NSZE (LBA Out of Range), (NLB+1) × LBA
// size ≤ MDTS (Invalid Field) and = SGL length (Data SGL Length Invalid).
func (sq *SQ) parseReadWrite(r *Request, ns *Namespace) nvme.Status {
	nlb := uint64(r.Cmd.NLB()) + 1
	if !ns.inRange(r.Cmd.SLBA(), nlb) {
		return r.fail(nvme.StatusLBAOutOfRange, ioOffsetSLBA)
	}
	length := nlb << ns.lbaShift
	if length > uint64(sq.t.cfg.maxTransfer()) {
		return r.fail(nvme.StatusInvalidField, ioOffsetNLB)
	}
	if r.Cmd.Opcode() == nvme.IORead {
		r.execute = executeRead
		return r.expectData(DirC2H, uint32(length))
	}
	r.execute = executeWrite
	if ns.aw != nil {
		r.execute, r.async = executeWriteAsync, true
	}
	return r.expectData(DirH2C, uint32(length))
}

// parseDSM accepts a payload of exactly NR+1 ranges, or the whole 4096-byte
// range list: SGLS bit 16 is 0, so a longer SGL is Data SGL Length Invalid,
// but Linux hosts send the whole list whatever NR is (nvme_setup_discard in
// drivers/nvme/host/core.c allocates NVME_DSM_MAX_RANGES ranges), and
// refusing it would fail every discard they send.
func (sq *SQ) parseDSM(r *Request) nvme.Status {
	nr := r.Cmd.CDW(10)&0xFF + 1
	sgl := r.Cmd.SGLLength()
	if sgl != nr*nvme.DSMRangeSize && sgl != nvme.DSMPayloadSize {
		return r.fail(nvme.StatusDataSGLLengthInvalid, nvme.SQEOffsetSGL)
	}
	r.execute = executeDSM
	r.Dir, r.TransferLen = DirH2C, sgl
	return r.checkSGL()
}

// offset returns the byte offset of the command's SLBA in its namespace.
func (r *Request) offset() int64 { return int64(r.Cmd.SLBA() << r.ns.lbaShift) }

func executeRead(r *Request) {
	sq := r.sq
	n := r.TransferLen
	err := r.ns.be.ReadAt(sq.ctx, r.Data[:n], r.offset())
	r.countIO(false, n, err)
	sq.complete(r, r.statusFor(err, ioOffsetSLBA))
}

// executeWrite writes the data; FUA (CDW12 bit 30) or a disabled volatile
// write cache makes the write durable before completion.
func executeWrite(r *Request) {
	n := r.TransferLen
	err := r.ns.be.WriteAt(r.sq.ctx, r.Data[:n], r.offset(), r.writeFlags())
	r.writeDone(n, err)
}

// executeWriteAsync is executeWrite on a backend.AsyncWriter: Execute
// returns once the write is started, and the request completes when the
// backend calls back, on whichever goroutine it does. r.Data stays the
// slot's own buffer until then, unless the backend copies on submit
// (backend.CopiesOnSubmit): then nothing reads it after WriteAtAsync
// returns, and the transport may lend it (SQ.DoneWithDataOnReturn).
func executeWriteAsync(r *Request) {
	if r.asyncDone == nil {
		r.asyncDone = r.asyncWriteDone // once per request slot: no allocation per write
	}
	r.ns.aw.WriteAtAsync(r.Data[:r.TransferLen], r.offset(), r.writeFlags(), r.asyncDone)
}

// asyncWriteDone completes an asynchronous write (TransferLen is unchanged
// until r completes).
func (r *Request) asyncWriteDone(err error) { r.writeDone(r.TransferLen, err) }

func (r *Request) writeFlags() backend.WriteFlags {
	if r.Cmd.CDW(12)&nvme.RWFUA != 0 || !r.sq.ctrl.Load().wce.Load() {
		return backend.WriteFUA
	}
	return 0
}

// writeDone counts a write of n bytes and completes r with err's status.
func (r *Request) writeDone(n uint32, err error) {
	r.countIO(true, n, err)
	r.sq.complete(r, r.statusFor(err, ioOffsetSLBA))
}

func executeFlush(r *Request) {
	r.sq.complete(r, r.statusFor(r.ns.be.Flush(r.sq.ctx), noErrLoc))
}

// executeFlushAll flushes every namespace the controller can reach through
// this path (NSID FFFFFFFFh). The first failure is reported.
func executeFlushAll(r *Request) {
	sq := r.sq
	st := nvme.StatusSuccess
	for _, ns := range sq.ctrl.Load().subsys.table().list {
		if !sq.port.ana.anaStatus(ns).Success() || !ns.acquire() {
			continue
		}
		err := ns.be.Flush(sq.ctx)
		ns.release()
		if s := r.statusFor(err, noErrLoc); st.Success() {
			st = s
		}
	}
	sq.complete(r, st)
}

func executeWriteZeroes(r *Request) {
	n := (int64(r.Cmd.NLB()) + 1) << r.ns.lbaShift
	err := r.ns.be.WriteZeroes(r.sq.ctx, r.offset(), n)
	r.sq.complete(r, r.statusFor(err, ioOffsetSLBA))
}

// executeDSM deallocates the NR+1 ranges when the AD attribute is set (the
// other attributes are hints and need nothing). Every range is checked
// before any is trimmed; a range of zero blocks is skipped.
func executeDSM(r *Request) {
	sq, ns := r.sq, r.ns
	if r.Cmd.CDW(11)&nvme.DSMAttrDeallocate == 0 {
		sq.complete(r, nvme.StatusSuccess)
		return
	}
	nr := int(r.Cmd.CDW(10)&0xFF) + 1
	data := r.Data[:r.TransferLen]
	for i := range nr {
		rg := nvme.DecodeDSMRange(data, i)
		if rg.NLB != 0 && !ns.inRange(rg.SLBA, uint64(rg.NLB)) {
			sq.complete(r, r.fail(nvme.StatusLBAOutOfRange, dsmOffsetNR))
			return
		}
	}
	for i := range nr {
		rg := nvme.DecodeDSMRange(data, i)
		if rg.NLB == 0 {
			continue
		}
		err := ns.be.Trim(sq.ctx, int64(rg.SLBA<<ns.lbaShift), int64(rg.NLB)<<ns.lbaShift)
		if err != nil {
			sq.complete(r, r.statusFor(err, dsmOffsetAttr))
			return
		}
	}
	sq.complete(r, nvme.StatusSuccess)
}
