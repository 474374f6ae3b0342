package loopback

import (
	"fmt"
	"testing"
)

// Benchmark geometry: a 64 MiB volume of 4 KiB blocks, random offsets.
const (
	blockSize   = 4096
	volumeSize  = 64 << 20
	volumeBlocs = volumeSize / blockSize
)

// workload is one cell of the benchmark matrix.
type workload struct {
	qd, queues int
	write      bool
}

func (w workload) name() string {
	rw := "randread-4k"
	if w.write {
		rw = "randwrite-4k"
	}
	return fmt.Sprintf("qd=%d/queues=%d/rw=%s", w.qd, w.queues, rw)
}

// matrix is QD 1 and 32, 1 and 4 connections, 4 KiB random read and write.
func matrix() []workload {
	var ws []workload
	for _, qd := range []int{1, 32} {
		for _, queues := range []int{1, 4} {
			for _, write := range []bool{false, true} {
				ws = append(ws, workload{qd: qd, queues: queues, write: write})
			}
		}
	}
	return ws
}

// engine is what the driver needs from an I/O stack: slots 0..qd-1 each
// hold one I/O with its own 4 KiB buffer.
type engine interface {
	// submit starts slot's I/O at lba (it may only be queued until flush).
	submit(slot int, lba uint64) error
	// flush sends what submit queued.
	flush() error
	// wait returns a completed slot; with block false it returns ok false
	// when none is ready.
	wait(block bool) (slot int, ok bool, err error)
}

// xorshift is a tiny allocation-free PRNG for LBAs.
type xorshift uint64

func (x *xorshift) next() uint64 {
	*x ^= *x << 13
	*x ^= *x >> 7
	*x ^= *x << 17
	return uint64(*x)
}

// drive keeps qd I/Os in flight until b.N have completed and reports IOPS
// and cpu-ns/op, the CPU time of the whole process (host and server, user
// and system) per I/O: unlike IOPS it hardly depends on what else the
// machine runs. After each wake-up it collects every ready completion and
// resubmits them together, so both engines get the same chance to batch.
func drive(b *testing.B, e engine, qd int) {
	rng := xorshift(0x9E3779B97F4A7C15)
	b.SetBytes(blockSize)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	submitted, completed := 0, 0
	for slot := 0; slot < qd && submitted < b.N; slot++ {
		if err := e.submit(slot, rng.next()%volumeBlocs); err != nil {
			b.Fatal(err)
		}
		submitted++
	}
	if err := e.flush(); err != nil {
		b.Fatal(err)
	}
	for completed < b.N {
		block := true
		for {
			slot, ok, err := e.wait(block)
			if err != nil {
				b.Fatal(err)
			}
			if !ok {
				break
			}
			block = false
			completed++
			if submitted < b.N {
				if err := e.submit(slot, rng.next()%volumeBlocs); err != nil {
					b.Fatal(err)
				}
				submitted++
			}
		}
		if err := e.flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "IOPS")
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
