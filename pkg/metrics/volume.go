package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
)

// The op label values.
const (
	opRead = iota
	opWrite
	opFlush
	opTrim
	opWriteZeroes
	numOps
)

var opNames = [numOps]string{"read", "write", "flush", "trim", "write_zeroes"}

// opMetrics are one (volume, op)'s resolved children, so the I/O path does
// no label lookups.
type opMetrics struct {
	ops, errs, bytes prometheus.Counter
	latency          prometheus.Observer
}

// Volume is an instrumented backend.Backend.
type Volume struct {
	backend.Backend
	clock clock.Clock
	op    [numOps]opMetrics
}

// WrapVolume returns b instrumented under the volume label name.
func (r *Registry) WrapVolume(name string, b backend.Backend) *Volume {
	v := &Volume{Backend: b, clock: r.clock}
	for i, op := range opNames {
		v.op[i] = opMetrics{
			ops: r.vol.ops.WithLabelValues(name, op), errs: r.vol.errs.WithLabelValues(name, op),
			bytes: r.vol.bytes.WithLabelValues(name, op), latency: r.vol.latency.WithLabelValues(name, op),
		}
	}
	return v
}

// ForgetVolume drops the metrics of a volume that left this node.
func (r *Registry) ForgetVolume(name string) {
	for _, vec := range []*prometheus.CounterVec{r.vol.ops, r.vol.errs, r.vol.bytes} {
		vec.DeletePartialMatch(prometheus.Labels{"volume": name})
	}
	r.vol.latency.DeletePartialMatch(prometheus.Labels{"volume": name})
}

// Unwrap returns the instrumented backend.
func (v *Volume) Unwrap() backend.Backend { return v.Backend }

func (v *Volume) done(op int, n int, start int64, err error) {
	m := &v.op[op]
	m.latency.Observe(float64(v.clock.Now().UnixNano()-start) / 1e9)
	if err != nil {
		m.errs.Inc()
		return
	}
	m.ops.Inc()
	if n > 0 {
		m.bytes.Add(float64(n))
	}
}

// ReadAt implements backend.Backend.
func (v *Volume) ReadAt(ctx context.Context, p []byte, off int64) error {
	start := v.clock.Now().UnixNano()
	err := v.Backend.ReadAt(ctx, p, off)
	v.done(opRead, len(p), start, err)
	return err
}

// WriteAt implements backend.Backend.
func (v *Volume) WriteAt(ctx context.Context, p []byte, off int64, f backend.WriteFlags) error {
	start := v.clock.Now().UnixNano()
	err := v.Backend.WriteAt(ctx, p, off, f)
	v.done(opWrite, len(p), start, err)
	return err
}

// AsyncWrites implements backend.AsyncWriter: as the instrumented backend.
func (v *Volume) AsyncWrites() bool {
	_, ok := backend.AsAsyncWriter(v.Backend)
	return ok
}

// WriteAtAsync implements backend.AsyncWriter, counting the write when done
// is called.
func (v *Volume) WriteAtAsync(p []byte, off int64, f backend.WriteFlags, done func(error)) {
	start := v.clock.Now().UnixNano()
	backend.WriteAtAsync(v.Backend, p, off, f, func(err error) {
		v.done(opWrite, len(p), start, err)
		done(err)
	})
}

// Health implements backend.HealthReporter: as the instrumented backend.
func (v *Volume) Health() (backend.Health, bool) { return backend.HealthOf(v.Backend) }

// Flush implements backend.Backend.
func (v *Volume) Flush(ctx context.Context) error {
	start := v.clock.Now().UnixNano()
	err := v.Backend.Flush(ctx)
	v.done(opFlush, 0, start, err)
	return err
}

// Trim implements backend.Backend.
func (v *Volume) Trim(ctx context.Context, off, n int64) error {
	start := v.clock.Now().UnixNano()
	err := v.Backend.Trim(ctx, off, n)
	v.done(opTrim, 0, start, err)
	return err
}

// WriteZeroes implements backend.Backend.
func (v *Volume) WriteZeroes(ctx context.Context, off, n int64) error {
	start := v.clock.Now().UnixNano()
	err := v.Backend.WriteZeroes(ctx, off, n)
	v.done(opWriteZeroes, 0, start, err)
	return err
}
