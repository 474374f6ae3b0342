package meta

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"basalt/pkg/identity"
)

// ChunkEntries is the number of map entries in one checkpoint chunk: 4096
// entries (32 KiB) cover 16 MiB of a volume with 4 KiB blocks.
const ChunkEntries = 4096

// FormatVersion is the metadata format this code writes and reads.
const FormatVersion = 1

// VolumeID names a volume for all time; IDs are never reused. 0 is invalid.
type VolumeID uint32

func (id VolumeID) String() string { return "vol" + strconv.FormatUint(uint64(id), 10) }

// SegmentID is a segment's index: segment s occupies the same byte range on
// every drive of the node.
type SegmentID uint32

func (id SegmentID) String() string { return "seg" + strconv.FormatUint(uint64(id), 10) }

// NodeInfo is the node's identity and the geometry its store was formatted
// with. It is written once, at format time.
type NodeInfo struct {
	// FormatVersion is the metadata format; Open refuses other versions.
	FormatVersion int `json:"format_version"`
	// NodeUUID is also written into every drive's superblock. On a cluster
	// node it is the node's identity.NodeUUID (pkg/store Options.Stamp); a
	// store formatted before identity stamps has a UUID of its own, which
	// the node adopts.
	NodeUUID [16]byte `json:"node_uuid"`
	// ClusterUUID is the cluster the store's node belongs to (zero: a node
	// without a cluster, or a store formatted before identity stamps).
	ClusterUUID identity.ClusterUUID `json:"cluster_uuid,omitzero"`
	// Drives is the number of drive slots.
	Drives int `json:"drives"`
	// Data and Parity are the configured stripe geometry (chunks), and
	// ChunkSize its chunk size in bytes.
	Data      int `json:"data"`
	Parity    int `json:"parity"`
	ChunkSize int `json:"chunk_size"`
	// SegmentStripes is the number of stripes in a segment.
	SegmentStripes int `json:"segment_stripes"`
	// Segments is the number of segments on each drive.
	Segments int `json:"segments"`
}

// DriveState is the health of a drive slot.
type DriveState uint8

const (
	// DriveHealthy drives hold their column of every segment that uses them.
	DriveHealthy DriveState = iota
	// DriveFailed drives are lost; what they held is reconstructed from
	// parity until a rebuild restores protection.
	DriveFailed
	// DriveRebuilding is a replacement drive being filled; it serves no reads
	// and new stripes avoid it until the rebuild completes.
	DriveRebuilding
)

func (s DriveState) String() string {
	switch s {
	case DriveHealthy:
		return "healthy"
	case DriveFailed:
		return "failed"
	case DriveRebuilding:
		return "rebuilding"
	}
	return fmt.Sprintf("DriveState(%d)", uint8(s))
}

// DriveInfo is one drive slot.
type DriveInfo struct {
	Index uint32     `json:"index"`
	UUID  [16]byte   `json:"uuid"`
	Size  int64      `json:"size"`
	State DriveState `json:"state"`
	// Evacuated is set when a failed drive's segments have all been
	// re-striped onto the survivors: nothing depends on the slot any more.
	Evacuated bool `json:"evacuated,omitempty"`
	// RebuiltSegments, while the drive is rebuilding, is how far the
	// rebuild has come: every segment below this ID holds its chunks on it.
	RebuiltSegments uint32 `json:"rebuilt_segments,omitempty"`
}

// VolumeInfo describes a volume. A deleted volume keeps its record, marked
// Deleted, so that its ID is never reused and recovery can tell its records
// and summary entries from a live volume's.
type VolumeInfo struct {
	ID        VolumeID `json:"id"`
	Name      string   `json:"name"`
	Size      int64    `json:"size"`
	BlockSize int      `json:"block_size"`
	Deleted   bool     `json:"deleted,omitempty"`
	// Compression is how the store packs the volume's blocks: "lz4",
	// "zstd", or "" (none).
	Compression string `json:"compression,omitempty"`
	// Encryption is the volume's encryption at rest ("" none, or
	// "aes-xts-256"); its key is never stored here, only KeyCheck, a
	// check value that tells the right key from a wrong one (pkg/store
	// cipher.go).
	Encryption string `json:"encryption,omitempty"`
	KeyCheck   string `json:"key_check,omitempty"`
	// SnapshotOf, for a snapshot (a read-only frozen copy of a volume's
	// map), is the volume it was taken of; 0 for a writable volume.
	SnapshotOf VolumeID `json:"snapshot_of,omitempty"`
	// Origin, for a clone, is the snapshot its map started as a share of.
	Origin VolumeID `json:"origin,omitempty"`
	// Family is the ID of the first volume of the family this one shares
	// blocks with (0: the volume's own ID). A block is free only when no
	// member of its family maps it.
	Family VolumeID `json:"family,omitempty"`
	// CkptGen, for a snapshot or clone, is the generation of the first map
	// checkpoint that holds its map: a record whose CkptGen is past the
	// checkpoint in force is a creation that never completed.
	CkptGen uint64 `json:"ckpt_gen,omitempty"`
}

// SegmentState is where a segment is in its life.
type SegmentState uint8

const (
	// SegmentFree segments hold nothing anyone needs.
	SegmentFree SegmentState = iota
	// SegmentOpen segments are being appended to.
	SegmentOpen
	// SegmentSealed segments are full (or closed early) and only read,
	// cleaned and freed.
	SegmentSealed
)

func (s SegmentState) String() string {
	switch s {
	case SegmentFree:
		return "free"
	case SegmentOpen:
		return "open"
	case SegmentSealed:
		return "sealed"
	}
	return fmt.Sprintf("SegmentState(%d)", uint8(s))
}

// SegmentInfo is one row of the segment table.
type SegmentInfo struct {
	ID    SegmentID    `json:"id"`
	State SegmentState `json:"state"`
	// Gen counts the segment's lives; stripe summaries carry it, so that a
	// summary left from an earlier life is never taken for a current one.
	Gen uint32 `json:"gen"`
	// AllocSeq is the stripe sequence number the store was at when the
	// segment was opened: every stripe in it has a sequence >= AllocSeq.
	AllocSeq uint64 `json:"alloc_seq"`
	// SealSeq, for a sealed segment, is the sequence of its last valid
	// stripe (AllocSeq-1 if it has none): stripes with a higher sequence in
	// it are stale.
	SealSeq uint64 `json:"seal_seq,omitempty"`
	// Stripes, for a sealed segment, is the number of valid stripes.
	Stripes int `json:"stripes,omitempty"`
	// Data and Parity are the geometry of the segment's stripes.
	Data   int `json:"data"`
	Parity int `json:"parity"`
	// Columns maps the segment's columns to drive indexes; len = Data+Parity.
	Columns []uint32 `json:"columns"`
	// Stream is the store's label for what the segment holds (host writes or
	// relocated data).
	Stream uint8 `json:"stream"`
}

// GCStats are the garbage collector's lifetime counters.
type GCStats struct {
	Runs            uint64 `json:"runs"`
	RelocatedBlocks uint64 `json:"relocated_blocks"`
	DestagedBlocks  uint64 `json:"destaged_blocks"`
	PaddingBlocks   uint64 `json:"padding_blocks"`
	HostBlocks      uint64 `json:"host_blocks"`
}

// CheckpointHead names the checkpoint in force.
type CheckpointHead struct {
	// Gen is the generation of the checkpoint's chunks.
	Gen uint64 `json:"gen"`
	// Seq is the stripe sequence the maps reflect: every stripe with a
	// sequence <= Seq, and none after.
	Seq uint64 `json:"seq"`
	// BufferSeq is the write-buffer sequence those stripes destaged up to.
	BufferSeq uint64 `json:"buffer_seq"`
	// BufferUUID names the write buffer BufferSeq counts in (zero in
	// checkpoints written before it was recorded). A store whose buffer is
	// another one (blank after a reboot on tmpfs, a replaced device) takes
	// none of its records for destaged.
	BufferUUID [16]byte `json:"buffer_uuid"`
	// Volumes lists, per volume, the chunks that were stored.
	Volumes []CheckpointVolume `json:"volumes"`
}

// CheckpointVolume lists the stored chunks of one volume's map.
type CheckpointVolume struct {
	ID     VolumeID `json:"id"`
	Chunks []uint32 `json:"chunks"`
}

// Key prefixes (doc.go, "Key schema").
const (
	keyNode      = "node"
	keyGC        = "gc"
	keyHead      = "ckpt"
	prefixDrive  = "drive/"
	prefixVolume = "vol/"
	prefixSeg    = "seg/"
	prefixChunk  = "ckpt/"
)

func keyU32(prefix string, v uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte(prefix), v)
}

func keyChunk(gen uint64, vol VolumeID, chunk uint32) []byte {
	k := binary.BigEndian.AppendUint64([]byte(prefixChunk), gen)
	k = binary.BigEndian.AppendUint32(k, uint32(vol))
	return binary.BigEndian.AppendUint32(k, chunk)
}

// parseChunkKey splits a checkpoint chunk key; ok is false for any other key.
func parseChunkKey(k []byte) (gen uint64, vol VolumeID, chunk uint32, ok bool) {
	if len(k) != len(prefixChunk)+16 || string(k[:len(prefixChunk)]) != prefixChunk {
		return 0, 0, 0, false
	}
	k = k[len(prefixChunk):]
	return binary.BigEndian.Uint64(k), VolumeID(binary.BigEndian.Uint32(k[8:])),
		binary.BigEndian.Uint32(k[12:]), true
}
