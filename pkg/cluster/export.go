package cluster

import (
	"context"
	"fmt"
	"sync/atomic"

	"basalt/pkg/backend"
)

// export is the backend a volume's namespace is built on: the replicated
// volume seen at the size the metadata gives hosts. During a resize the
// replicas grow first; the namespace grows only once all of them have,
// so no replica is ever asked to apply a write beyond its end.
type export struct {
	backend.Backend
	size atomic.Int64
}

func newExport(b backend.Backend, size int64) *export {
	e := &export{Backend: b}
	e.size.Store(size)
	return e
}

// Size returns the size hosts see.
func (e *export) Size() int64 { return e.size.Load() }

func (e *export) check(off, n int64) error {
	if size := e.size.Load(); off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("%w: %d bytes at %d of %d", backend.ErrOutOfRange, n, off, size)
	}
	return nil
}

// ReadAt implements backend.Backend.
func (e *export) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := e.check(off, int64(len(p))); err != nil {
		return err
	}
	return e.Backend.ReadAt(ctx, p, off)
}

// WriteAt implements backend.Backend.
func (e *export) WriteAt(ctx context.Context, p []byte, off int64, f backend.WriteFlags) error {
	if err := e.check(off, int64(len(p))); err != nil {
		return err
	}
	return e.Backend.WriteAt(ctx, p, off, f)
}

// AsyncWrites implements backend.AsyncWriter: as the replicated volume.
func (e *export) AsyncWrites() bool {
	_, ok := backend.AsAsyncWriter(e.Backend)
	return ok
}

// CopiesOnSubmit implements backend.SubmitCopier: as the replicated volume
// (WriteAtAsync checks the range and forwards p).
func (e *export) CopiesOnSubmit() bool { return backend.CopiesOnSubmit(e.Backend) }

// WriteAtAsync implements backend.AsyncWriter.
func (e *export) WriteAtAsync(p []byte, off int64, f backend.WriteFlags, done func(error)) {
	if err := e.check(off, int64(len(p))); err != nil {
		done(err)
		return
	}
	backend.WriteAtAsync(e.Backend, p, off, f, done)
}

// Trim implements backend.Backend.
func (e *export) Trim(ctx context.Context, off, n int64) error {
	if err := e.check(off, n); err != nil {
		return err
	}
	return e.Backend.Trim(ctx, off, n)
}

// WriteZeroes implements backend.Backend.
func (e *export) WriteZeroes(ctx context.Context, off, n int64) error {
	if err := e.check(off, n); err != nil {
		return err
	}
	return e.Backend.WriteZeroes(ctx, off, n)
}
