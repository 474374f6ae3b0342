package cluster

import (
	"fmt"

	"basalt/pkg/compress"
)

// ValidateCompression checks a volume's compression setting: "lz4",
// "zstd", "none" or empty (none).
func ValidateCompression(s string) error {
	if _, err := compress.ParseAlgorithm(s); err != nil {
		return fmt.Errorf("%w: compression: %w", ErrInvalid, err)
	}
	return nil
}

// ReplicaOptions are the settings a replica is created with.
type ReplicaOptions struct {
	// Compression is the volume's compression ("lz4", "zstd"; empty:
	// none).
	Compression string
}

// ReplicasWithOptions is implemented by Replicas that create replicas with
// a volume's settings (pkg/node: the store); others get plain Open.
type ReplicasWithOptions interface {
	OpenWith(name string, size int64, o ReplicaOptions) (Replica, error)
}

// openReplica opens v's local replica, with its settings where the
// Replicas take them.
func openReplica(r Replicas, v *Volume) (Replica, error) {
	size := max(v.Size, v.PendingSize)
	if ro, ok := r.(ReplicasWithOptions); ok {
		return ro.OpenWith(v.LocalName(), size, ReplicaOptions{Compression: v.Compression})
	}
	return r.Open(v.LocalName(), size)
}

// CompressionReporter is implemented by replicas that compress: the
// volume's bytes packed since the node started and what they took.
type CompressionReporter interface {
	CompressionStats() (logical, stored int64)
}

// CompressionStatus is a replica's compression on this node.
type CompressionStatus struct {
	Algorithm string `json:"algorithm"`
	// LogicalBytes are the volume's blocks written to this node's drives
	// since it started, StoredBytes what they took there; Ratio is
	// LogicalBytes/StoredBytes (1 before anything was written).
	LogicalBytes int64   `json:"logical_bytes"`
	StoredBytes  int64   `json:"stored_bytes"`
	Ratio        float64 `json:"ratio"`
}

// compressionStatus reports r's compression if v compresses and r tells.
func compressionStatus(v *Volume, r Replica) *CompressionStatus {
	cr, ok := r.(CompressionReporter)
	if !ok || v.Compression == "" {
		return nil
	}
	logical, stored := cr.CompressionStats()
	ratio := 1.0
	if stored > 0 {
		ratio = float64(logical) / float64(stored)
	}
	return &CompressionStatus{Algorithm: v.Compression, LogicalBytes: logical, StoredBytes: stored, Ratio: ratio}
}
