package metrics

import (
	"testing"
	"time"
)

func TestDriveStateAndRebuildMetrics(t *testing.T) {
	sample := StoreSample{
		Drives: []DriveSample{{Index: 0, State: "healthy"}, {Index: 1, State: "rebuilding"}},
		Rebuild: &RebuildSample{Running: true, SegmentsDone: 3, SegmentsTotal: 12, BytesDone: 3 << 20,
			BytesTotal: 12 << 20, BytesPerSecond: 1 << 20, ETA: 9 * time.Second, RateLimit: 200 << 20, Passes: 2},
	}
	r := New(Sources{Store: func() StoreSample { return sample }}, nil)
	mustContain(t, scrape(t, r),
		`basalt_drive_state{drive="0",state="healthy"} 1`,
		`basalt_drive_state{drive="1",state="healthy"} 0`,
		`basalt_drive_state{drive="1",state="rebuilding"} 1`,
		`basalt_drive_state{drive="1",state="evacuated"} 0`,
		`basalt_rebuild_in_progress 1`,
		`basalt_rebuild_segments_done 3`,
		`basalt_rebuild_segments_total 12`,
		`basalt_rebuild_done_bytes 3.145728e+06`,
		`basalt_rebuild_total_bytes 1.2582912e+07`,
		`basalt_rebuild_rate_bytes_per_second 1.048576e+06`,
		`basalt_rebuild_eta_seconds 9`,
		`basalt_rebuild_rate_limit_bytes_per_second 2.097152e+08`,
		`basalt_rebuild_passes_total 2`,
	)
}
