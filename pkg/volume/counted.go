package volume

import (
	"context"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
)

// Counted is a backend that is not a Volume (a single node's memory, file
// or store backend; a test's stand-in for replication) counting its I/O in
// the Counters a Volume keeps, so that the metrics read both the same way.
// Instrument makes one.
type Counted struct {
	backend.Backend
	clock    clock.Clock
	counters Counters
}

var (
	_ Instrumented           = (*Counted)(nil)
	_ backend.AsyncWriter    = (*Counted)(nil)
	_ backend.HealthReporter = (*Counted)(nil)
)

// Counters returns the backend's I/O counters.
func (c *Counted) Counters() *Counters { return &c.counters }

// Unwrap returns the counted backend.
func (c *Counted) Unwrap() backend.Backend { return c.Backend }

// ReadAt implements backend.Backend.
func (c *Counted) ReadAt(ctx context.Context, p []byte, off int64) error {
	start := c.clock.Now()
	err := c.Backend.ReadAt(ctx, p, off)
	c.counters.record(OpRead, len(p), c.clock.Now().Sub(start), err)
	return err
}

// WriteAt implements backend.Backend.
func (c *Counted) WriteAt(ctx context.Context, p []byte, off int64, f backend.WriteFlags) error {
	start := c.clock.Now()
	err := c.Backend.WriteAt(ctx, p, off, f)
	c.counters.record(OpWrite, len(p), c.clock.Now().Sub(start), err)
	return err
}

// AsyncWrites implements backend.AsyncWriter: as the counted backend.
func (c *Counted) AsyncWrites() bool {
	_, ok := backend.AsAsyncWriter(c.Backend)
	return ok
}

// WriteAtAsync implements backend.AsyncWriter, counting the write when done
// is called.
func (c *Counted) WriteAtAsync(p []byte, off int64, f backend.WriteFlags, done func(error)) {
	backend.WriteAtAsync(c.Backend, p, off, f, newCompletion(&c.counters, c.clock, OpWrite, len(p), done).fn)
}

// Health implements backend.HealthReporter: as the counted backend.
func (c *Counted) Health() (backend.Health, bool) { return backend.HealthOf(c.Backend) }

// Flush implements backend.Backend.
func (c *Counted) Flush(ctx context.Context) error {
	start := c.clock.Now()
	err := c.Backend.Flush(ctx)
	c.counters.record(OpFlush, 0, c.clock.Now().Sub(start), err)
	return err
}

// Trim implements backend.Backend.
func (c *Counted) Trim(ctx context.Context, off, n int64) error {
	start := c.clock.Now()
	err := c.Backend.Trim(ctx, off, n)
	c.counters.record(OpTrim, 0, c.clock.Now().Sub(start), err)
	return err
}

// WriteZeroes implements backend.Backend.
func (c *Counted) WriteZeroes(ctx context.Context, off, n int64) error {
	start := c.clock.Now()
	err := c.Backend.WriteZeroes(ctx, off, n)
	c.counters.record(OpWriteZeroes, 0, c.clock.Now().Sub(start), err)
	return err
}
