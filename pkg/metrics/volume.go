package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"basalt/pkg/backend"
	"basalt/pkg/volume"
)

// volumes exports the I/O counters of the volumes this node serves
// (pkg/volume keeps them, all atomics, on the I/O path), reading them at
// every scrape: nothing here runs per I/O.
type volumes struct {
	mu     sync.Mutex
	byName map[string]*volume.Counters

	ops, errs, bytes, latency, peerRepairs *prometheus.Desc
	bounds                                 [volume.LatencyBuckets]float64 // seconds
	qos                                    qosMetrics                     // qos.go
}

func newVolumes() *volumes {
	labels := []string{"volume", "op"}
	v := &volumes{byName: map[string]*volume.Counters{},
		ops: prometheus.NewDesc("basalt_volume_ops_total",
			"Commands completed on the volume through this node.", labels, nil),
		errs: prometheus.NewDesc("basalt_volume_errors_total",
			"Commands that failed on the volume through this node.", labels, nil),
		bytes: prometheus.NewDesc("basalt_volume_bytes_total",
			"Bytes read or written on the volume through this node.", labels, nil),
		latency: prometheus.NewDesc("basalt_volume_latency_seconds",
			"Command latency on the volume; for writes on the leader, the Raft commit latency.", labels, nil),
		peerRepairs: prometheus.NewDesc("basalt_volume_peer_repairs_total",
			"Reads this node served from another replica because its own could not read the blocks.",
			[]string{"volume"}, nil),
	}
	for i := range v.bounds {
		v.bounds[i] = volume.BucketBound(i).Seconds()
	}
	v.qos = newQoSMetrics()
	return v
}

// TrackVolume exports the I/O counts of b, the host-facing backend of
// volume name, and returns the backend to serve: b itself when it counts
// its I/O (a volume.Volume), else b counting it (volume.Instrument).
// ForgetVolume stops the export.
func (r *Registry) TrackVolume(name string, b backend.Backend) backend.Backend {
	ib := volume.Instrument(b, r.clock)
	r.AddVolume(name, ib.Counters())
	return ib
}

// AddVolume exports c under the volume label name, replacing the counters
// exported under it before.
func (r *Registry) AddVolume(name string, c *volume.Counters) {
	r.vol.mu.Lock()
	defer r.vol.mu.Unlock()
	r.vol.byName[name] = c
}

// ForgetVolume drops the metrics of a volume that left this node.
func (r *Registry) ForgetVolume(name string) {
	r.vol.mu.Lock()
	defer r.vol.mu.Unlock()
	delete(r.vol.byName, name)
}

// Describe implements prometheus.Collector.
func (v *volumes) Describe(ch chan<- *prometheus.Desc) {
	ch <- v.ops
	ch <- v.errs
	ch <- v.bytes
	ch <- v.latency
	ch <- v.peerRepairs
	v.qos.describe(ch)
}

// Collect implements prometheus.Collector.
func (v *volumes) Collect(ch chan<- prometheus.Metric) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for name, c := range v.byName {
		ch <- prometheus.MustNewConstMetric(v.peerRepairs, prometheus.CounterValue, float64(c.PeerRepairs()), name)
		v.qos.collect(ch, name, c)
		for op := range volume.NumOps {
			s := c.Stats(op)
			labels := []string{name, op.String()}
			ch <- prometheus.MustNewConstMetric(v.ops, prometheus.CounterValue, float64(s.Ops), labels...)
			ch <- prometheus.MustNewConstMetric(v.errs, prometheus.CounterValue, float64(s.Errors), labels...)
			ch <- prometheus.MustNewConstMetric(v.bytes, prometheus.CounterValue, float64(s.Bytes), labels...)
			ch <- v.histogram(&s, labels)
		}
	}
}

// histogram converts an op's latency buckets (not cumulative, the last
// beyond every bound) to Prometheus's (cumulative, +Inf implied by the
// count).
func (v *volumes) histogram(s *volume.OpStats, labels []string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(v.bounds))
	var n uint64
	for i, le := range v.bounds {
		n += s.Buckets[i]
		buckets[le] = n
	}
	return prometheus.MustNewConstHistogram(v.latency, n+s.Buckets[volume.LatencyBuckets], s.LatencySum.Seconds(),
		buckets, labels...)
}
