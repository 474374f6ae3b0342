package volume

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkVolumeWrite measures replicated 4 KiB writes through the
// leader's Volume.WriteAt on three in-process hosts over loopback TCP, with
// write buffers on memory, at queue depth 1 and 32: replication's
// BenchmarkPropose plus the operation encoding, the apply to a memory
// replica and the counting.
func BenchmarkVolumeWrite(b *testing.B) {
	for _, qd := range []int{1, 32} {
		b.Run(fmt.Sprintf("size=4KiB/qd=%d", qd), func(b *testing.B) { benchmarkWrites(b, qd) })
	}
}

func benchmarkWrites(b *testing.B, qd int) {
	c := newTCPCluster(b, 64<<20)
	leader, ok := c.leader(5 * time.Second)
	if !ok {
		b.Fatal("no leader")
	}
	v := c.vols[leader]
	ctx := context.Background()
	data := make([]byte, 4096)
	for i := range int64(100) { // warm up: connections, caches
		if err := v.WriteAt(ctx, data, (i%1024)*4096, 0); err != nil {
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
		wg.Go(func() {
			buf := make([]byte, 4096)
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := v.WriteAt(ctx, buf, (i%1024)*4096, 0); err != nil {
					errs <- err
					return
				}
			}
		})
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
