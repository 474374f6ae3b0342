package metrics

import (
	"strings"
	"testing"

	"basalt/pkg/cluster"
)

func TestCompressionMetrics(t *testing.T) {
	r := New(Sources{
		Store: func() StoreSample {
			return StoreSample{CompressionLogicalBytes: 8 << 20, CompressionStoredBytes: 2 << 20}
		},
		Cluster: func() cluster.LocalStatus {
			return cluster.LocalStatus{Volumes: []cluster.VolumeStatus{
				{Name: "db", ANAState: "optimized", Compression: &cluster.CompressionStatus{Algorithm: "zstd",
					LogicalBytes: 4096, StoredBytes: 1024, Ratio: 4}},
				{Name: "raw", ANAState: "optimized"},
			}}
		},
	}, nil)
	text := scrape(t, r)
	mustContain(t, text,
		"# TYPE basalt_store_compression_logical_bytes_total counter",
		"basalt_store_compression_logical_bytes_total 8.388608e+06",
		"basalt_store_compression_stored_bytes_total 2.097152e+06",
		`basalt_volume_compression_logical_bytes_total{algorithm="zstd",volume="db"} 4096`,
		`basalt_volume_compression_stored_bytes_total{algorithm="zstd",volume="db"} 1024`,
	)
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "compression") && strings.Contains(line, `volume="raw"`) {
			t.Fatalf("a volume without compression has compression metrics: %s", line)
		}
	}
}
