// Package tcp is the NVMe/TCP transport of the target (≈ Linux
// drivers/nvme/target/tcp.c). It frames PDUs, negotiates digests, moves data
// (in-capsule, R2T/H2CData, C2HData) and hands commands to the core
// (package target) through target.Request slots; it knows nothing of
// controllers, namespaces or command semantics.
//
// # Connections and goroutines
//
// A Listener accepts TCP connections for one target.Port. Each connection
// carries exactly one NVMe queue (admin or I/O) and gets its own core queue
// from Target.NewSQ. Per connection there are two goroutines:
//
//   - the receive goroutine runs the receive state machine and owns the
//     connection's lifecycle (handshake, teardown);
//   - the send goroutine, started once the ICResp is written, writes
//     everything else: R2Ts, C2HData, CapsuleResps and the C2HTermReq of a
//     fatal error (a worker of the core's may write the responses instead,
//     see below).
//
// Before its ICReq a connection has no buffer, slot or send goroutine; one
// watchdog goroutine per Listener keeps every connection's handshake
// deadlines (ICReq, Connect).
//
// The core completes commands from any goroutine with QueueResponse, which
// links the command's slot into an intrusive FIFO and never blocks: a slot is
// on the list at most once, so the list is bounded by the slot count. One
// exception: a command completed on one of the core's workers, which may
// block (SQ.CompletesOnWorker), is written by that worker itself when nobody
// else is writing (queue.sendMu), which spares the send goroutine's wake-up
// for every read; otherwise the worker wakes the send goroutine. The
// sender takes the whole list, encodes PDU headers into a per-queue arena,
// references data in the slot buffers, and writes the batch with one
// gathered write (writev). Nothing is allocated per command once every slot
// in use has its buffer.
//
// # Batching
//
// A host submits in bursts (the Linux host and pkg/nvme/host write many
// capsules with one writev), and on a non-blocking backend the core
// completes I/O inside Execute, on the receive goroutine. So the receiver
// is busy while it works through input it has already read (recvBusy):
// completions queued meanwhile, its own or other goroutines', do not wake
// the sender. Before anything that may block it (a read the buffer cannot
// satisfy, a wait for a slot) it goes idle (recvIdle) and wakes the sender
// once, and the whole burst is answered with one gathered write. While it
// is idle every completion wakes the sender itself. A burst is bounded by
// Options.ReadBufferSize, so no completion waits long.
//
// In-capsule data that is already in the read buffer (and has no data
// digest to check) is not copied into the slot buffer when the core is done
// with it once Execute returns (SQ.DoneWithDataOnReturn): a command the
// core executes inline, or a write to an asynchronous backend that copies
// the data when the write is submitted (a replicated volume copies it into
// its proposal) and completes later. The data is lent in place for the
// duration of Execute and consumed afterwards; the command holds no data
// buffer. Any other command gets the slot buffer, and the data is copied.
//
// # Receive state machine
//
//	          ┌──────────────── recvPDU ◀──────────────┐
//	          │ CH: validate type, flags, HLEN, PDO,    │
//	          │ PLEN, limits; PSH; HDGST; pad           │
//	          ▼                                         │
//	CapsuleCmd/H2CData with data ──▶ recvData ──▶ recvDDGST (if DDGSTF)
//	any violation ──▶ recvErr: C2HTermReq queued, connection ends
//
// The first PDU must be an ICReq (PFV 0, HPDA ≤ 31), read straight from the
// socket; the ICResp carries PFV 0, CPDA 0, the host's digest bits and
// MAXH2CDATA. A connection without an ICReq within Options.ICReqTimeout,
// or without a successful Connect within Options.ConnectTimeout of its
// ICResp, is closed.
//
// # Slots
//
// A queue preallocates slots (≈ nvmet_tcp_cmd) once its ICReq is accepted:
// 32 before Connect, Depth()+1 after (the Linux host reuses a CID as soon
// as it sees the completion). A slot's index is Request.Slot and the R2T
// transfer tag. States:
//
//	free ─▶ receiving ─Init─▶ in-core ─QueueResponse─▶ sending ─written─▶ free
//	             ├─▶ r2t-queued ─R2T emitted─▶ awaiting-data ─last H2CData─┘
//	             └─▶ waiting-budget ─granted─┘
//
// Data buffers (power-of-two classes from 4 KiB to the queue's largest
// transfer) come from the node's Budget when a command needs one and go
// back when its slot is free again, so an idle slot holds none (buffers.go,
// waiters.go). Until Init has said which way the data goes, a command's
// Request.Data is a shared scratch slice that nothing writes, as large as
// the queue's largest buffer (Init only checks its capacity).
//
// # Limits
//
// A Budget, shared by the Listeners of a node, bounds what clients can make
// it hold (Limits): connections in all and per remote IP address (one more
// is closed when accepted: nothing is read from it, and no PDU could
// refuse it before its ICReq); the buffers of writes whose data is asked
// for by R2T, per node and per controller (beyond them the target simply
// does not send the R2T yet: the write waits holding only its slot, and
// the controllers with waiting writes take turns); and every other data
// buffer (a command that needs one waits for it before it executes, and
// its receive goroutine reads nothing meanwhile; those buffers never wait
// for a receiver, so the wait ends). The read buffer of a connection is
// 16 KiB from its ICReq on, ReadBufferSize once an I/O queue is connected.
// Timeouts: ICReqTimeout, ConnectTimeout, and H2CDataTimeout from an R2T
// to the last of its data (the send goroutine's timer; the connection is
// closed, the specification names no FES for it). Budget.Stats counts
// connections, refusals, timeouts and buffers for the metrics.
//
// # Decisions
//
// Where NVMe/TCP 1.0 leaves a choice, or the Linux target (nvmet), SPDK and
// FreeBSD differ, the transport does this:
//
//   - Header validation follows FreeBSD nvmf_tcp_validate_pdu_header field
//     by field, lowest field first, except: a second ICReq is a PDU
//     sequence error (SPDK, nvmet); DDGSTF is required only on PDUs with
//     data (the Linux host's nvme_tcp_setup_cmd_pdu; nvmet "len &&
//     !DDGSTF"); PDO alignment is checked only for CPDA ≠ 0 (SPDK
//     nvmf_tcp_pdu_ch_handle).
//   - In-capsule data larger than the queue accepts (8 KiB, or the I/O
//     queue's IOCCSZ-derived size if larger) is FES 05h at the header: the
//     PDU is not read. An SGL that does not describe the in-capsule data the
//     PDU carries gets a status (SGL Descriptor Type Invalid / Data SGL
//     Length Invalid): PLEN says where the next PDU starts. Everything else
//     about the SGL is the core's Init (so it goes through the core's
//     completion path).
//   - One R2T per command for the whole transfer (nvmet, SPDK), so MAXR2T
//     needs no bookkeeping; any number of H2CData PDUs per R2T. H2CData
//     checks and their FES/FEI follow SPDK nvmf_tcp_h2c_data_hdr_handle and
//     FreeBSD nvmf_tcp_handle_h2c_data (see receiveH2CData).
//   - A bad data digest on host data is fatal, FES 03h (nvmet tears the
//     queue down; SPDK up to v22 sends FES 03h; current SPDK fails the
//     command with Transient Transport Error instead).
//   - A capsule reusing an outstanding CID, or exceeding the queue depth, is
//     FES 02h: a Command ID Conflict status would carry the same CID and
//     complete the host's original command (Linux nvme_find_rq).
//   - C2HData carries at most Options.C2HDataSize bytes; the last has
//     LAST_PDU, and SUCCESS (no CapsuleResp) only when the queue's Connect
//     disabled SQ flow control and DW0/DW1 are zero (SPDK, nvmet).
//   - MAXH2CDATA defaults to 128 KiB (SPDK's default; nvmet sends 4 MiB):
//     host data is read straight into the slot buffer, so the value only
//     bounds the time spent in one PDU.
//
// # Teardown
//
// When the receiver stops (EOF, error, violation, QueueOps.Close, Shutdown)
// every command completes exactly once and gives back its slot and buffer
// (teardown.go): a C2HTermReq is written first, then SQ.Release; commands
// Init accepted that will never execute (waiting for write budget, for
// their R2T to go out, or for H2C data) are aborted in the core (SQ.Abort:
// Command Aborted due to SQ Deletion), which releases their namespace;
// executing commands are waited for, the socket being closed after
// Options.DrainTimeout so that a host that does not read cannot hold
// teardown (a command still in the backend is waited for even then: the
// backend may still use its buffer); the sender drains and exits, and the
// socket is closed. A completion arriving after that is dropped.
package tcp
