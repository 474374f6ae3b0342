package metrics

import (
	"testing"

	"basalt/target/tcp"
)

func TestTransportLimitMetrics(t *testing.T) {
	r := New(Sources{Transport: func() tcp.Stats {
		return tcp.Stats{Connections: 7, Accepted: 9, RejectedNodeLimit: 2, RejectedHostLimit: 3,
			ICReqTimeouts: 4, ConnectTimeouts: 5, H2CDataTimeouts: 6, WriteBytes: 1 << 20, ReadBytes: 4096,
			CachedBytes: 8192, ReadBufferBytes: 16384, WriteWaits: 11, ReadWaits: 12, WritesWaiting: 13}
	}}, nil)
	mustContain(t, scrape(t, r),
		"basalt_nvme_tcp_connections 7",
		"basalt_nvme_tcp_connections_accepted_total 9",
		`basalt_nvme_tcp_connections_rejected_total{reason="node_limit"} 2`,
		`basalt_nvme_tcp_connections_rejected_total{reason="host_limit"} 3`,
		`basalt_nvme_tcp_timeouts_total{phase="icreq"} 4`,
		`basalt_nvme_tcp_timeouts_total{phase="connect"} 5`,
		`basalt_nvme_tcp_timeouts_total{phase="h2c_data"} 6`,
		`basalt_nvme_tcp_buffer_bytes{kind="write"} 1.048576e+06`,
		`basalt_nvme_tcp_buffer_bytes{kind="read"} 4096`,
		`basalt_nvme_tcp_buffer_bytes{kind="cached"} 8192`,
		`basalt_nvme_tcp_buffer_bytes{kind="socket"} 16384`,
		`basalt_nvme_tcp_buffer_waits_total{kind="write"} 11`,
		`basalt_nvme_tcp_buffer_waits_total{kind="read"} 12`,
		"basalt_nvme_tcp_writes_waiting 13",
	)
}
