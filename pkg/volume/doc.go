// Package volume is Basalt's replicated block device: a Volume is a Raft
// group of package replication plus this node's replica, a local
// backend.Backend (a pkg/store volume on a cluster node), and it is the
// backend.Backend the NVMe target serves. It is the one package that knows
// both sides: replication moves and orders bytes by index, the backends
// store blocks, and the Volume turns block I/O into log entries (op.go),
// applies committed entries to the replica, streams the replica as a Raft
// snapshot (snapshot.go), refuses writes the replica has no room for
// (checkSpace), and maps replication's errors to the backend error classes
// the target turns into ANA states (errors.go).
//
// It also counts its I/O per op (Counters: ops, errors, bytes, a latency
// histogram; atomics, nothing allocated per I/O), which pkg/metrics reads
// at scrape time; Instrument gives a backend that is not a Volume the same
// counters.
//
// # Operations (a normal entry's payload, little-endian)
//
// A write, trim or write-zeroes is one entry (writes of more than 1 MiB
// several); the group's proposal ID (replication.ProposalHeaderSize bytes)
// precedes it in the entry.
//
//	offset size field
//	     0    1 version (1)
//	     1    1 operation: 1 write, 2 trim, 3 write zeroes
//	     2    6 zero
//	     8    8 byte offset in the volume (block aligned)
//	    16    8 byte length (block aligned, > 0)
//	    24    n data (write only; n = length)
//
// # Snapshot stream (little-endian)
//
// What replication streams from the leader's Snapshot into a lagging
// follower's Restore:
//
//	header                             run
//	offset size field                  offset size field
//	     0    8 magic "BSLTVSNP"            0    1 kind: 1 data, 2 zeroes, 3 end
//	     8    2 version (1)                 1    7 zero
//	    10    2 zero                        8    8 byte offset (end: CRC32C)
//	    12    4 block size                 16    8 byte length (end: volume size)
//	    16    8 volume size                24    n data (data runs: n = length,
//	    24    8 zero                                 at most 1 MiB)
//
// Runs cover the volume in order without gaps; all-zero blocks travel as
// zero runs. The end run's offset field holds the CRC32C (Castagnoli) of
// every byte before the end run.
package volume
