// Package host is a user-space NVMe/TCP initiator: Basalt's tests, benchmark
// tool and cluster tests use it as a stand-in for the Linux kernel host
// (drivers/nvme/host/tcp.c, core.c, fabrics.c, multipath.c). Its behaviour is
// derived from what the Linux host does on the wire, not from Basalt's
// target, so that target bugs the Linux host would trip over show up in
// tests as errors here.
//
// # Connecting
//
// Dial performs the sequence of `nvme connect` (current Linux):
//
//	admin connection: ICReq (PFV 0, HPDA 0, MAXR2T 0, DGST as asked)
//	                  ICResp checked: PFV 0, CPDA 0, DGST echoed, MAXH2CDATA >= 4096 and %4 == 0
//	Connect           QID 0, SQSIZE 31, KATO ms, CNTLID FFFFh, 1024 bytes in capsule
//	Property Get      CAP (8 bytes); CAP.MPSMIN must be 0
//	Property Set      CC = 00460000h (IOCQES 4, IOSQES 6, CSS NVM), EN 0
//	Property Get      CAP again [CRTO if CAP.CRWMS]
//	Property Set      CC with EN 1
//	Property Get      CSTS until RDY, every ms, for (CAP.TO+1)/2 s
//	Property Get      VS
//	Identify          CNS 01h; checked: CNTLID equals Connect's, KAS != 0,
//	                  IOCCSZ >= 4, IORCSZ >= 1, ICDOFF 0, SGLS[1:0] != 0
//	[Get Log 05h]     if LPA bit 1
//	[Get Log 0Ch]     if CMIC bit 3 (MNAN checked, size vs MDTS)
//	Get Log 02h       SMART (failure only warns)
//	keep-alive        Keep Alive every KATO/2 from now on
//	Set Features 07h  Number of Queues; failure is fatal
//	I/O connections   each: ICReq/ICResp, Connect QID i, SQSIZE
//	                  min(QueueDepth, CAP.MQES+1, MAXCMD)-1, KATO 0, CNTLID
//	[Set Features 0Bh + AER]  if OAES has bits 8, 9, 11 or 31
//	scan              Identify CNS 06h, 02h, then per NSID 03h (VS >= 1.3), 00h
//
// A discovery controller (DialDiscovery) stops after Identify (plus the
// asynchronous event setup) and reads the discovery log like libnvme.
//
// # Queues, slots and CIDs
//
// Each queue is one TCP connection with SQSIZE+1 command slots (the admin
// queue: 32, the last reserved for the one Asynchronous Event Request). A
// command's CID is its slot index plus a generation counter bumped at each
// reuse of the slot, as Linux nvme_cid does:
//
//	 15     12 11                      0
//	+---------+-------------------------+
//	|   gen   |       slot index        |
//	+---------+-------------------------+
//
// A controller PDU naming a CID whose slot is not in flight with that exact
// generation is a protocol violation.
//
// Writes of up to InlineDataSize bytes (IOCCSZ*16-64 on I/O queues; 8128 on
// the admin queue and for Fabrics commands) travel in the capsule with an
// SGL Data Block/Offset descriptor (01h); larger ones carry a Transport SGL
// (5Ah) and their data follows each R2T in H2CData PDUs of at most
// MAXH2CDATA bytes, LAST_PDU on the last PDU of each R2T. Reads receive
// C2HData at contiguous offsets and must be complete when they end, with a
// CapsuleResp or a C2HData carrying SUCCESS (with LAST_PDU).
//
// # Concurrency
//
// All methods are safe for concurrent use. Per connection there is one
// receive goroutine, the only one that reads the socket and completes
// commands, and one writer goroutine. Submitters encode their capsule under
// a short lock into a shared batch; the first submitter that finds no write
// in progress writes batches with writev until none is left (flat
// combining), so that concurrent commands share system calls. The receive
// goroutine and IO.Done callbacks never write to the socket themselves: they
// leave that to the writer goroutine, so that a controller that stops
// reading can never block the receive side. Read, Write and Submit do not
// allocate in steady state.
//
// # Failures
//
// A failed completion is a *CommandError that unwraps to its nvme.Status
// (errors.As(err, &status)); IsPathError tells the errors after which Linux
// native multipath retries on another path (SCT 3 without DNR, or a lost
// connection). Anything wrong with a connection (closed, C2HTermReq, a
// protocol violation, a header digest error, a keep-alive or command whose
// context ends) tears the whole association down, as the Linux host's error
// recovery does; every command in flight and every later call then fails
// with a *ConnectionError wrapping ErrConnectionLost and the cause (a
// *TermReqError carries FES and FEI). NVMe/TCP cannot revoke a single
// command, so a context that ends while its command is in flight costs the
// association. The Controller never reconnects: Dial again, or use
// MultiPath. A bad C2H data digest fails only its command (status 04h), as
// in Linux.
//
// # Differences from the Linux host
//
// Stricter, to catch target bugs: C2HData PDO must be exactly HLEN (+HDGST)
// since the host asked for no padding; flags must be valid for the PDU type
// and digest flags exactly as negotiated; R2Ts must ask for contiguous
// ranges; ANA log NSIDs must ascend; a write completed successfully before
// all its data was solicited is reported. Not implemented: TLS, DH-HMAC-CHAP
// authentication (a Connect asking for it fails), CNS 08h, reconnection,
// ctrl_loss_tmo and the multipath I/O policies other than round robin.
package host
