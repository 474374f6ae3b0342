// Package target is Basalt's transport-independent NVMe over Fabrics
// controller core, split as Linux nvmet is:
//
//	target.go      Target, Config, ports, CNTLID allocation, Stats
//	subsys.go      subsystems and host access lists
//	ns.go          namespaces (a backend.Backend each)
//	ctrl.go        controllers: CC/CSTS, keep-alive, AER, error log, queues
//	core.go        SQ: Init → parse → Execute → complete exactly once
//	fabrics_cmd.go Connect, Property Get/Set
//	admin_cmd.go   Identify, Abort, Keep Alive, AER
//	features.go    Get/Set Features
//	logpage.go     Get Log Page: error, SMART, firmware, changed NS, effects, ANA
//	io_cmd.go      Read, Write, Flush, Write Zeroes, Dataset Management
//	discovery.go   the discovery controller, its log page, remote subsystems
//	ana.go         ANA groups and states per port, the ANA log
//	status.go      backend errors → NVMe status, in one place
//
// A transport (target/tcp) owns the connections and the per-queue request
// slots. For each connection it calls NewSQ, and for each command:
//
//	transport                         core
//	─────────                         ────
//	CapsuleCmd → r.Cmd ──────────────▶ sq.Init(r)   validate, choose handler,
//	                                                set Dir, TransferLen
//	                   ◀── false ──── (invalid: already completed)
//	H2C data → r.Data[:TransferLen]
//	          ───────────────────────▶ sq.Execute(r) admin: inline
//	                                                I/O: a queue worker, or
//	                                                inline if the backend
//	                                                is a NonBlocker; writes
//	                                                started inline on a
//	                                                backend.AsyncWriter
//	                                   handler → backend → sq.complete(r)
//	QueueResponse(r) ◀──────────────── exactly once, any goroutine
//	C2HData(r.Data[:DataLen]), CapsuleResp(r.Cpl), slot reused
//
//	connection closed ─────────────▶ sq.Release()  admin queue: controller
//	                                                destroyed, every queue's
//	QueueOps.Close(reason) ◀────────── Close called (also on keep-alive
//	                                                expiry, reset, removal)
//
// Controller life (one per admin Connect, CNTLID from [CNTLIDMin,
// CNTLIDMax], unique within its subsystem on this node):
//
//	Connect(QID 0) ─▶ CC.EN=0 ─(Property Set CC.EN=1)─▶ CSTS.RDY=1
//	      ─▶ Identify, Set Features, I/O Connects (QID 1..granted), I/O
//	      ─▶ CC.SHN ─▶ CSTS.SHST=10b ─▶ sockets closed ─▶ destroyed
//
// The I/O path takes no target-wide lock and does not allocate: namespace
// tables are immutable snapshots behind atomic pointers, ANA states are
// atomics per (port, group), and request state lives in the transport's
// slots.
//
// Bad input and broken invariants are told apart (pkg/invariant). Anything
// a host sends, however malformed, is input: it gets the status the
// specification names (an invalid command is completed by Init with it),
// never a panic, a log line at Error level or a closed connection the
// specification does not call for. A broken invariant is a state no input
// can cause, only a bug in the core or the transport: a request completed
// twice, Execute of a request that is not active, a handler missing for an
// accepted command, a slot buffer smaller than MaxTransferSize. Those call
// invariant.Failf, which panics with the invariants build tag (tests) and
// otherwise logs and counts (basalt_invariant_violations_total); the core
// then contains it to the one command: a second completion is dropped, an
// inactive request is not run, and the others complete with Internal
// Error.
package target
