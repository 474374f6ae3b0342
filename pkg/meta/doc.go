// Package meta is the node's metadata store: a small, typed key schema on
// top of github.com/dgraph-io/badger/v4, which no other package imports.
//
// The log-structured store (pkg/store) keeps here what is not on its drives:
// the node's identity (its UUID and its cluster's) and geometry, the drives it owns, the volumes, the
// segment table, the GC counters and the checkpoints of every volume's LBA
// map. The drives carry the data and the segment summaries; recovery reads
// the latest checkpoint from here and the summaries written after it from
// the drives.
//
// # Durability
//
// Every write transaction is synced before it returns (badger SyncWrites):
// a method that returns nil has made its change durable. A write that
// returns an error may or may not have been applied.
//
// # Key schema
//
// Keys are an ASCII prefix followed by big-endian integers, so that a
// prefix scan returns records in numeric order. Values of the small records
// are JSON objects of the Go types named below (self-describing, rare,
// small); checkpoint chunks are raw little-endian uint64s.
//
//	key                                     value
//	--------------------------------------  ------------------------------------
//	"node"                                  NodeInfo (with the store's stamp:
//	                                        node_uuid, cluster_uuid)
//	"identity"                              identity.Stamp (identity.go)
//	"cluster/state"                         pkg/cluster's record (cluster.go)
//	"drive/" u32 index                      DriveInfo
//	"vol/" u32 id                           VolumeInfo (snapshot_of, origin,
//	                                        family, ckpt_gen: pkg/store's
//	                                        snapshots and clones)
//	"seg/" u32 id                           SegmentInfo (absent: never used, free, gen 0)
//	"gc"                                    GCStats
//	"ckpt"                                  CheckpointHead (absent: no checkpoint)
//	"ckpt/" u64 gen u32 volume u32 chunk    map chunk (below)
//
// # Checkpoint chunks
//
// A checkpoint stores each volume's LBA map in chunks of ChunkEntries
// entries. Chunk c of volume v holds the entries of LBAs
// [c*ChunkEntries, (c+1)*ChunkEntries) as little-endian uint64s, so a
// chunk's value is 8*ChunkEntries bytes (the last chunk of a volume may be
// shorter). All-zero chunks (unmapped LBAs) are not stored. What an entry
// means is the store's business (pkg/store doc.go, "Map entry").
//
//	offset  size  field
//	     0     8  entry of LBA c*ChunkEntries     (uint64 LE)
//	     8     8  entry of LBA c*ChunkEntries+1
//	   ...
//
// A checkpoint is written under a new generation gen = previous+1: first
// every chunk (in as many transactions as badger's batch limit requires),
// then the "ckpt" head naming gen, then the chunks of older generations are
// deleted. A crash before the head is written leaves the previous
// checkpoint in force; stray chunks of other generations are deleted at the
// next Open.
//
// # Test hook
//
// Options.Gate brackets every write transaction, so a crash-consistency
// test can stop metadata writes at the same instant as drive and
// persistent-memory writes.
package meta
