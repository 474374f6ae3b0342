// Package bench is basalt-bench's engine: a fio-shaped load generator for
// block devices (a Basalt volume over NVMe/TCP through pkg/nvme/host, a Ceph
// RBD image through librbd in bench/rbd), with HDR-style latency histograms
// and data verification that survives crashes.
//
// # Running a workload
//
// Run drives a Spec (block size, read/write mix, share of random offsets,
// queue depth, jobs, ramp and runtime, region) against a Device. Each job is
// one goroutine with its own Queue and QueueDepth preallocated slots and
// buffers: it fills the queue, then on every wake-up takes all completions,
// resubmits the freed slots together and flushes once (for NVMe/TCP: one
// SubmitBatch, one writev per I/O queue). Completions inside the measured
// window [start+Ramp, start+Ramp+Runtime) are counted and their latency,
// from submission to completion, recorded in a per-job Histogram; the jobs'
// histograms are merged at the end. In steady state nothing is allocated
// per I/O (TestSteadyStateDoesNotAllocate, BenchmarkRunnerMemDevice).
//
// Histogram buckets are log-linear over nanoseconds: values below 128 are
// exact; above, each power of two is cut into 64 equal buckets, so a
// quantile is at most 1/64 (1.6 %) above the true value; mean, min and max
// are exact.
//
// # Verification
//
// With Spec.Verify every write stamps each 4 KiB unit it covers; every read
// of a unit whose last write was acknowledged checks that it holds exactly
// that generation. A job never has two I/Os to one block in flight, and jobs
// own disjoint parts of the region, so each read has one right answer.
//
// Verified unit (VerifyUnit = 4096 bytes; little-endian):
//
//	offset  size  field
//	+------+-----+---------------------------------------------------------+
//	|    0 |   8 | magic "BSLTVRFY"                                        |
//	|    8 |   8 | LBA: the device LBA of this unit (catches misdirection) |
//	|   16 |   8 | generation: a run-wide counter, new for every write     |
//	|   24 |   8 | seed of the run (catches data of another run)           |
//	|   32 |   4 | CRC32C of the 4096 bytes with this field zeroed         |
//	|   36 |  28 | zero                                                    |
//	|   64 |4032 | payload: SplitMix64 stream of (seed, LBA, generation)   |
//	+------+-----+---------------------------------------------------------+
//
// # Journal
//
// A Verifier with a journal (NewJournaledVerifier) records, before a batch
// of writes is sent, an intent record per write, and fsyncs (one fdatasync
// per batch); after a write completes, an ack record (made durable with the
// next batch). After a crash of the target or of the bench (kill -9),
// VerifyJournal replays the journal and reads back every unit it names: a
// unit must hold the generation last acknowledged, or a newer one whose
// intent was recorded and never acknowledged (in flight at the crash),
// never an older one. ResumeVerifier does the same check, takes what each
// unit holds as acknowledged, compacts the journal and continues it.
//
// Journal file (little-endian): a 64-byte header, then 32-byte records.
//
//	header                                record
//	+-----+----+-----------------------+  +-----+----+----------------------+
//	|   0 |  8 | magic "BSLTJRNL"      |  |   0 |  1 | kind: 1 intent, 2 ack|
//	|   8 |  4 | version (1)           |  |   1 |  3 | zero                 |
//	|  12 |  4 | LBA size              |  |   4 |  4 | units (4 KiB each)   |
//	|  16 |  4 | verify unit (4096)    |  |   8 |  8 | first LBA            |
//	|  20 |  4 | zero                  |  |  16 |  8 | generation           |
//	|  24 |  8 | region offset, bytes  |  |  24 |  4 | zero                 |
//	|  32 |  8 | region size, bytes    |  |  28 |  4 | CRC32C of bytes 0-27 |
//	|  40 |  8 | seed                  |  +-----+----+----------------------+
//	|  48 | 12 | zero                  |
//	|  60 |  4 | CRC32C of bytes 0-59  |
//	+-----+----+-----------------------+
//
// Replay stops at the first record that is short or fails its CRC (a write
// torn by the crash); reopening for append cuts it off.
//
// # Multipath
//
// NVMeDevice connects to every path given and sends I/O to one whose ANA
// state for the namespace is optimized (else non-optimized), round robin,
// like Linux native multipath. An I/O that fails with a path error (ANA
// status, lost connection) is retried on another usable path, after the
// ANA logs are re-read; while none is usable it waits, at most
// NVMeConfig.PathTimeout. Lost associations are redialled in the background
// every ReconnectDelay, so a run survives a node restart.
//
// # Raw socket
//
// SocketDevice stores nothing: each I/O is one request and one response
// with ServeSocket's echo server (basalt-bench socket-server), over one TCP
// connection per queue, pipelined up to the queue depth. It measures the
// network floor under any networked storage with the same load generator;
// the wire format is drawn in socket.go.
//
// # CPU per I/O
//
// Options.CPUPIDs names the processes of the system under test; their
// utime+stime from /proc/PID/stat, sampled at the edges of the measured
// window, divided by the I/Os completed in it, is Result.CPUUSPerIO.
package bench
