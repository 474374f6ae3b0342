package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/cluster"
	"basalt/pkg/invariant"
	"basalt/pkg/volume"
	"basalt/target"
)

func scrape(t *testing.T, r *Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func mustContain(t *testing.T, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("metrics lack %s", w)
		}
	}
}

// failing fails every call.
type failing struct{ backend.Backend }

func (failing) WriteAt(context.Context, []byte, int64, backend.WriteFlags) error {
	return backend.ErrInaccessible
}

func TestVolumeMetrics(t *testing.T) {
	r := New(Sources{}, nil)
	mem, err := backend.NewMemory(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	v := r.TrackVolume("v1", mem)
	ctx := context.Background()
	buf := make([]byte, 8192)
	for range 3 {
		if err := v.WriteAt(ctx, buf, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.ReadAt(ctx, buf[:4096], 4096); err != nil {
		t.Fatal(err)
	}
	_ = v.Flush(ctx)
	_ = v.Trim(ctx, 0, 4096)
	_ = v.WriteZeroes(ctx, 0, 4096)
	f := r.TrackVolume("v2", failing{mem})
	if err := f.WriteAt(ctx, buf, 0, 0); !errors.Is(err, backend.ErrInaccessible) {
		t.Fatalf("error not passed through: %v", err)
	}
	text := scrape(t, r)
	mustContain(t, text,
		`basalt_volume_ops_total{op="write",volume="v1"} 3`,
		`basalt_volume_bytes_total{op="write",volume="v1"} 24576`,
		`basalt_volume_bytes_total{op="read",volume="v1"} 4096`,
		`basalt_volume_ops_total{op="trim",volume="v1"} 1`,
		`basalt_volume_ops_total{op="write_zeroes",volume="v1"} 1`,
		`basalt_volume_ops_total{op="flush",volume="v1"} 1`,
		`basalt_volume_latency_seconds_count{op="write",volume="v1"} 3`,
		`basalt_volume_errors_total{op="write",volume="v2"} 1`,
		`go_goroutines`,
	)
	r.ForgetVolume("v1")
	if text := scrape(t, r); strings.Contains(text, `volume="v1"`) {
		t.Error("a forgotten volume still has metrics")
	}
}

func TestSampledSources(t *testing.T) {
	r := New(Sources{
		Cluster: func() cluster.LocalStatus {
			return cluster.LocalStatus{
				Metadata: cluster.MetadataStatus{Raft: cluster.GroupStatus{Role: "leader", Term: 3, Commit: 9, Applied: 9}},
				Volumes: []cluster.VolumeStatus{
					{Name: "a", ID: 2, ANAState: "optimized", Size: 4096, Raft: cluster.GroupStatus{Role: "leader", CommitLatency: 0.001,
						CatchingUp: map[cluster.NodeID]cluster.CatchUp{4: {Behind: 1200, SnapshotSent: 512, SnapshotTotal: 2048}}}},
					{Name: "b", ID: 3, Error: "broken"},
					{Name: "c", ID: 4, Error: "failed: apply: drive failed", Failed: "apply: drive failed",
						Raft: cluster.GroupStatus{Failed: true, Err: "apply: drive failed"}},
				},
				Replication: &cluster.ReplicationStatus{Rejected: map[string]uint64{"member": 3, "frame": 0}},
			}
		},
		Store: func() StoreSample {
			return StoreSample{CapacityBytes: 1 << 30, BufferSize: 64 << 20, BufferUsed: 1 << 20, BufferMode: "msync",
				DestageRate: 250, GCRuns: 2, FreeSegments: 7,
				Drives: []DriveSample{{Index: 0, State: "healthy"}, {Index: 1, State: "failed", Errors: 5}}}
		},
		Target: func() target.Stats { return target.Stats{Controllers: 2, Commands: 10} },
	}, nil)
	mustContain(t, scrape(t, r),
		`basalt_raft_leader{group="1",volume=""} 1`,
		`basalt_raft_commit_index{group="1",volume=""} 9`,
		`basalt_raft_leader{group="2",volume="a"} 1`,
		`basalt_raft_commit_latency_seconds{group="2",volume="a"} 0.001`,
		`basalt_volume_ana_state{state="optimized",volume="a"} 1`,
		`basalt_volume_failed{volume="a"} 0`,
		`basalt_volume_catchup_behind_entries{member="4",volume="a"} 1200`,
		`basalt_volume_catchup_snapshot_bytes{kind="sent",member="4",volume="a"} 512`,
		`basalt_volume_catchup_snapshot_bytes{kind="total",member="4",volume="a"} 2048`,
		`basalt_volume_failed{volume="b"} 1`,
		`basalt_volume_failed{volume="c"} 1`,
		`basalt_raft_rejected_messages_total{reason="member"} 3`,
		`basalt_raft_rejected_messages_total{reason="frame"} 0`,
		`basalt_write_buffer_used_bytes{mode="msync"} 1.048576e+06`,
		`basalt_store_destage_rate_blocks 250`,
		`basalt_store_gc_runs_total 2`,
		`basalt_store_segments{state="free"} 7`,
		`basalt_drive_up{drive="1",state="failed"} 0`,
		`basalt_drive_errors_total{drive="1"} 5`,
		`basalt_nvme_controllers 2`,
	)
}

func TestStoreDiscardAndScrubMetrics(t *testing.T) {
	last := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // unix 1767225600
	sample := StoreSample{DiscardedBytes: 3 << 20, DiscardErrors: 2, Scrub: &ScrubSample{
		Enabled: true, InProgress: true, Fraction: 0.25, Stripes: 120, Repaired: 4, Unrecoverable: 1, Passes: 3,
		LastCompleted: last,
	}}
	r := New(Sources{Store: func() StoreSample { return sample }}, nil)
	text := scrape(t, r)
	mustContain(t, text,
		"# TYPE basalt_store_discarded_bytes_total counter",
		"basalt_store_discarded_bytes_total 3.145728e+06",
		"basalt_store_discard_errors_total 2",
		"basalt_scrub_enabled 1",
		"basalt_scrub_in_progress 1",
		"basalt_scrub_fraction_done 0.25",
		"# TYPE basalt_scrub_stripes_total counter",
		"basalt_scrub_stripes_total 120",
		"basalt_scrub_repaired_blocks_total 4",
		"basalt_scrub_unrecoverable_total 1",
		"basalt_scrub_passes_total 3",
		"# TYPE basalt_scrub_last_completed_timestamp_seconds gauge",
		"basalt_scrub_last_completed_timestamp_seconds 1.7672256e+09",
		"basalt_scrub_next_due_timestamp_seconds 0",
	)

	// Never completed, idle, the next pass due: zero last, a next due time.
	sample.Scrub = &ScrubSample{Enabled: true, NextDue: last}
	mustContain(t, scrape(t, r),
		"basalt_scrub_in_progress 0",
		"basalt_scrub_fraction_done 0",
		"basalt_scrub_last_completed_timestamp_seconds 0",
		"basalt_scrub_next_due_timestamp_seconds 1.7672256e+09",
	)

	// A store without a scrub schedule exports no scrub metrics.
	sample.Scrub = nil
	text = scrape(t, r)
	if strings.Contains(text, "basalt_scrub_") {
		t.Error("scrub metrics without a scrub schedule")
	}
	mustContain(t, text, "basalt_store_discard_errors_total 2")
}

func BenchmarkVolumeWrite(b *testing.B) {
	r := New(Sources{}, nil)
	mem, _ := backend.NewMemory(1<<20, 4096)
	v := r.TrackVolume("bench", mem)
	buf := make([]byte, 4096)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(4096)
	for b.Loop() {
		_ = v.WriteAt(ctx, buf, 0, 0)
	}
}

// Every registry exports the process's invariant violations (pkg/invariant).
func TestInvariantViolationsExported(t *testing.T) {
	r := New(Sources{}, nil)
	mustContain(t, scrape(t, r), "# TYPE basalt_invariant_violations_total counter",
		fmt.Sprintf("basalt_invariant_violations_total %d\n", invariant.Violations()))
}

type healthBackend struct{ backend.Backend }

func (healthBackend) Health() (backend.Health, bool) { return backend.Health{Drives: 4}, true }

// A counted backend forwards the health of what it counts.
func TestVolumeForwardsHealth(t *testing.T) {
	r := New(Sources{}, nil)
	mem, err := backend.NewMemory(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := backend.HealthOf(r.TrackVolume("a", mem)); ok {
		t.Fatal("health reported over a backend without any")
	}
	if h, ok := backend.HealthOf(r.TrackVolume("b", healthBackend{mem})); !ok || h.Drives != 4 {
		t.Fatalf("HealthOf = %+v, %v", h, ok)
	}
}

// slowBackend takes d of the manual clock for every write.
type slowBackend struct {
	backend.Backend
	clk *clock.Manual
	d   time.Duration
}

func (s slowBackend) WriteAt(ctx context.Context, p []byte, off int64, f backend.WriteFlags) error {
	s.clk.Advance(s.d)
	return s.Backend.WriteAt(ctx, p, off, f)
}

// The latency histogram puts each command in the bucket its latency
// belongs to (le: at most the bound), with the sum in seconds, and
// exports every op of a volume, counted or not.
func TestVolumeLatencyBuckets(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := New(Sources{}, clk)
	mem, err := backend.NewMemory(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	v := r.TrackVolume("v", slowBackend{Backend: mem, clk: clk, d: 40 * time.Microsecond})
	buf := make([]byte, 4096)
	for range 2 {
		if err := v.WriteAt(context.Background(), buf, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	mustContain(t, scrape(t, r),
		`basalt_volume_latency_seconds_bucket{op="write",volume="v",le="2.5e-05"} 0`,
		`basalt_volume_latency_seconds_bucket{op="write",volume="v",le="5e-05"} 2`,
		`basalt_volume_latency_seconds_bucket{op="write",volume="v",le="3.2768"} 2`,
		`basalt_volume_latency_seconds_bucket{op="write",volume="v",le="+Inf"} 2`,
		`basalt_volume_latency_seconds_sum{op="write",volume="v"} 8e-05`,
		`basalt_volume_latency_seconds_count{op="write",volume="v"} 2`,
		`basalt_volume_ops_total{op="read",volume="v"} 0`,
		`basalt_volume_latency_seconds_count{op="trim",volume="v"} 0`,
	)
}

// A replicated volume counts its own I/O: TrackVolume exports its counters
// and serves it as it is, with no wrapper.
func TestTrackVolumeExportsAVolumesOwnCounters(t *testing.T) {
	r := New(Sources{}, nil)
	mem, err := backend.NewMemory(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	c := volume.Instrument(mem, clock.Real()) // stands in for a volume.Volume: it counts itself
	if got := r.TrackVolume("own", c); got != backend.Backend(c) {
		t.Fatalf("TrackVolume wrapped a backend that counts itself: %T", got)
	}
	if err := c.WriteAt(context.Background(), make([]byte, 8192), 0, 0); err != nil {
		t.Fatal(err)
	}
	mustContain(t, scrape(t, r), `basalt_volume_bytes_total{op="write",volume="own"} 8192`)
}
