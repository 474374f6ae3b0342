package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"basalt/pkg/cluster"
	"basalt/target"
	"basalt/target/tcp"
)

// Sources are sampled at every scrape; nil ones are skipped.
type Sources struct {
	Cluster func() cluster.LocalStatus
	Store   func() StoreSample
	Target  func() target.Stats
	// Transport is the NVMe/TCP transport's Budget.Stats (transport.go).
	Transport func() tcp.Stats
}

// StoreSample is what the metrics show of the log-structured store
// (pkg/node fills it from store.Stats; the fields mean what they mean
// there).
type StoreSample struct {
	CapacityBytes, UsedBytes, BufferedBytes int64
	Volumes                                 int
	FreeSegments, OpenSegments              int
	SealedSegments                          int
	BufferMode                              string
	BufferSize, BufferUsed                  int64
	BufferRecords                           int
	HostBlocks, DestagedBlocks              uint64
	RelocatedBlocks, PaddingBlocks          uint64
	GCRuns                                  uint64
	WriteAmplification, DestageRate         float64
	Stripes, Checkpoints                    uint64
	DegradedReads, Repairs, Unrecoverable   uint64
	DiscardedBytes, DiscardErrors           uint64
	// CompressionLogicalBytes are the host blocks packed into stripes
	// since the node started, CompressionStoredBytes what they took.
	CompressionLogicalBytes, CompressionStoredBytes int64
	Failed                                          string
	Drives                                          []DriveSample
	// Scrub is the store's scrub schedule; nil: none.
	Scrub *ScrubSample
	// Rebuild is the store's rebuild progress (rebuild.go); nil: none.
	Rebuild *RebuildSample
}

// ScrubSample is the store's scrub schedule (store.ScrubStatus). The
// counts are totals since the node started; the times are zero when
// there is none (never completed; no pass due, one running or the
// schedule off).
type ScrubSample struct {
	Enabled, InProgress              bool
	Fraction                         float64 // of the pass in progress
	Stripes, Repaired, Unrecoverable uint64
	Passes                           uint64
	LastCompleted, NextDue           time.Time
}

// DriveSample is one drive slot.
type DriveSample struct {
	Index                 int
	State                 string
	Reads, Writes, Errors uint64
}

// sampler is an unchecked collector: what it emits depends on the
// volumes and drives of the moment.
type sampler struct{ src Sources }

func (*sampler) Describe(chan<- *prometheus.Desc) {}

func (s *sampler) Collect(ch chan<- prometheus.Metric) {
	e := emitter{ch: ch}
	if s.src.Cluster != nil {
		e.cluster(s.src.Cluster())
	}
	if s.src.Store != nil {
		e.store(s.src.Store())
	}
	if s.src.Target != nil {
		e.target(s.src.Target())
	}
	if s.src.Transport != nil {
		e.transport(s.src.Transport())
	}
}

type emitter struct{ ch chan<- prometheus.Metric }

func (e emitter) emit(kind prometheus.ValueType, name, help string, v float64, kv ...string) {
	var keys, vals []string
	for i := 0; i+1 < len(kv); i += 2 {
		keys, vals = append(keys, kv[i]), append(vals, kv[i+1])
	}
	d := prometheus.NewDesc(name, help, keys, nil)
	e.ch <- prometheus.MustNewConstMetric(d, kind, v, vals...)
}

func (e emitter) gauge(name, help string, v float64, kv ...string) {
	e.emit(prometheus.GaugeValue, name, help, v, kv...)
}

func (e emitter) counter(name, help string, v float64, kv ...string) {
	e.emit(prometheus.CounterValue, name, help, v, kv...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (e emitter) raft(g cluster.GroupID, volume string, st cluster.GroupStatus) {
	kv := []string{"group", strconv.FormatUint(uint64(g), 10), "volume", volume}
	e.gauge("basalt_raft_leader", "1 if this node leads the Raft group.", b2f(st.Role == "leader"), kv...)
	e.gauge("basalt_raft_term", "Raft term of the group.", float64(st.Term), kv...)
	e.gauge("basalt_raft_commit_index", "Raft commit index of the group.", float64(st.Commit), kv...)
	e.gauge("basalt_raft_applied_index", "Raft applied index of the group on this node.", float64(st.Applied), kv...)
	e.gauge("basalt_raft_commit_latency_seconds", "Moving average of proposals made here, from Propose to applied.",
		st.CommitLatency, kv...)
}

func (e emitter) cluster(ls cluster.LocalStatus) {
	e.raft(cluster.MetadataGroup, "", ls.Metadata.Raft)
	if r := ls.Replication; r != nil {
		for reason, n := range r.Rejected {
			e.counter("basalt_raft_rejected_messages_total",
				"Frames and Raft messages from peers this node refused (and closed the connection of), by reason.",
				float64(n), "reason", reason)
		}
	}
	for _, v := range ls.Volumes {
		if v.Error != "" {
			e.gauge("basalt_volume_failed", "1 if the volume cannot be served here: it failed to open, or its "+
				"Raft group failed and was fenced (see the API for why).", 1, "volume", v.Name)
			continue
		}
		e.gauge("basalt_volume_failed", "1 if the volume cannot be served here: it failed to open, or its "+
			"Raft group failed and was fenced (see the API for why).", 0, "volume", v.Name)
		e.raft(v.ID, v.Name, v.Raft)
		e.gauge("basalt_volume_ana_state", "ANA state of the volume on this node's port.", 1, "volume", v.Name, "state", v.ANAState)
		e.gauge("basalt_volume_size_bytes", "Volume size hosts see.", float64(v.Size), "volume", v.Name)
		e.gauge("basalt_volume_controllers", "Host controllers connected to the volume on this node.", float64(v.Controllers), "volume", v.Name)
		e.catchUp(v.Name, v.Raft)
		e.compression(v)
	}
}

// catchUp reports, on a volume's leader, each member being brought up to
// date (a replica added, or one back after being away).
func (e emitter) catchUp(volume string, st cluster.GroupStatus) {
	for id, cu := range st.CatchingUp {
		member := strconv.FormatUint(uint64(id), 10)
		e.gauge("basalt_volume_catchup_behind_entries", "Entries a member being brought up to date lags the leader's "+
			"last index (reported by the leader).", float64(cu.Behind), "volume", volume, "member", member)
		e.gauge("basalt_volume_catchup_snapshot_bytes", "Bytes of the snapshot streaming to a member being brought "+
			"up to date: sent so far, and the total when known.", float64(cu.SnapshotSent),
			"volume", volume, "member", member, "kind", "sent")
		e.gauge("basalt_volume_catchup_snapshot_bytes", "Bytes of the snapshot streaming to a member being brought "+
			"up to date: sent so far, and the total when known.", float64(cu.SnapshotTotal),
			"volume", volume, "member", member, "kind", "total")
	}
}

func (e emitter) store(s StoreSample) {
	e.gauge("basalt_store_capacity_bytes", "Data the store accepts.", float64(s.CapacityBytes))
	e.gauge("basalt_store_used_bytes", "Data mapped on the drives.", float64(s.UsedBytes))
	e.gauge("basalt_store_buffered_bytes", "Block writes only in the write buffer.", float64(s.BufferedBytes))
	e.gauge("basalt_store_volumes", "Volumes (replicas) in the store.", float64(s.Volumes))
	for state, n := range map[string]int{"free": s.FreeSegments, "open": s.OpenSegments, "sealed": s.SealedSegments} {
		e.gauge("basalt_store_segments", "Segments by state.", float64(n), "state", state)
	}
	e.gauge("basalt_write_buffer_size_bytes", "Write-buffer size.", float64(s.BufferSize), "mode", s.BufferMode)
	e.gauge("basalt_write_buffer_used_bytes", "Write-buffer fill.", float64(s.BufferUsed), "mode", s.BufferMode)
	e.gauge("basalt_write_buffer_records", "Live write-buffer records.", float64(s.BufferRecords))
	e.counter("basalt_store_host_blocks_total", "Blocks written by hosts.", float64(s.HostBlocks))
	e.counter("basalt_store_destaged_blocks_total", "Blocks destaged to the drives.", float64(s.DestagedBlocks))
	e.counter("basalt_store_relocated_blocks_total", "Blocks moved by the garbage collector.", float64(s.RelocatedBlocks))
	e.counter("basalt_store_padding_blocks_total", "Padding blocks written to close partial stripes.", float64(s.PaddingBlocks))
	e.gauge("basalt_store_destage_rate_blocks", "Destage rate in blocks per second.", s.DestageRate)
	e.counter("basalt_store_gc_runs_total", "Garbage-collection runs.", float64(s.GCRuns))
	e.gauge("basalt_store_write_amplification", "(destaged + relocated) / destaged blocks.", s.WriteAmplification)
	e.counter("basalt_store_stripes_total", "Stripes written.", float64(s.Stripes))
	e.counter("basalt_store_checkpoints_total", "Map checkpoints taken.", float64(s.Checkpoints))
	e.counter("basalt_store_degraded_reads_total", "Reads reconstructed from parity.", float64(s.DegradedReads))
	e.counter("basalt_store_repairs_total", "Blocks repaired.", float64(s.Repairs))
	e.counter("basalt_store_unrecoverable_total", "Blocks that could not be recovered.", float64(s.Unrecoverable))
	e.gauge("basalt_store_failed", "1 if the store stopped destaging after an error.", b2f(s.Failed != ""))
	e.counter("basalt_store_discarded_bytes_total", "Drive bytes of freed segments discarded, summed over the drives.",
		float64(s.DiscardedBytes))
	e.counter("basalt_store_discard_errors_total", "Discards of freed segments that failed (the space stays allocated).",
		float64(s.DiscardErrors))
	e.storeCompression(s)
	if s.Scrub != nil {
		e.scrub(*s.Scrub)
	}
	e.drivesAndRebuild(s)
	for _, d := range s.Drives {
		id := strconv.Itoa(d.Index)
		e.gauge("basalt_drive_up", "1 if the drive is healthy; the state label says what it is.", b2f(d.State == "healthy"), "drive", id, "state", d.State)
		e.counter("basalt_drive_reads_total", "Drive reads.", float64(d.Reads), "drive", id)
		e.counter("basalt_drive_writes_total", "Drive writes.", float64(d.Writes), "drive", id)
		e.counter("basalt_drive_errors_total", "Drive errors.", float64(d.Errors), "drive", id)
	}
}

func (e emitter) scrub(s ScrubSample) {
	e.gauge("basalt_scrub_enabled", "1 if the store's scrub schedule is on (store.scrub_interval > 0).", b2f(s.Enabled))
	e.gauge("basalt_scrub_in_progress", "1 while a scrub pass runs.", b2f(s.InProgress))
	e.gauge("basalt_scrub_fraction_done", "Fraction of the running scrub pass done, by segments (0 when none runs).", s.Fraction)
	e.counter("basalt_scrub_stripes_total", "Stripes scrubbed since the node started.", float64(s.Stripes))
	e.counter("basalt_scrub_repaired_blocks_total", "Bad blocks the scrub rewrote from parity since the node started.",
		float64(s.Repaired))
	e.counter("basalt_scrub_unrecoverable_total", "Stripe rows (or summaries) the scrub found beyond repair since the node started.",
		float64(s.Unrecoverable))
	e.counter("basalt_scrub_passes_total", "Scrub passes completed since the node started.", float64(s.Passes))
	e.gauge("basalt_scrub_last_completed_timestamp_seconds", "Unix time the last scrub pass completed (0: never).",
		unixSeconds(s.LastCompleted))
	e.gauge("basalt_scrub_next_due_timestamp_seconds", "Unix time the next scrub pass starts (0: one runs, or the schedule is off).",
		unixSeconds(s.NextDue))
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

func (e emitter) target(s target.Stats) {
	e.gauge("basalt_nvme_subsystems", "NVMe subsystems exported.", float64(s.Subsystems))
	e.gauge("basalt_nvme_controllers", "Connected I/O controllers.", float64(s.Controllers))
	e.gauge("basalt_nvme_discovery_controllers", "Connected discovery controllers.", float64(s.DiscoveryControllers))
	e.gauge("basalt_nvme_io_queues", "I/O queues.", float64(s.IOQueues))
	e.counter("basalt_nvme_commands_total", "NVMe commands completed.", float64(s.Commands))
	e.counter("basalt_nvme_errors_total", "NVMe commands completed with an error status.", float64(s.Errors))
	e.counter("basalt_nvme_read_bytes_total", "Bytes read by hosts.", float64(s.BytesRead))
	e.counter("basalt_nvme_written_bytes_total", "Bytes written by hosts.", float64(s.BytesWritten))
	e.counter("basalt_nvme_ana_changes_total", "ANA log change count.", float64(s.ANAChangeCount))
}
