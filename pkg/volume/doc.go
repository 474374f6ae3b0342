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
// # The durability contract
//
// This is the whole life of an acknowledged write, in one place. Each step
// names the function that does it; a write is never in fewer places than
// the rule at the end allows.
//
//	step              where                                        after it
//	1 log durable     replication: core.handleReady → persist →    the entry survives what the
//	                  logStorage.appendRecord → cache.Buffer.Append Raft log region survives
//	                  (one kindEntries record; the leader sends
//	                  its appends first, a follower answers only
//	                  after its persist)
//	2 committed       etcd Raft, on a majority of persisted        no electable leader lacks it
//	                  appends (the leader's own counts after its
//	                  persist)
//	3 applied         replication: core.applyNormal →              reads here return it; the
//	                  Volume.Apply, with the entry's bytes where   leader completes the host's
//	                  they lie in the log region (Stager:          command (the acknowledgement)
//	                  WriteStaged keeps a reference, no copy;
//	                  any other replica: WriteAt)
//	4 staged          pkg/store: a descriptor in the staged ring   the block is in the volume's
//	                  (volume, LBA, CRC32C per block, the entry's  overlay; its bytes are still
//	                  index as token) entered in the overlay       only in the Raft log
//	5 destaged        pkg/store writer: pack copies the newest     the block is on the drives,
//	                  version of each block from the log region    in a synced stripe with
//	                  into a stripe buffer, parity, one write and  parity; its record is
//	                  one sync per drive, the LBA maps, then       released and the volume's
//	                  release in sequence order                    StagedFloor passes its index
//	6 replica durable Volume.AppliedIndex: every applied index     replication may drop the
//	                  below StagedFloor (all of them when nothing  entry from this node's log
//	                  is staged); Checkpoint forces it (a Flush
//	                  destages everything, padding the last
//	                  stripe) when the log needs room
//	7 log compacted   replication: core.maybeCompact, never past   the entry is gone from this
//	                  AppliedIndex → logStorage.compact (a         node's Raft log; its region
//	                  kindState record) → the releaser frees the   space is reused
//	                  region behind the slowest group
//
// The rule: a node compacts its log only up to the index its own replica
// has made durable (step 7 never passes step 6), so every applied write is,
// at every moment, in this node's Raft log, or on its drives, or both; and
// while the replica references an entry's bytes (steps 3 to 5) the log
// keeps them, unchanged, in place. The ways a log goes other than by
// compaction all come after the replica has let go of it: a group that
// fails or is removed calls ReleaseLog first (a Flush: everything staged
// is destaged), a snapshot's Restore flushes before Raft records the
// snapshot, a log checkpoint (which rewrites entries into a new record)
// waits until compaction has reached the applied index, and the node
// closes its store before it unmaps the log region.
//
// After a crash nothing staged survives (the ring lives in process
// memory); the store recovers its maps from the drives and the group
// applies again every committed entry after its compaction point, which by
// the rule includes everything that was not yet on the drives. Entries are
// block writes and unmaps, idempotent, so applying one twice is harmless.
//
// On the leader a 4 KiB write's payload is copied twice before a stripe
// buffer holds it: from the NVMe/TCP receive buffer (lent in place when
// the capsule arrived whole) into the proposal (op.go, encodeOp), and from
// the proposal into the Raft log region (cache.Buffer.Append). A follower
// copies it from the frame it received into its log region. The third copy
// is the destage into the stripe buffer; no buffer of the store's own holds
// it in between.
//
// # Operations (a normal entry's payload, little-endian)
//
// A write, trim or write-zeroes is one entry (writes of more than 1 MiB
// several); the group's proposal ID (replication.ProposalHeaderSize bytes)
// precedes it in the entry.
//
//	offset size field
//	     0    1 version (1)
//	     1    1 operation: 1 write, 2 trim, 3 write zeroes, 4 repair,
//	              5 snapshot, 6 delete snapshot, 7 rollback
//	     2    6 zero
//	     8    8 byte offset in the volume (block aligned)
//	    16    8 byte length (block aligned, > 0)
//	    24    n data (write only; n = length)
//
// A repair (see "Reads from another replica") has its base index before
// its data:
//
//	offset size field
//	     0   24 as above, operation 4
//	    24    8 base index: data is the range's value as of it
//	    32    n data (n = length)
//
// A node that predates the repair operation refuses it as corrupt, which
// stops the group there: every replica of a volume must run a version that
// knows it before any node can propose one.
//
// A snapshot operation (snapops.go) names a snapshot of the volume: 5
// takes it, 6 deletes it, 7 rolls the volume back to it. Offset is 0 and
// the data is the name (1 to 255 bytes, no '@' or '/'):
//
//	offset size field
//	     0   24 as above, operation 5, 6 or 7; offset 0, length n
//	    24    n the snapshot's name
//
// Every replica applies it at its index, so each replica's snapshot holds
// exactly the entries before it. The leader checks the name against its
// replica before proposing. A snapshot and a rollback destage the replica
// first, so applying one makes every entry up to its index durable (the
// durable index moves there and the entry is never applied again); a
// deletion applied twice finds nothing to delete. Snapshot streams carry
// blocks only: a replica restored from one keeps its own snapshots as they
// were and logs that snapshots taken or deleted in the entries the stream
// stands for are not reflected on it. The same rule as for repairs holds
// for nodes that predate these operations.
//
// # Reads from another replica
//
// Every replica holds the whole volume, so a block the leader's replica
// cannot read back (backend.ErrMedia: more of its stripe lost than the
// store's parity covers) need not be an Unrecovered Read Error. When the
// node set a PeerReader (SetPeerReader), ReadAt and ReadAtAsync (peer.go)
// read the range from another replica instead: with minIndex the leader's
// AppliedThrough, which its read barrier has taken past every write
// acknowledged before the read, the other node waits until its own replica
// has applied minIndex and reads it directly (ReadReplica, never through
// the group), returning the bytes and ReflectsAtMost, an index its replica
// reflects nothing after. The leader waits until its own replica has
// applied that far before it answers, so a later read served here never
// sees an older value than this one did. The host gets the bytes; the
// volume counts it (Counters.PeerRepairs) and logs it once per range.
//
// Then the leader proposes a repair for each run of blocks its replica
// still cannot read (repair.go), with the bytes and base = minIndex. The
// bytes are the range's value as of some committed index at or after base,
// block by block, and the repair's own index i is above it (the repair is
// proposed after the other replica read, and every entry committed before
// a proposal precedes it in the log). Each replica applies the repair in log order and writes it
// only if its change log (changes.go) proves that no entry in (base, i)
// touched the range; then the range's value was the same at every index
// from base to i-1, so the bytes are its value at i-1, and writing them
// changes no block's value on a replica that could read it, while a
// replica that could not (the leader, or any other with the same loss)
// gets its blocks back. Where an entry after the base wrote the range, or
// the change log cannot tell (its floor passed base: trimmed, restarted,
// restored since, or SetChangeLimit(0)), the replica skips the repair:
// it changes nothing, and the next read repairs again. A write of the
// repair that fails is skipped too and does not stop the group. Skipping
// or writing therefore differ only in whether a replica's unreadable
// blocks are rewritten, never in the value a replica that can read them
// holds; replicas may differ in which of them wrote a repair (each decides
// from its own change log), never in their values.
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
//
// # Delta snapshot stream (little-endian)
//
// What the leader streams instead (delta.go) to a follower whose replica
// holds every entry up to a base index (replication.SnapshotBase, which the
// follower announced): only the ranges that entries after the base wrote,
// trimmed or zeroed, as the leader's replica holds them now.
//
//	header                               runs, as above, then the end run
//	offset size field
//	     0    8 magic "BSLTVSNP"         runs ascend and never overlap, but
//	     8    2 version (2)              may leave gaps: what they skip did
//	    10    2 zero                     not change after the base; the end
//	    12    4 block size               run is as above (CRC32C of every
//	    16    8 volume size              byte before it, and the volume
//	    24    8 base index               size)
//	    32    4 identity length k (1..256)
//	    36    4 zero
//	    40    k identity (the replicas' SnapshotIdentity)
//
// The leader knows what changed from its change log (changes.go): per
// applied entry, its index and byte range, in memory, coalesced where
// writes continue one another, at most SetChangeLimit records (24 bytes
// each). The ranges since the base are merged and read from the replica
// an extent at a time. A trim or write-zeroes is a change like a write: its
// range reads as zeroes and travels as a zero run, which the follower
// applies with WriteZeroes, so what was trimmed meanwhile is deleted there
// too. That is why no map of mapped blocks travels: a bitmap of a 1 TiB
// volume's 4 KiB blocks is 32 MiB on every delta, and a per-segment
// generation rule would need the store to keep the index of every block it
// relocates; the change log costs the bytes written and 24 bytes per
// record. Its limit is the price of precision: a base older than its
// oldest record is answered by extent instead (generations.go). Beside the
// records the leader keeps, per extent of the volume, the highest index of
// an entry that changed any byte of it, kept as its distance from the
// log's start in 4 bytes per 4 KiB extent, grown lazily up to the highest
// extent written (nothing for a volume that applied nothing, 16 KiB for
// 16 MiB, 256 KiB for 256 MiB), and never more than 524,288 extents (2 MiB):
// past 2 GiB the extents double, each pair merged into one with the higher
// index. For such a base every extent
// whose index is above it travels whole, as the leader's replica holds it
// now, zero runs for what is trimmed or unwritten. Both halves start with
// the leader's first applied entry (or its last restore: they are in
// memory), so only a base from before that, or replicas of different
// identities, or SetChangeLimit(0), get a whole snapshot.
//
// A delta is a valid snapshot for the same reason a whole one streamed
// while entries apply is (replication.StateMachine): where no entry after
// the base wrote, the follower's replica already agrees with the leader's,
// and the follower applies every entry after the snapshot's index; a
// delta cut short leaves its replica partly newer, which the next
// snapshot, delta or whole, corrects the same way. An extent delta only
// sends more of the same: no extent's index is ever below that of an entry
// since the start that changed it (recording raises it, a merge keeps the
// higher), so every byte an entry after the base changed lies in an extent
// that travels, and the rest of an extent that travels is the leader's
// current value, which the entries after the snapshot's index redo over
// just as they do over a whole snapshot.
package volume
