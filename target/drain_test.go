package target

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"basalt/pkg/clock"
)

// Removals are bounded by DrainTimeout even while commands hold their
// namespaces (here: references nobody releases, as a command stuck in its
// backend): each removal returns ErrDrainTimeout after it, and once the
// target is closed all of them together end within DrainTimeout of Close,
// so that a node's shutdown does not wait once per volume. The namespaces
// are gone all the same, and a late release brings the count to zero.
func TestRemovalsBoundedByDrainTimeout(t *testing.T) {
	mc := clock.NewManual(time.Unix(0, 0))
	tgt, err := New(Config{Clock: mc, DrainTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var held []*Namespace
	for i := range 4 {
		s, err := tgt.AddSubsystem(SubsystemConfig{NQN: fmt.Sprintf("nqn.2026-11.io.basalt:d%d", i), AllowAnyHost: true,
			Namespaces: []NamespaceConfig{{NSID: 1, Backend: newMemBackend(1<<20, 512)}}})
		if err != nil {
			t.Fatal(err)
		}
		ns := s.Namespace(1)
		if !ns.acquire() {
			t.Fatal("acquire")
		}
		held = append(held, ns)
	}
	// Before Close: one removal waits DrainTimeout.
	if took, err := advanceUntil(mc, func() error { return tgt.RemoveSubsystem("nqn.2026-11.io.basalt:d0") }); !errors.Is(err, ErrDrainTimeout) || took != 4*time.Second {
		t.Fatalf("RemoveSubsystem: %v after %v, want ErrDrainTimeout after 4 s", err, took)
	}
	tgt.Close()
	took, err := advanceUntil(mc, func() error {
		var errs []error
		for i := 1; i < 4; i++ {
			errs = append(errs, tgt.RemoveSubsystem(fmt.Sprintf("nqn.2026-11.io.basalt:d%d", i)))
		}
		return errors.Join(errs...)
	})
	if !errors.Is(err, ErrDrainTimeout) || took != 4*time.Second {
		t.Fatalf("three removals after Close: %v after %v, want ErrDrainTimeout after 4 s in all", err, took)
	}
	if got := tgt.Subsystems(); len(got) != 0 {
		t.Fatalf("subsystems left: %v", got)
	}
	for _, ns := range held {
		ns.release()
		if n := ns.InFlight(); n != 0 {
			t.Fatalf("namespace references %d after the late release", n)
		}
	}
}

// advanceUntil runs f, advancing mc to the deadline of each timer f waits
// for, and returns f's error and the manual time it took.
func advanceUntil(mc *clock.Manual, f func() error) (time.Duration, error) {
	start := mc.Now()
	done := make(chan error, 1)
	go func() { done <- f() }()
	for {
		select {
		case err := <-done:
			return mc.Now().Sub(start), err
		case <-time.After(time.Millisecond):
			if d, ok := mc.NextDeadline(); ok {
				mc.Advance(d.Sub(mc.Now()))
			}
		}
	}
}
