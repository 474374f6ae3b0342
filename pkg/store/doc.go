// Package store is a node's log-structured block store: host writes are
// acknowledged once persisted in the write buffer (package cache, on
// persistent memory), then destaged in the background as full erasure-coded
// stripes appended to the node's drives, and found again after any crash.
//
// A Store owns N drives (disk.Drive), one write-buffer region (pmem.Region)
// and a metadata store (package meta, badger). It serves thin volumes;
// *Volume implements backend.Backend with 4096-byte blocks.
//
// # Write path
//
// WriteAt appends one write-buffer record per run of at most 256 blocks
// (volume, LBA, per-block CRC32C, data). When Append returns, the record
// is persisted: WriteAt enters it into the volume's overlay (LBA → newest
// buffered version) and returns. Trim and WriteZeroes append an unmap
// record the same way; unmapped blocks read as zeros.
//
// The writer goroutine (one per store, the only code that changes the maps,
// the segment table and the drives' data region) reads the records in
// order and packs the blocks that are still the newest version of their
// LBA into stripes; overwritten versions are skipped (write absorption).
// Full stripes are written in batches: parity computed (package ec), the
// summary copied into every chunk, one write per drive in parallel, one
// sync per drive. Then the stripes' entries are applied to the maps, the
// overlay forgets those versions, and the write buffer releases the records
// they complete. The writer fills and encodes the next batches while the
// drives write earlier ones (at most Options.BatchFlights host batches in
// flight, and two of the cleaner's). A batch goes out when it is full; or,
// with no host batch in flight, once Options.FlushStripes stripes are full
// or at the next tick: a batch per stripe would spend the drives' time and
// much of the node's CPU on syncs. Sequences are assigned as batches are
// flushed, and batches of both streams complete in that order, so stripes
// are applied in sequence order. After a crash, replay stops at the first stripe that is
// not intact, whatever later batches reached the drives: their records are
// still in the write buffer.
//
// Segment rows (opened, sealed) reach the metadata in the background, many
// per transaction (segrows.go): an open row is durable before the
// segment's first stripe is written (a segment whose open a crash lost is
// free again at its old generation, and its next open would take stripes
// the lost one wrote for its own), every row before a checkpoint; a seal
// row that a crash loses is redone by recovery, which seals a segment it
// finds open at its last intact stripe.
//
// Partial stripes: a stripe is written when full. A partial one is padded
// (empty slots are zero) and written only when (a) no write has arrived for
// Options.PartialStripeDelay, (b) the write buffer is fuller than
// Options.BufferHighWater, (c) Flush or FUA on a write buffer that does not
// survive power loss (tmpfs), or Store.Flush, (d) Close, (e) a segment is
// closed early (drive failure, re-striping). Otherwise data waits in the
// (persistent) write buffer, where it is already durable. (c) makes a
// flush-heavy host pay a padded stripe per flush on a volatile buffer: the
// price of being honest about durability there.
//
// # Staging by reference
//
// With Options.StageByReference (a cluster node, whose Raft log holds
// every write durably until it is compacted) the store keeps no copy of
// written data of its own. Volume.WriteStaged stages a descriptor of the
// caller's bytes: volume, LBA, at most 16 blocks, their CRC32Cs computed
// from the bytes at that moment, and the caller's token (a Raft index,
// non-decreasing per volume). Descriptors live in a ring (staged_ring.go)
// that grows when full and never waits for space, and are numbered like
// write-buffer records, 1, 2, ... from every Open. The overlay, the
// publisher, pack and release work on them exactly as on write-buffer
// records (stager.go is the one interface both sources implement): pack
// copies each block that is still the newest from the caller's bytes into
// its batch, a read of a staged block copies it from the caller's bytes
// and checks it against its sum (bytes changed meanwhile read as
// backend.ErrMedia, never as wrong data), and the writer releases records
// in sequence order once the stripes that hold them are durable, or newer
// durable versions overwrote them.
//
// A volume's records with a token (WriteStaged, TrimStaged) are linked
// oldest first; its floor (Volume.StagedFloor) is the token of the oldest
// not yet released. The caller keeps a write's bytes unchanged until the
// floor is above its token, and after a crash replays every write whose
// token is at or above the floor it last saw. Reads copy under a shared
// lock that release, volume deletion and Close take exclusively, so a
// reader holding a record has finished before the floor moves past it,
// and once DeleteVolume or Close returns the store never reads the
// caller's bytes of that volume (of any) again. A failed store releases
// nothing, so its floors stay where they were.
//
// Nothing staged is persistent: recovery enters no records (the ring
// starts empty under a new identity, so a checkpoint's BufferSeq never
// applies to it), Flush and FUA destage, and WriteAt stages a copy of its
// own (snapshot restore) in the same sequence as staged writes, so the
// later call for a block wins. BufferHighWater is a fraction of
// Options.StagedSize. Nothing on the drives or in the metadata changes.
//
// # Read path
//
// A block is read from the write buffer if its overlay has a version, else
// through the map from its drive (one aligned read for a run of adjacent
// blocks), verified against the checksum in its map entry. A block that
// fails it, or whose drive fails, is reconstructed from the other chunks of
// its stripe row and the checksums in the stripe summary, checked against
// the same checksum, and written back in place. A block that cannot be
// reconstructed is an error wrapping backend.ErrMedia, never wrong data.
//
// # Segments, stripes and addressing
//
// Beyond the 1 MiB each drive reserves (package disk), the drives are cut
// into segments: segment g occupies bytes [1 MiB + g*S*C, 1 MiB +
// (g+1)*S*C) of every drive, S = SegmentStripes and C = ChunkSize. Stripe
// j of a segment is chunk j of that range on each drive the segment uses.
// A segment is opened with the geometry of the moment (k data + m parity
// chunks over the healthy drives: ec.Narrower after a loss), filled stripe
// after stripe, sealed, cleaned, freed, and opened again with its
// generation incremented.
//
// Every chunk of a stripe starts with s summary blocks (the same summary in
// every chunk: any one surviving drive tells what the stripe holds) and
// holds P = C/4096 - s payload blocks. Parity is computed over the payload
// rows only, so the summary can carry the parity blocks' checksums. Data
// chunk c of stripe j sits in column (c+j) mod (k+m) of the segment:
// chunks rotate, so data reads spread over every drive.
//
//	one chunk (C bytes) on one drive:
//	+------------------+------------------------------------------+
//	| summary (s blks) | payload: P blocks (data slots or parity) |
//	+------------------+------------------------------------------+
//
// Data slot q (0 <= q < k*P) of a stripe is block s + q mod P of data
// chunk q / P. A PBN (physical block number) numbers the data slots:
//
//	pbn = segment*stride + stripe*(k*P) + q,   stride = S * (kmax*Pmax)
//
// where kmax*Pmax is the slot count of the full-width geometry. 2^31-1
// PBNs (the map entry's packed flag takes the top bit) bound a node to
// 8 TiB of data slots.
//
// # Map entry
//
// Each volume's map is a directory of chunks of 4096 packed uint64 entries
// (lbamap.go): 8 bytes per block, nothing for never-written 16 MiB ranges.
//
//	bit   63 .. 32                         31   30 .. 0
//	      +--------------------------------+----+---------------------------+
//	      | CRC32C of the slot on drive    | P  | PBN + 1  (0 = unmapped)   |
//	      +--------------------------------+----+---------------------------+
//
// P (packed) is set when the slot is a packed slot (below) holding the
// block compressed; the checksum is then that of the whole 4096-byte
// packed slot. P comes from the summary entry that mapped the block (its
// fragment byte), never from the data, so a raw block that happens to
// look like a packed slot is never decompressed. The checksum in the
// entry, apart from the block, is what catches a misdirected or lost
// write: a stale block at the right place fails it.
//
// # Packed slot (compression)
//
// A volume created with compression (VolumeOptions.Compression: lz4 or
// zstd, package compress) has each block compressed as the writer packs
// it into a stripe. A block that compresses to maxFragmentBytes (3072) or
// less becomes a fragment of the stripe's open packed slot, which takes
// fragments until the next does not fit or it holds 8; others are stored
// raw in a slot of their own, as without compression. A packed slot,
// little-endian, fragments laid from its end downwards:
//
//	offset   size  field
//	     0      4  magic "BPAK"
//	     4      1  version = 1
//	     5      1  n: fragments (1..8)
//	     6      2  zero
//	     8      4  CRC32C of bytes [0, 8) and the n descriptors
//	    12   28*n  descriptors (below), in the order the fragments came
//	     ...       zero
//	   off_n  len_n  fragment n-1 ... fragment 0 ends at 4096
//
//	descriptor (28 bytes):
//	offset  size  field
//	     0     8  LBA
//	     8     4  volume ID (> 0)
//	    12     4  CRC32C of the block decompressed
//	    16     4  CRC32C of the fragment's bytes
//	    20     2  offset of the fragment in the slot
//	    22     2  length (> 0); fragment i ends where fragment i-1 starts
//	    24     1  algorithm: 1 lz4 (block format), 2 zstd (one frame)
//	    25     3  zero
//
// A read of a packed block reads and checks the slot like any block
// (reconstruction included), finds the newest descriptor of its volume and
// LBA, checks the fragment's checksum, decompresses it straight into the
// caller's buffer and checks the block's checksum; the adjacent LBAs that
// map to the same slot are served from that one read. A volume is not both
// compressed and encrypted (VolumeOptions.check): the cipher's sector number
// is one block's LBA, and a packed slot holds several.
//
// The checksum is of the block as it is on the drive: for an encrypted
// volume, of its ciphertext (the summary's entry checksums likewise).
//
// # Encrypted blocks
//
// A volume created with encryption aes-xts-256 (cipher.go) has each data
// slot it takes hold the block encrypted with AES-256-XTS under the
// volume's 64-byte data key, the XTS sector number being the block's LBA
// (little-endian in the first 8 bytes of the 16-byte tweak, the rest zero):
//
//	slot (4096 bytes) = XTS-Encrypt(data key, sector = LBA, plaintext block)
//
// Nothing else on the drives changes: summaries, parity and padding are as
// for a volume in clear, so the cleaner, scrub and rebuild need no key. The
// volume's metadata record (meta.VolumeInfo) names the encryption and a
// check value of the key, never the key.
//
// # Stripe summary (version 1)
//
// s*4096 bytes at the start of every chunk of the stripe, little-endian.
//
//	offset    size  field
//	     0       4  magic "BSUM"
//	     4       2  version = 1
//	     6       2  s: summary blocks per chunk
//	     8       8  stripe sequence number (> 0; global, +1 per stripe)
//	    16       8  durable: every stripe with a lower or equal sequence was
//	                synced before this one was written (< sequence)
//	    24       8  buffer seq: write-buffer records <= this are destaged by
//	                the stripes up to this one (host stripes; 0 otherwise)
//	    32       4  segment
//	    36       4  segment generation (its life)
//	    40       4  stripe index in the segment
//	    44       1  k: data chunks
//	    45       1  m: parity chunks
//	    46       1  stream: 1 host writes, 2 relocated blocks
//	    47       1  zero
//	    48       2  parity checksum count = m*P
//	    50       2  entry count E
//	    52      12  zero
//	    64    4m*P  CRC32C of each parity payload block, parity chunk by
//	                parity chunk, row by row
//	64+4mP    24*E  entries (below), in the order they were made
//	     ...        zero
//	s*4096-4     4  CRC32C of every byte before it
//
//	entry (24 bytes):
//	offset  size  field
//	     0     8  LBA
//	     8     4  volume ID (> 0)
//	    12     4  write/relocate: CRC32C of the block; unmap: block count (> 0)
//	    16     4  relocate: PBN+1 the block is moved from; otherwise 0
//	    20     1  kind: 1 write, 2 relocate, 3 unmap
//	    21     1  fragment: 0 raw; 1..8 the block's place in a packed slot
//	    22     2  zero
//
// Write and relocate entries take the data slots in order: an entry with
// fragment 0 or 1 takes the next slot; fragment k > 1 joins the packed slot
// the latest fragment-1 entry started, as its k-th fragment (an entry with
// fragment 0 may come between). For a packed entry, the checksum field is
// the packed slot's CRC32C (the same in all its entries) and a relocation's
// source has bit 31 set if it was a packed slot. Slots after the last are
// padding and hold zeros. Applying a summary (to the map, in entry order)
// is: write maps the LBA to its slot (packed if its fragment is not 0);
// relocate does so only if the map still points at the source (a
// compare-and-swap: the cleaner's copy loses to a host write that came in
// meanwhile; the whole entry is compared for a raw block moved raw, only
// the PBN+1 field when a packed slot is involved, since the slot's
// checksum changes); unmap unmaps the range. The entries are the segment summary
// of the issue: a segment's summary is the concatenation of its stripes'.
//
// # Write-buffer record payloads
//
// Kind 1, write of n blocks (1 <= n <= 256), little-endian:
//
//	offset      size    field
//	     0         4    volume ID (> 0)
//	     4         4    n
//	     8         8    first LBA
//	    16       4*n    CRC32C of each block
//	16+4n   4096*n    data
//
// Kind 2, unmap of n blocks (1 <= n <= 2^30):
//
//	offset  size  field
//	     0     4  volume ID (> 0)
//	     4     4  n
//	     8     8  first LBA
//
// The cache's own header and checksum wrap these (package cache, doc.go).
//
// # Checkpoints and recovery
//
// The writer checkpoints every volume's map to the metadata (package meta)
// every CheckpointInterval, every CheckpointStripes stripes, when the
// cleaner waits for one, and at Close. A checkpoint is a consistent cut:
// the maps after exactly the stripes up to some sequence Seq.
//
// Open recovers: (1) the latest checkpoint; (2) the summaries of the
// segments that may hold later stripes (open ones, and those sealed after
// Seq), taken in each segment from stripe 0 while intact, of the current
// generation, increasing, and not past the seal; (3) those stripes applied
// in sequence order from Seq+1 while there is no gap, each one above every
// summary's durable mark read back whole first (it may have been torn by the
// crash; it ends the replay if it is); (4) segments open at the crash sealed
// at their last applied stripe; (5) live counts recomputed from the maps;
// (6) the write buffer: records the applied stripes destaged are released,
// the others entered into the overlays and destaged again. Since applying
// a stripe is the same function at runtime and in recovery, in the same
// order, the recovered maps are exactly the runtime ones at the last
// applied stripe; the write buffer holds everything acknowledged since.
//
// A segment is freed only when it holds no live block, is sealed, and the
// checkpoint in force covers all its stripes: recovery never needs its
// summaries again, and a relocation's compare-and-swap only compares
// addresses, so the cleaned segment's content is not needed either.
//
// # Growing a volume
//
// ResizeVolume grows a volume in place; volumes never shrink. It writes the
// new size into the volume's record in the metadata, then the writer
// replaces the map's directory by a longer one that shares the chunks, and
// only then does I/O reach the new blocks. No format changes: a checkpoint
// chunk written before the growth is a short last chunk, which loads into
// the longer map, and no summary or write-buffer record names a block past
// the size in the metadata, which a checkpoint of the longer map never
// precedes.
//
// # Snapshots and clones
//
// A snapshot is a read-only volume (its record's snapshot_of names the
// volume, its name is volume@snap) whose map shares the volume's chunks; a
// clone is a writable volume (origin names the snapshot) whose map starts
// as a share of a snapshot's. Sharing is redirect-on-write: a chunk held by
// several maps (mapChunk.refs > 1) is copied by the map that changes it
// first, so creating a snapshot copies the directory (8 bytes per 16 MiB),
// no chunk and no data. The volumes that share blocks form a family (the
// records' family field: the first volume's ID); since a shared block is
// always at the same LBA in every member, whether a block is live is one
// look-up per member at its LBA:
//
//	volume db   dir ─┬─► chunk 0 (refs 2) ◄─┬─ dir  db@s1 (snapshot)
//	                 └─► chunk 1' (own copy) │
//	                                         └─ chunk 1 (refs 1, frozen)
//
// A block counts live (segment live counts, mapped blocks) once, when its
// first member maps it, and stops when its last one lets go; the cleaner
// relocates a block any member maps, and a relocation (replayed too) moves
// it in every member's map that points at the source, in place in a shared
// chunk. A volume with snapshots, or a snapshot with clones, cannot be
// deleted before them (ErrInUse), so the volume a summary entry names is
// alive while any member maps its blocks.
//
// Creating a snapshot, a clone or a rollback is a writer command: a
// snapshot and a rollback first destage everything published (the map then
// holds every write acknowledged before the call), then the maps change
// and a checkpoint is taken. A new snapshot's or clone's record carries
// ckpt_gen, the generation of that checkpoint, and is written before its
// head: recovery finds the record with its map in the checkpoint, or (the
// crash came first, the call never returned) a ckpt_gen past the head's
// generation, and marks the record deleted. A rollback needs no record:
// the checkpoint holds the rolled-back map, or the old one is in force.
// Deleting a snapshot marks its record deleted; the writer then counts
// down the blocks only it held, which the cleaner reclaims.
//
// # Cleaning
//
// The cleaner runs when fewer than GCLowSegments are free, until
// GCHighSegments are: it picks a sealed victim (cost-benefit by default,
// or greedy), reads its summaries, and relocates the blocks the maps still
// point at into its own stream of stripes (cold data apart from host
// writes). Write amplification = (destaged + relocated) / destaged blocks.
// A live fragment of a packed slot is decompressed and packed again into
// the cleaner's stream, with its volume's compression. Live counts count
// map entries, so a packed slot frees when none of its fragments is live;
// a segment's capacity counts its data slots plus the fragments beyond one
// per packed slot (recounted from the maps at recovery).
//
// # Discarding freed segments
//
// Once the free state of cleaned segments is durable in the metadata, the
// writer tells every healthy drive that each freed segment's range,
// [1 MiB + g*S*C, +S*C), holds nothing (disk.Drive.Discard: BLKDISCARD on
// a block device, punched holes in a drive file), so thin-provisioned and flash drives
// get the space back. It does so before any of the segments is reopened,
// so nothing reads or writes the ranges meanwhile. Discard is best
// effort: a failure is logged and counted (Stats.DiscardErrors; the
// space then stays allocated on the drive), never returned, and a drive
// that reports itself lost is marked failed as on a read.
// Stats.DiscardedBytes sums the bytes discarded over the drives. Nothing
// depends on what a discarded range reads back as: a reopened segment is
// written stripe by stripe, and recovery stops at the first summary
// that is not intact and of the segment's current life (zeros included).
//
// # Scrub
//
// Store.Scrub checks every written stripe once, on demand: each chunk's
// copy of the summary, data blocks against their entries, padding against
// zeros, parity against the parity checksums; a row with at most m bad
// blocks is reconstructed and the bad blocks on healthy drives rewritten in
// place. A Scrubber runs the same check on a schedule in the background:
// every stripe once per ScrubOptions.Interval (pkg/node: store.scrub_interval,
// default a week; 0 turns it off), one segment after another, each stripe
// pinned while it is read (a segment freed meanwhile is skipped), its drive
// reads paced to at most BytesPerSecond (store.scrub_rate, default 64 MiB/s)
// so host I/O keeps the drives. A pass starts Interval after the previous
// one completed (after the schedule began, for the first); its state
// (ScrubState: when the schedule began, the last completed pass and its
// counts, the pass in progress and its cursor, the next segment) is saved
// through a ScrubStateStore after every segment, so a restart resumes a
// pass where it stopped and keeps the schedule; pkg/node keeps it in
// scrub.json in the data directory. Stripes beyond repair are logged as
// errors and counted (ScrubCounts.Unrecoverable); Scrubber.Status reports
// progress, the last pass and when the next is due, for the API and the
// metrics.
//
// # Identity
//
// The store's own identity is its node record in the metadata (pkg/meta
// NodeInfo, JSON) and the superblock of each drive (pkg/disk doc.go):
//
//	where                 field         value
//	--------------------  ------------  --------------------------------------
//	metadata "node"       node_uuid     the node's UUID (identity.NodeUUID)
//	metadata "node"       cluster_uuid  its cluster's UUID (absent: no cluster,
//	                                    or formatted before identity stamps)
//	superblock, offset 32 node UUID     the same node UUID, on every drive
//
// On a cluster node Options.Stamp gives both UUIDs: a new format writes them,
// and Open refuses a node record that names another node or cluster
// (ErrForeignStore); a record formatted before stamps, whose node UUID the
// node adopted as its own, gets the cluster UUID written in. A drive whose
// superblock names another node is opened failed (below); ReadIdentity reads
// all of it without opening the store, so that the node can refuse such
// state before it writes anything (pkg/node).
//
// # Drive failure
//
// A drive that fails an I/O with disk.ErrDriveFailed, or fails a write, is
// marked failed (and recorded). Reads reconstruct its chunks; open segments
// using it are padded, written and sealed, and new segments use the
// survivors with ec.Narrower's geometry. A stripe write is accepted as long
// as no more than m of its chunks failed. Rebuild restores full protection
// onto a replacement drive (ReplaceDrive) or, without one, by re-striping
// every segment that used the lost slot. Losses beyond parity give
// backend.ErrMedia.
//
// Open marks failed every drive that is missing, unreadable or carries
// another drive's superblock, and opens degraded; it refuses
// (ErrTooManyLost) when more slots are lost (failed and not evacuated)
// than the parity covers, and then records nothing. The background
// rebuild (StartRebuilder, rebuild_background.go) runs a Rebuild pass
// whenever a slot is failed or rebuilding: at start, after every failure
// and every replacement (a pass in progress is stopped and planned again),
// and again a minute after a pass that failed. It paces its drive I/O at
// RebuildOptions.BytesPerSecond on the store's clock, and RebuildStatus
// reports its progress. What a pass did stays done: a segment re-striped
// holds no live block any more, and after each segment rebuilt onto a
// replacement (synced) the slot's record keeps RebuiltSegments, the
// segment ID below which every segment is done, so a pass after a restart
// starts there.
package store
