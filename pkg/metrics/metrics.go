// Package metrics exports a node's Prometheus metrics; it is the only
// package that imports the Prometheus client.
//
// Per volume (labels volume, op = read|write|flush|trim|write_zeroes),
// counted by the host-facing replicated backend itself (pkg/volume's
// Counters, read at scrape time; TrackVolume), so a write's latency is its
// Raft commit latency (persisted on a majority and applied):
//
//	basalt_volume_ops_total            counter    commands completed
//	basalt_volume_errors_total         counter    commands failed (ANA "inaccessible" included)
//	basalt_volume_bytes_total          counter    bytes read or written
//	basalt_volume_latency_seconds      histogram  command latency
//
// Sampled at scrape time from the node's sources (see Sources):
//
//	basalt_raft_leader{group,volume}         1 on the node leading the group
//	basalt_raft_term / _commit_index / _applied_index {group,volume}
//	basalt_volume_ana_state{volume,state}    1 for this port's ANA state
//	basalt_volume_controllers{volume}        host controllers connected here
//	basalt_volume_failed{volume}             1 if the volume cannot be served here
//	                                         (it failed to open, or its group failed)
//	basalt_volume_catchup_behind_entries{volume,member}  on the leader, a member
//	                                         being brought up to date: entries behind
//	basalt_volume_catchup_snapshot_bytes{volume,member,kind=sent|total}  its snapshot
//	basalt_raft_rejected_messages_total{reason}  frames and messages from peers
//	                                         refused (replication.RejectReason)
//	basalt_store_*                           store capacity, use, segments, GC,
//	                                         destage rate, write amplification, repairs,
//	                                         discarded bytes and discard errors
//	basalt_scrub_*                           scrub schedule: enabled, in progress,
//	                                         fraction done, stripes / repaired blocks /
//	                                         unrecoverable rows (totals since start),
//	                                         passes, last completed and next due (unix s)
//	basalt_write_buffer_{size,used}_bytes    write-buffer fill; _records
//	basalt_drive_{up,reads_total,writes_total,errors_total}{drive,state}
//	basalt_nvme_*                            controllers, queues, commands, errors
//	basalt_nvme_tcp_*                        connections (open, accepted, rejected
//	                                         by reason), timeouts by phase, data
//	                                         buffers held and waits (transport.go)
//	basalt_invariant_violations_total        broken internal invariants contained
//	                                         (pkg/invariant; anything but 0 is a bug)
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"basalt/pkg/clock"
	"basalt/pkg/invariant"
)

// Registry holds a node's metrics.
type Registry struct {
	reg   *prometheus.Registry
	clock clock.Clock
	vol   *volumes
}

// New returns a registry with the Go runtime and process collectors and
// the per-volume metrics, sampling sources at every scrape.
func New(src Sources, clk clock.Clock) *Registry {
	if clk == nil {
		clk = clock.Real()
	}
	r := &Registry{reg: prometheus.NewRegistry(), clock: clk, vol: newVolumes()}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		r.vol, &sampler{src: src},
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "basalt_invariant_violations_total",
			Help: "Broken internal invariants found and contained to one command, connection or group (a bug: report it)."},
			func() float64 { return float64(invariant.Violations()) }))
	return r
}

// Handler serves the metrics in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Gatherer returns the underlying gatherer (tests).
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }
