package store

import (
	"path/filepath"
	"testing"
	"time"

	"basalt/pkg/disk"
)

// TestSlowDiscardNeverHitsAReopenedSegment churns a store 70% full on the
// real writer goroutine while every discard takes 5 ms of the rig's clock,
// which a goroutine advances slowly: freed segments are wanted back while
// their discards still run. A segment reopened before its discard ended
// would lose the stripes written into it; every block must read back,
// before and after a restart.
func TestSlowDiscardNeverHitsAReopenedSegment(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.faults = true
	cfg.opts.Discard = DiscardAlways
	cfg.opts.GCPolicy = GCGreedy
	cfg.faultOpts.Rules = []disk.Rule{{Op: disk.OpDiscard, Fault: disk.FaultLatency, Latency: 5 * time.Millisecond}}
	r := newRig(t, cfg)
	n := int(r.s.Stats().CapacityBytes/BlockSize) * 7 / 10
	v, err := r.s.CreateVolume("a", int64(n)*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	// The clock keeps moving until the end: Close waits for the discards
	// in flight.
	stop, stopped := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-stopped }()
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
				r.clock.Advance(time.Millisecond)
			}
		}
	}()
	want := overwriteTags(t, v, n, 7, nil)
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkAll(t, v, want)
	st := r.s.Stats()
	if st.GCRuns == 0 || st.DiscardedBytes == 0 {
		t.Fatalf("the cleaner ran %d times and discarded %d bytes: the test did not exercise freeing", st.GCRuns,
			st.DiscardedBytes)
	}
	r.reopen()
	v, _ = r.s.Volume("a")
	checkAll(t, v, want)
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
	r.s = nil
}

func TestDiscardModeChoosesDrives(t *testing.T) {
	file, err := disk.OpenFile(filepath.Join(t.TempDir(), "drive"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	mem := disk.NewMem(1 << 20)
	for _, c := range []struct {
		mode      string
		file, mem bool
	}{{"auto", false, true}, {"", false, true}, {"on", true, true}, {"off", false, false}} {
		m, err := ParseDiscardMode(c.mode)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.discards(file); got != c.file {
			t.Errorf("discard %q on a drive file: %v, want %v", c.mode, got, c.file)
		}
		if got := m.discards(mem); got != c.mem {
			t.Errorf("discard %q on a memory drive: %v, want %v", c.mode, got, c.mem)
		}
		if c.mode != "" && m.String() != c.mode {
			t.Errorf("ParseDiscardMode(%q).String() = %q", c.mode, m.String())
		}
	}
	if _, err := ParseDiscardMode("sometimes"); err == nil {
		t.Error(`ParseDiscardMode("sometimes") succeeded`)
	}
}
