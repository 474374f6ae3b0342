package replication

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPropose measures replicated proposals of 4 KiB through the
// leader of three in-process hosts over loopback TCP, with write buffers on
// memory (pmem.Fake), at queue depth 1 and 32: throughput grows with depth
// because proposals batch into one Ready, one record, one message per
// follower.
func BenchmarkPropose(b *testing.B) {
	for _, qd := range []int{1, 32} {
		b.Run(fmt.Sprintf("size=4KiB/qd=%d", qd), func(b *testing.B) {
			benchmarkReplicated(b, qd, nil)
		})
	}
}

// discardSM is a state machine that applies nothing.
type discardSM struct{ applied atomic.Uint64 }

func (d *discardSM) Apply(_ context.Context, index uint64, _ []byte) error {
	d.applied.Store(index)
	return nil
}
func (d *discardSM) AppliedIndex() uint64                { return d.applied.Load() }
func (d *discardSM) Snapshot(io.Writer) error            { return nil }
func (d *discardSM) Restore(_ io.Reader, i uint64) error { d.applied.Store(i); return nil }

// benchmarkReplicated runs op at queue depth qd through the leader's
// blockSM; a nil op proposes to a second group whose state machine
// discards entries. (pkg/volume's BenchmarkVolumeWrite is the same through
// a volume.Volume.)
func benchmarkReplicated(b *testing.B, qd int, op func(context.Context, *blockSM, []byte, int64) error) {
	c := newTCPCluster(b, 64<<20, nil)
	ctx := context.Background()
	var groups [4]*Group
	for id, h := range c.hosts {
		g, err := h.AddGroup(2, []NodeID{1, 2, 3}, &discardSM{})
		if err != nil {
			b.Fatal(err)
		}
		groups[id] = g
	}
	leader, ok := c.leader(5 * time.Second)
	if !ok {
		b.Fatal("no leader")
	}
	v := c.vols[leader]
	if op == nil {
		deadline := time.Now().Add(5 * time.Second)
		for !groups[leader].IsLeader() {
			if time.Now().After(deadline) {
				b.Fatal("no leader for the discarding group")
			}
			for id, g := range groups[1:] {
				if g.IsLeader() {
					leader = NodeID(id + 1)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		g := groups[leader]
		op = func(ctx context.Context, _ *blockSM, data []byte, _ int64) error { return g.Propose(ctx, data) }
	}
	data := make([]byte, 4096)
	for i := range int64(100) { // warm up: connections, caches
		if err := op(ctx, v, data, i); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, qd)
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := op(ctx, v, buf, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(elapsed.Microseconds())*float64(qd)/float64(b.N), "µs/op-latency")
}
