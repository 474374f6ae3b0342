package metrics

import "basalt/pkg/cluster"

// storeCompression exports what the store's compression achieved: bytes
// of host blocks packed into stripes since the node started and the bytes
// they took (their ratio is the node's compression ratio).
func (e emitter) storeCompression(s StoreSample) {
	e.counter("basalt_store_compression_logical_bytes_total",
		"Bytes of host blocks written to the drives since the node started (4096 per block).",
		float64(s.CompressionLogicalBytes))
	e.counter("basalt_store_compression_stored_bytes_total",
		"Bytes of the data slots those blocks took (4096 per slot; a packed slot holds several compressed blocks).",
		float64(s.CompressionStoredBytes))
}

// compression exports a compressed volume's bytes on this node.
func (e emitter) compression(v cluster.VolumeStatus) {
	c := v.Compression
	if c == nil {
		return
	}
	e.counter("basalt_volume_compression_logical_bytes_total",
		"Bytes of the volume's blocks written to this node's drives since it started.", float64(c.LogicalBytes),
		"volume", v.Name, "algorithm", c.Algorithm)
	e.counter("basalt_volume_compression_stored_bytes_total",
		"Bytes of the data slots those blocks took on this node's drives.", float64(c.StoredBytes),
		"volume", v.Name, "algorithm", c.Algorithm)
}
