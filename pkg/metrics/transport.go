package metrics

import "basalt/target/tcp"

// transport emits the NVMe/TCP transport's limits counters (tcp.Stats):
//
//	basalt_nvme_tcp_connections                        gauge    connections open
//	basalt_nvme_tcp_connections_accepted_total         counter  connections admitted
//	basalt_nvme_tcp_connections_rejected_total{reason} counter  closed at accept: node_limit, host_limit
//	basalt_nvme_tcp_timeouts_total{phase}              counter  closed by a timeout: icreq, connect, h2c_data
//	basalt_nvme_tcp_buffer_bytes{kind}                 gauge    write, read (data buffers held),
//	                                                            cached (free, kept for reuse),
//	                                                            socket (connections' read buffers)
//	basalt_nvme_tcp_buffer_waits_total{kind}           counter  commands that waited: write (for
//	                                                            their R2T), read (for a buffer)
//	basalt_nvme_tcp_writes_waiting                     gauge    writes waiting for their R2T now
func (e emitter) transport(s tcp.Stats) {
	e.gauge("basalt_nvme_tcp_connections", "NVMe/TCP connections open.", float64(s.Connections))
	e.counter("basalt_nvme_tcp_connections_accepted_total", "NVMe/TCP connections admitted.", float64(s.Accepted))
	const rejected = "NVMe/TCP connections closed at accept by a connection limit."
	e.counter("basalt_nvme_tcp_connections_rejected_total", rejected, float64(s.RejectedNodeLimit), "reason", "node_limit")
	e.counter("basalt_nvme_tcp_connections_rejected_total", rejected, float64(s.RejectedHostLimit), "reason", "host_limit")
	const timeouts = "NVMe/TCP connections closed by a timeout."
	e.counter("basalt_nvme_tcp_timeouts_total", timeouts, float64(s.ICReqTimeouts), "phase", "icreq")
	e.counter("basalt_nvme_tcp_timeouts_total", timeouts, float64(s.ConnectTimeouts), "phase", "connect")
	e.counter("basalt_nvme_tcp_timeouts_total", timeouts, float64(s.H2CDataTimeouts), "phase", "h2c_data")
	const bufs = "NVMe/TCP transport buffers held, by kind."
	e.gauge("basalt_nvme_tcp_buffer_bytes", bufs, float64(s.WriteBytes), "kind", "write")
	e.gauge("basalt_nvme_tcp_buffer_bytes", bufs, float64(s.ReadBytes), "kind", "read")
	e.gauge("basalt_nvme_tcp_buffer_bytes", bufs, float64(s.CachedBytes), "kind", "cached")
	e.gauge("basalt_nvme_tcp_buffer_bytes", bufs, float64(s.ReadBufferBytes), "kind", "socket")
	const waits = "NVMe/TCP commands that waited for a data buffer, by kind."
	e.counter("basalt_nvme_tcp_buffer_waits_total", waits, float64(s.WriteWaits), "kind", "write")
	e.counter("basalt_nvme_tcp_buffer_waits_total", waits, float64(s.ReadWaits), "kind", "read")
	e.gauge("basalt_nvme_tcp_writes_waiting", "NVMe/TCP writes waiting for write budget before their R2T.",
		float64(s.WritesWaiting))
}
