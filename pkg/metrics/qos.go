package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"basalt/pkg/qos"
	"basalt/pkg/volume"
)

// qosMetrics export what each volume's limits held back on this node (the
// volume's leader is the only node that throttles), per direction, from
// volume.Counters.QoS at scrape time.
type qosMetrics struct {
	seconds, commands, overruns *prometheus.Desc
}

func newQoSMetrics() qosMetrics {
	labels := []string{"volume", "direction"}
	return qosMetrics{
		seconds: prometheus.NewDesc("basalt_volume_qos_throttled_seconds_total",
			"Time commands on the volume waited for its I/O limits, as scheduled when each arrived.", labels, nil),
		commands: prometheus.NewDesc("basalt_volume_qos_throttled_commands_total",
			"Commands on the volume that waited for its I/O limits.", labels, nil),
		overruns: prometheus.NewDesc("basalt_volume_qos_overrun_commands_total",
			"Commands let through after the longest wait (qos.MaxWait) although the volume's limits would have held them longer.",
			labels, nil),
	}
}

func (m *qosMetrics) describe(ch chan<- *prometheus.Desc) {
	ch <- m.seconds
	ch <- m.commands
	ch <- m.overruns
}

// collect sends one volume's counts.
func (m *qosMetrics) collect(ch chan<- prometheus.Metric, name string, c *volume.Counters) {
	for d := range qos.NumDirs {
		s := c.QoS().Stats(d)
		ch <- prometheus.MustNewConstMetric(m.seconds, prometheus.CounterValue, s.Waited.Seconds(), name, d.String())
		ch <- prometheus.MustNewConstMetric(m.commands, prometheus.CounterValue, float64(s.Throttled), name, d.String())
		ch <- prometheus.MustNewConstMetric(m.overruns, prometheus.CounterValue, float64(s.Overruns), name, d.String())
	}
}
