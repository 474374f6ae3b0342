package metrics

import (
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/qos"
	"basalt/pkg/volume"
)

func TestQoSMetrics(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := New(Sources{}, clk)
	var c volume.Counters
	th := qos.NewThrottle(clk, c.QoS(), 0)
	th.Set(qos.Limits{WriteIOPS: qos.Limit{Rate: 4, Burst: 1}}) // 250 ms apart
	for range 3 {
		th.Reserve(qos.Write, 4096) // waits 0, 250 ms, 500 ms
	}
	th.Set(qos.Limits{WriteIOPS: qos.Limit{Rate: 1, Burst: 1}})
	th.Reserve(qos.Write, 0) // owes 4 s: goes at the bound, an overrun
	r.AddVolume("db1", &c)
	mustContain(t, scrape(t, r),
		`basalt_volume_qos_throttled_commands_total{direction="write",volume="db1"} 3`,
		`basalt_volume_qos_throttled_seconds_total{direction="write",volume="db1"} 1.75`,
		`basalt_volume_qos_overrun_commands_total{direction="write",volume="db1"} 1`,
		`basalt_volume_qos_throttled_commands_total{direction="read",volume="db1"} 0`,
	)
}
