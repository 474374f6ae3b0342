package qos

import (
	"context"
	"sync"
	"testing"

	"basalt/pkg/clock"
)

// The hot path allocates nothing: run with -benchmem (allocs/op 0 on each).

func BenchmarkReserve(b *testing.B) {
	for _, c := range []struct {
		name   string
		limits Limits
	}{
		{"unlimited", Limits{}},
		// Limits far above what the loop reaches: every bucket is asked,
		// none makes the command wait.
		{"limited", Limits{IOPS: Limit{Rate: MaxRate}, WriteIOPS: Limit{Rate: MaxRate}, Bytes: Limit{Rate: MaxRate},
			WriteBytes: Limit{Rate: MaxRate}}},
		// Every command waits (on a manual clock that never moves, each at
		// the bound).
		{"throttled", Limits{WriteIOPS: Limit{Rate: 1000, Burst: 1}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var clk clock.Clock = clock.Real()
			if c.name == "throttled" {
				clk = newManual()
			}
			th := NewThrottle(clk, nil, 0)
			th.Set(c.limits)
			b.ReportAllocs()
			for b.Loop() {
				th.Reserve(Write, 4096)
			}
		})
	}
}

// BenchmarkWaitThrottled: Wait on a real clock at 1M commands/s, each of
// them throttled (a burst of one): the pooled timer, no allocation.
func BenchmarkWaitThrottled(b *testing.B) {
	th := NewThrottle(clock.Real(), nil, 0)
	th.Set(Limits{ReadIOPS: Limit{Rate: 1_000_000, Burst: 1}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := th.Wait(ctx, Read, 4096); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeferThrottled: Defer at 1M commands/s, 32 outstanding, every
// command queued and resumed by the throttle's goroutine.
func BenchmarkDeferThrottled(b *testing.B) {
	th := NewThrottle(clock.Real(), nil, 0)
	th.Set(Limits{WriteIOPS: Limit{Rate: 1_000_000, Burst: 1}})
	slots := make(chan struct{}, 32)
	var wg sync.WaitGroup
	resume := func() { <-slots; wg.Done() }
	b.ReportAllocs()
	for b.Loop() {
		slots <- struct{}{}
		wg.Add(1)
		if !th.Defer(Write, 4096, resume) {
			resume()
		}
	}
	wg.Wait()
}
