package host

import (
	"context"
	"fmt"
	"sync"

	"basalt/pkg/nvme"
)

// IOOp is the operation of an asynchronous IO.
type IOOp uint8

// I/O operations.
const (
	OpRead IOOp = iota + 1
	OpWrite
	OpFlush
	OpWriteZeroes
)

func (o IOOp) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFlush:
		return "flush"
	case OpWriteZeroes:
		return "write-zeroes"
	}
	return fmt.Sprintf("IOOp(%d)", uint8(o))
}

// IO is one asynchronous I/O command for Controller.Submit. The caller owns
// it, and the memory Data refers to, again when Done is called; an IO may be
// resubmitted from Done. Reusing IOs makes steady-state submission
// allocation-free.
type IO struct {
	Op   IOOp
	NSID uint32
	SLBA uint64
	// Data is the destination of a read or the source of a write; its length
	// is a multiple of the namespace's block size. Unused otherwise.
	Data []byte
	// Blocks is the number of blocks of a Write Zeroes (1..65536).
	Blocks uint32
	// FUA sets Force Unit Access on a write.
	FUA bool
	// Done is called exactly once per successful Submit, on the receive
	// goroutine of the IO's queue. It must not block (hand the IO to another
	// goroutine through a buffered channel instead), and must not call
	// synchronous Controller methods or Close. It may call Submit, which
	// does not block as long as no more IOs are in flight than
	// QueueDepth()*IOQueueCount().
	Done func(*IO)
	// Tag is for the caller's bookkeeping; the package does not touch it.
	Tag int

	// Err is the result, valid in Done: nil, a *CommandError (errors.As to
	// nvme.Status works), a *ConnectionError, or a *ProtocolError.
	Err error
	// DW0 is completion DW0.
	DW0 uint32
}

func (io *IO) finish(q *queue, s *slot) {
	io.DW0, io.Err = s.cpl.DW0, s.err
	if io.Err == nil && !s.cpl.Status.Success() {
		io.Err = &CommandError{QID: q.qid, CID: s.cpl.CID, Cmd: s.cmd, Status: s.cpl.Status, DW0: s.cpl.DW0}
	}
}

// Submit starts io on an I/O queue with a free command slot (searching
// round robin), waiting for one while every queue is full. If it returns nil, io.Done will be
// called exactly once; if it returns an error, io.Done is not called.
// Submit does not allocate.
func (c *Controller) Submit(ctx context.Context, io *IO) error {
	q, s, err := c.prepareSubmit(ctx, io, nil)
	if err != nil {
		return err
	}
	return c.startSubmit(q, s, io, sendInline)
}

// SubmitBatch starts every IO of ios like Submit, but writes each queue's
// capsules together, with one system call per queue where possible (like
// the Linux block layer's plugging and nvme-tcp's bd->last). It returns how
// many IOs were started: io.Done will be called for exactly those, ios[:n].
// SubmitBatch does not allocate.
func (c *Controller) SubmitBatch(ctx context.Context, ios []*IO) (int, error) {
	var plugged plugList
	defer plugged.unplug()
	for i, io := range ios {
		q, s, err := c.prepareSubmit(ctx, io, &plugged)
		if err != nil {
			return i, err
		}
		plugged.add(q)
		if err := c.startSubmit(q, s, io, sendPlugged); err != nil {
			return i, err
		}
	}
	return len(ios), nil
}

// prepareSubmit validates io and takes a slot on the next queue. When the
// queue is full it first unplugs what the batch queued, since the slots it
// waits for may be held by exactly those unsent commands.
func (c *Controller) prepareSubmit(ctx context.Context, io *IO, plugged *plugList) (*queue, *slot, error) {
	if io.Done == nil {
		return nil, nil, fmt.Errorf("%w: IO.Done is nil", ErrInvalidArgument)
	}
	cmd, in, out, err := c.buildIO(io.Op, io.NSID, io.SLBA, io.Data, io.Blocks, io.FUA)
	if err != nil {
		return nil, nil, err
	}
	var beforeWait func()
	if plugged != nil {
		beforeWait = plugged.unplug
	}
	q, s, err := c.acquireIO(ctx, beforeWait)
	if err != nil {
		return nil, nil, err
	}
	s.cmd = cmd
	prepareData(s, in, out, q.inlineMax)
	return q, s, nil
}

func (c *Controller) startSubmit(q *queue, s *slot, io *IO, mode sendMode) error {
	s.io = io
	io.Err, io.DW0 = nil, 0
	if err := q.start(s, mode); err != nil {
		q.release(s)
		return err
	}
	return nil
}

// plugList remembers the queues a batch queued commands on (without
// allocating for up to len(fixed) queues).
type plugList struct {
	fixed [8]*queue
	n     int
	more  []*queue
}

func (p *plugList) add(q *queue) {
	for i := 0; i < p.n; i++ {
		if p.fixed[i] == q {
			return
		}
	}
	if p.n < len(p.fixed) {
		p.fixed[p.n] = q
		p.n++
		return
	}
	for _, m := range p.more {
		if m == q {
			return
		}
	}
	p.more = append(p.more, q)
}

func (p *plugList) unplug() {
	for i := 0; i < p.n; i++ {
		p.fixed[i].unplug()
	}
	for _, q := range p.more {
		q.unplug()
	}
	p.n, p.more = 0, p.more[:0]
}

// Read reads len(buf)/blocksize blocks at slba into buf (NVM Read, opcode
// 02h). The data arrives in C2HData PDUs; no short reads are accepted.
func (c *Controller) Read(ctx context.Context, nsid uint32, slba uint64, buf []byte) error {
	return c.do(ctx, OpRead, nsid, slba, buf, 0, false)
}

// Write writes buf at slba (NVM Write, opcode 01h), with Force Unit Access
// if fua. Up to InlineDataSize bytes go in the command capsule; larger
// writes are sent in answer to R2T.
func (c *Controller) Write(ctx context.Context, nsid uint32, slba uint64, buf []byte, fua bool) error {
	return c.do(ctx, OpWrite, nsid, slba, buf, 0, fua)
}

// Flush commits the volatile write cache of nsid (opcode 00h).
func (c *Controller) Flush(ctx context.Context, nsid uint32) error {
	return c.do(ctx, OpFlush, nsid, 0, nil, 0, false)
}

// WriteZeroes zeroes nlb blocks at slba (opcode 08h), setting DEAC when the
// namespace's DLFEAT says deallocated blocks read as zeroes, like Linux.
func (c *Controller) WriteZeroes(ctx context.Context, nsid uint32, slba uint64, nlb uint32) error {
	return c.do(ctx, OpWriteZeroes, nsid, slba, nil, nlb, false)
}

func (c *Controller) do(ctx context.Context, op IOOp, nsid uint32, slba uint64, data []byte, blocks uint32, fua bool) error {
	cmd, in, out, err := c.buildIO(op, nsid, slba, data, blocks, fua)
	if err != nil {
		return err
	}
	q, s, err := c.acquireIO(ctx, nil)
	if err != nil {
		return err
	}
	_, err = q.execSlot(ctx, s, &cmd, in, out, q.inlineMax)
	return err
}

// buildIO encodes an NVM command (NVM Command Set 1.0 §3) and returns the
// buffers it moves.
func (c *Controller) buildIO(op IOOp, nsid uint32, slba uint64, data []byte, blocks uint32, fua bool) (cmd nvme.Command, in, out []byte, err error) {
	cmd.SetNSID(nsid)
	switch op {
	case OpFlush:
		cmd.SetOpcode(nvme.IOFlush)
		return cmd, nil, nil, nil
	case OpRead, OpWrite, OpWriteZeroes:
	default:
		return cmd, nil, nil, fmt.Errorf("%w: unknown I/O operation %v", ErrInvalidArgument, op)
	}
	ns := c.namespaces.get(nsid)
	if ns == nil {
		return cmd, nil, nil, fmt.Errorf("%w: namespace %d was not found by the scan", ErrInvalidArgument, nsid)
	}
	cmd.SetSLBA(slba)
	if op == OpWriteZeroes {
		if blocks == 0 || blocks > 1<<16 {
			return cmd, nil, nil, fmt.Errorf("%w: Write Zeroes of %d blocks", ErrInvalidArgument, blocks)
		}
		cdw12 := blocks - 1
		if dl := ns.Identify.DLFEAT; dl&nvme.DLFEATWriteZeroesDeac != 0 && dl&0x7 == nvme.DLFEATReadZeroes {
			cdw12 |= nvme.WZDEAC
		}
		cmd.SetOpcode(nvme.IOWriteZeroes)
		cmd.SetCDW(12, cdw12)
		return cmd, nil, nil, nil
	}
	nlb := len(data) / ns.BlockSize
	switch {
	case len(data) == 0 || len(data)%ns.BlockSize != 0:
		return cmd, nil, nil, fmt.Errorf("%w: %d bytes is not a multiple of the %d-byte block", ErrInvalidArgument, len(data), ns.BlockSize)
	case nlb > 1<<16 || (c.maxTransfer > 0 && len(data) > c.maxTransfer):
		return cmd, nil, nil, fmt.Errorf("%w: %d bytes exceeds the maximum transfer (MDTS: %d bytes; NLB: 65536 blocks)",
			ErrInvalidArgument, len(data), c.maxTransfer)
	}
	cdw12 := uint32(nlb - 1)
	if op == OpRead {
		cmd.SetOpcode(nvme.IORead)
		cmd.SetCDW(12, cdw12)
		return cmd, data, nil, nil
	}
	if fua {
		cdw12 |= nvme.RWFUA
	}
	cmd.SetOpcode(nvme.IOWrite)
	cmd.SetCDW(12, cdw12)
	return cmd, nil, data, nil
}

// Range is one Dataset Management range.
type Range struct {
	SLBA   uint64
	Blocks uint32
}

var dsmPayloads = sync.Pool{New: func() any { return new([nvme.DSMPayloadSize]byte) }}

// Deallocate discards up to 256 ranges (Dataset Management with AD,
// opcode 09h). Like current Linux, the payload is always 4096 bytes,
// whatever the number of ranges.
func (c *Controller) Deallocate(ctx context.Context, nsid uint32, ranges []Range) error {
	if len(ranges) == 0 || len(ranges) > nvme.DSMMaxRanges {
		return fmt.Errorf("%w: %d DSM ranges, want 1..%d", ErrInvalidArgument, len(ranges), nvme.DSMMaxRanges)
	}
	p := dsmPayloads.Get().(*[nvme.DSMPayloadSize]byte)
	defer dsmPayloads.Put(p)
	clear(p[:])
	for i, r := range ranges {
		nvme.EncodeDSMRange(p[:], i, nvme.DSMRange{NLB: r.Blocks, SLBA: r.SLBA})
	}
	var cmd nvme.Command
	cmd.SetOpcode(nvme.IODatasetMgmt)
	cmd.SetNSID(nsid)
	cmd.SetCDW(10, uint32(len(ranges)-1))
	cmd.SetCDW(11, nvme.DSMAttrDeallocate)
	q, s, err := c.acquireIO(ctx, nil)
	if err != nil {
		return err
	}
	_, err = q.execSlot(ctx, s, &cmd, nil, p[:], q.inlineMax)
	return err
}
