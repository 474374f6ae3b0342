package metrics

import (
	"strconv"
	"time"
)

// RebuildSample is the store's rebuild progress (store.RebuildStatus): the
// pass running, or the last one. Bytes count its drive I/O.
type RebuildSample struct {
	Running                     bool
	SegmentsDone, SegmentsTotal int
	BytesDone, BytesTotal       int64
	BytesPerSecond              float64
	ETA                         time.Duration
	RateLimit                   int64 // bytes per second; 0: none
	Passes                      uint64
}

// driveStates are the states a drive slot can be in; basalt_drive_state
// has one series per state, 1 for the slot's own.
var driveStates = []string{"healthy", "failed", "rebuilding", "evacuated"}

// drivesAndRebuild emits each drive's state and the rebuild's progress.
func (e emitter) drivesAndRebuild(s StoreSample) {
	for _, d := range s.Drives {
		id := strconv.Itoa(d.Index)
		for _, st := range driveStates {
			e.gauge("basalt_drive_state", "1 for the state the drive slot is in (healthy, failed, rebuilding, "+
				"evacuated), 0 for the others.", b2f(d.State == st), "drive", id, "state", st)
		}
	}
	r := s.Rebuild
	if r == nil {
		return
	}
	e.gauge("basalt_rebuild_in_progress", "1 while a rebuild pass re-protects the data of lost drives.", b2f(r.Running))
	e.gauge("basalt_rebuild_segments_done", "Segments the rebuild pass (running, or the last) has finished.",
		float64(r.SegmentsDone))
	e.gauge("basalt_rebuild_segments_total", "Segments the rebuild pass (running, or the last) has to do.",
		float64(r.SegmentsTotal))
	e.gauge("basalt_rebuild_done_bytes", "Drive I/O the rebuild pass has done (reads and writes).", float64(r.BytesDone))
	e.gauge("basalt_rebuild_total_bytes", "Drive I/O the rebuild pass is estimated to need.", float64(r.BytesTotal))
	e.gauge("basalt_rebuild_rate_bytes_per_second", "Average drive I/O rate of the rebuild pass.", r.BytesPerSecond)
	e.gauge("basalt_rebuild_eta_seconds", "Time the running rebuild pass needs yet at its rate (0: none running).",
		r.ETA.Seconds())
	e.gauge("basalt_rebuild_rate_limit_bytes_per_second", "The rebuild's bound on its drive I/O (store.rebuild_rate).",
		float64(r.RateLimit))
	e.counter("basalt_rebuild_passes_total", "Rebuild passes completed since the node started.", float64(r.Passes))
}
