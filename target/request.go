package target

import (
	"sync/atomic"

	"basalt/pkg/nvme"
)

// DataDir is the direction of a command's data transfer.
type DataDir uint8

const (
	DirNone DataDir = iota // no data
	DirH2C                 // host to controller (write-like: Write, DSM, Connect, Set Features with data)
	DirC2H                 // controller to host (read-like: Read, Identify, Get Log Page)
)

// Request is one command in flight on a submission queue (≈ struct nvmet_req).
// Requests live in slots that the transport preallocates per queue; the core
// never allocates or frees them.
//
// Lifecycle, driven by the transport (one goroutine per queue receives):
//
//  1. the transport fills Cmd from a CapsuleCmd PDU and calls SQ.Init(r).
//     Init validates the command, chooses its handler, and sets Dir and
//     TransferLen. On failure Init completes r itself (QueueResponse is
//     called) and returns false.
//  2. for DirH2C the transport places exactly TransferLen bytes in
//     Data[:TransferLen] (in-capsule data, or H2CData after R2T).
//  3. the transport calls SQ.Execute(r). The handler runs, possibly on
//     another goroutine, and ends in exactly one completion: the core fills
//     Cpl (CID, SQID, SQHD, Status, DW0/DW1) and, for DirC2H, DataLen bytes in
//     Data, then calls QueueOps.QueueResponse(r) once.
//  4. the transport sends C2HData (DirC2H and success) and the CapsuleResp,
//     then reuses the slot.
//
// A request Init accepted that will never execute (its connection ends
// while it waits for its data or a buffer) is ended with SQ.Abort, which
// completes it like any other: every request Init accepts completes
// exactly once, and releases what Init took.
type Request struct {
	// Cmd is the submission queue entry as received.
	Cmd nvme.Command
	// Cpl is the completion; valid when QueueResponse is called.
	Cpl nvme.Completion
	// Data is the command's data buffer, owned by the transport. At Init
	// its capacity is at least the command's SGL length, or the queue's
	// maximum transfer size (MDTS, or 8 KiB for admin queues and Fabrics
	// commands) when its data is not in the capsule; Init only checks the
	// capacity and must not write it (a transport may attach a shared
	// scratch slice until it knows the direction). From Execute on it
	// holds at least TransferLen bytes of the command's own. While Execute
	// runs a request SQ.DoneWithDataOnReturn reports, the transport may
	// lend exactly TransferLen bytes of host data from its own buffers
	// instead; the core does not read Data once Execute has returned.
	Data []byte
	// Dir and TransferLen are set by Init: the data the command moves.
	Dir         DataDir
	TransferLen uint32
	// DataLen is the number of bytes of Data to send for a DirC2H command
	// that succeeded (normally TransferLen).
	DataLen uint32
	// Slot is the transport's index of this request (for its own use).
	Slot int

	// The fields below belong to the core; Init resets them.
	execute func(*Request) // chosen by Init (cf. req->execute)
	ns      *Namespace     // resolved by Init for namespace commands
	sq      *SQ            // the queue the request arrived on
	errLoc  uint16         // Parameter Error Location (SQE byte offset) of a failure
	async   bool           // execute returns before completion: no worker needed
	worker  bool           // executed by a worker, which completes it
	state   atomic.Uint32  // reqFree → reqActive → reqDone: completed once
	// asyncDone is r.asyncWriteDone, made once for the life of r (Init
	// keeps it): the callback of every asynchronous write r carries.
	asyncDone func(error)
}

// QueueOps is what the core needs from a transport queue (≈ struct
// nvmet_fabrics_ops for one queue).
type QueueOps interface {
	// QueueResponse hands a completed request back to the transport. The
	// core calls it exactly once per request that was passed to Init, from
	// any goroutine. It must not block on the network, unless
	// SQ.CompletesOnWorker(r).
	QueueResponse(r *Request)
	// Close tears the queue's connection down (controller reset, keep-alive
	// expiry, shutdown). It may be called from any goroutine, more than once,
	// and must not block on the network.
	Close(reason error)
}
