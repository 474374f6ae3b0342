// Package cache is the write buffer: a crash-safe circular log of records on a
// persistent-memory region (pmem.Region).
//
// It stores opaque records, each a caller-defined Kind and a payload, under
// strictly increasing sequence numbers (Seq). It knows nothing of Raft, LBAs or
// volumes. The contract, in one paragraph: a record whose Append has returned
// is durable; after a crash, Open recovers exactly the records whose Append
// returned, in order, less those Released or Truncated, plus possibly records
// whose Append was still running (complete and valid, never torn, never after
// a gap); space is reused only after a Release made durable says so, and an
// Append that finds no space waits for it instead of failing or overwriting.
//
// # Region layout
//
// The region is a 4096-byte header block, then the log: the rest of the
// region, rounded down to a multiple of 64 bytes (L bytes in all).
//
//	region offset
//	0      +------------------------------+
//	       | header slot 0 (128 bytes)    |  the header is double-buffered:
//	128    +------------------------------+  generation g lives in slot g%2,
//	       | header slot 1 (128 bytes)    |  and Open uses the valid slot with
//	256    +------------------------------+  the higher generation
//	       | zero                         |
//	4096   +------------------------------+
//	       | log: records, 64-byte        |
//	       | aligned, circular            |
//	4096+L +------------------------------+
//
// Log positions are absolute byte counts since the region was formatted (they
// never wrap); position p lives at region offset 4096 + p mod L.
//
// # Header slot (little-endian)
//
//	offset size field
//	     0    8 magic "BASALTWB"
//	     8    2 version (1)
//	    10    2 slot size (128)
//	    12    4 log offset (4096)
//	    16   16 region UUID, drawn at format
//	    32    8 region size in bytes at format; Open refuses another size
//	    40    8 generation: +1 on every header write
//	    48    8 tail position: where the oldest live record (or the padding
//	            before it) begins
//	    56    8 tail seq: the Seq of that record
//	    64    8 truncate seq: records with seq >= this must carry epoch >= the
//	            header's epoch (see Truncation)
//	    72    8 epoch (current)
//	    80    8 closed head: the head position at a clean Close
//	    88    8 closed seq: the next Seq at a clean Close; 0 = not closed cleanly
//	    96   28 zero
//	   124    4 CRC32C (Castagnoli) of bytes 0..123
//
// A header is written by Release (new tail), Truncate and Open (new epoch) and
// Close (closed head and seq), always to the slot not holding the current
// header, then persisted. A torn header write leaves that slot invalid, and
// Open falls back to the other slot, which holds the previous header: the one
// in force until the torn write, since nothing relies on a header before its
// Persist returns.
//
// # Record (little-endian), at a 64-byte aligned log position
//
//	offset size field
//	     0    4 magic "WBRc"
//	     4    4 CRC32C (Castagnoli), seeded with the CRC32C of the region UUID,
//	            over bytes 0..3, bytes 8..39 and the payload (a padding record:
//	            bytes 0..3 and 8..39 only)
//	     8    1 version (1)
//	     9    1 kind (the caller's Kind; 0 in a padding record)
//	    10    1 flags: bit 0 = padding; other bits zero
//	    11    1 zero
//	    12    4 payload length in bytes
//	    16    8 seq
//	    24    8 position: the record's own absolute log position
//	    32    8 epoch
//	    40    n payload
//	  40+n      unused up to the next multiple of 64 (not written)
//
// A record never wraps around the end of the log. When one does not fit before
// the end, a padding record fills the rest of the lap (its length runs exactly
// to the end of the log) and the record starts at the next lap. A padding record
// carries the seq of the record after it and consumes no Seq.
//
// A record (whole, 40 bytes of header and the payload) is at most half the log,
// and at most 2 GiB (Stats.MaxPayload gives the payload limit). That bound is what guarantees an
// Append always gets space eventually: with the log empty, a record of at most
// L/2 bytes fits either before the end of the lap or, after padding, at the
// start of the next one.
//
// # Recovery
//
// Open reads the header and scans from the tail position, expecting the tail
// seq. It accepts the record at position p when the magic, version and CRC are
// right, its position field is p, its seq is the one expected, it lies wholly in
// the lap and within L bytes of the tail, and its epoch is (a) no greater than
// the header's, (b) no smaller than the previous record's, and (c) no smaller
// than the header's epoch when its seq is at least the header's truncate seq.
// The scan stops at the first record that fails any check; whatever lies beyond
// is ignored. Then Open starts a new epoch (see below), so that records it did
// not accept can never be accepted later.
//
// Why each check: the CRC rejects torn records (a record becomes valid only
// once its Persist covers it whole); the position field rejects stale records
// from earlier laps, and the UUID seed those of another region; the seq keeps
// the order gap-free; the epoch rules reject records that were truncated.
//
// # Truncation and epochs
//
// Truncate(from) and each Open move the head back to where record from (or the
// first unaccepted record) began, and new records are written over the old
// ones. Because records differ in size, an old record can reappear just past a
// new one, at a position and seq the scan would expect. So each of these writes
// a header with epoch+1 and truncate seq = from, before any record of the new
// epoch is written, and every record carries the epoch it was written in. An
// old record is from an older epoch: either its seq is at least the truncate seq
// (rule c), or the scan reaches it after a record of the newer epoch (rule b).
//
// # Persistence points and acknowledgement
//
// Append writes the record (and any padding before it) into the region and
// persists it; it returns only when every record with a smaller seq has been
// persisted too, so an acknowledged record is never behind a gap. Appends from
// many goroutines copy and persist in parallel. Release persists a header with
// the new tail before the space is handed to new records, so recovery never
// starts inside overwritten data. A failed Persist makes the Buffer failed
// (ErrFailed): no later Append is acknowledged, since what reached the media is
// unknown; Open on the region recovers.
//
// The clean-close header (closed head and seq) is a paired check: if the scan
// after a clean Close does not end exactly there, records were lost or damaged
// while the Buffer was closed, and Open returns ErrCorrupt instead of serving a
// shorter log.
package cache
