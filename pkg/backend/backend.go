// Package backend defines the interface between the NVMe target and the
// storage behind a namespace, the error classes a backend reports, and the two
// simple backends: Memory and File. The log-structured store (pkg/store) and
// the replicated volume (pkg/volume) implement the same interface.
package backend

import (
	"context"
	"errors"
	"fmt"
)

// WriteFlags modify a write.
type WriteFlags uint8

const (
	// WriteFUA asks that the data be durable (survive power loss) when WriteAt
	// returns, whatever the backend's caching (NVMe Force Unit Access).
	WriteFUA WriteFlags = 1 << iota
)

// Backend is a block device as the target sees it. Offsets and lengths are in
// bytes and multiples of BlockSize; the target checks ranges before calling,
// but implementations check again and return ErrOutOfRange.
//
// All methods are safe for concurrent use. A method that returns nil has done
// its work: ReadAt filled p completely; WriteAt's data will be returned by
// every later ReadAt (and is durable if WriteFUA was set, or after the next
// successful Flush). Unwritten and trimmed blocks read as zeroes.
type Backend interface {
	// Size returns the capacity in bytes.
	Size() int64
	// BlockSize returns the logical block size in bytes (512 or 4096).
	BlockSize() int
	// ReadAt reads len(p) bytes at off.
	ReadAt(ctx context.Context, p []byte, off int64) error
	// WriteAt writes p at off.
	WriteAt(ctx context.Context, p []byte, off int64, flags WriteFlags) error
	// Flush makes every write that completed before it durable.
	Flush(ctx context.Context) error
	// Trim deallocates [off, off+n): later reads return zeroes.
	Trim(ctx context.Context, off, n int64) error
	// WriteZeroes writes zeroes over [off, off+n) (it may deallocate).
	WriteZeroes(ctx context.Context, off, n int64) error
	// Close releases resources; no method may be called after it.
	Close() error
}

// AsyncWriter is an optional capability of a Backend whose writes wait for
// other goroutines' progress (a replicated volume waits for its Raft loop
// to commit and apply). WriteAtAsync starts what WriteAt does and returns;
// done is called exactly once, perhaps before WriteAtAsync returns and
// perhaps on another goroutine, with what WriteAt would have returned. done
// must not block. p must stay unchanged until done is called. A write in
// progress holds no goroutine of the caller's, so a target can take the
// next command meanwhile instead of parking a worker per write.
//
// A wrapper backend implements it whatever it wraps and reports in
// AsyncWrites whether the wrapped backend has the capability; callers use
// WriteAtAsync only where AsyncWrites reports true (AsAsyncWriter).
type AsyncWriter interface {
	AsyncWrites() bool
	WriteAtAsync(p []byte, off int64, flags WriteFlags, done func(error))
}

// AsAsyncWriter returns b as an AsyncWriter if it has the capability.
func AsAsyncWriter(b Backend) (AsyncWriter, bool) {
	aw, ok := b.(AsyncWriter)
	if !ok || !aw.AsyncWrites() {
		return nil, false
	}
	return aw, true
}

// WriteAtAsync forwards to b's WriteAtAsync, or calls done with an error
// wrapping errors.ErrUnsupported if b lacks the capability (for wrappers).
func WriteAtAsync(b Backend, p []byte, off int64, flags WriteFlags, done func(error)) {
	aw, ok := AsAsyncWriter(b)
	if !ok {
		done(fmt.Errorf("%w: asynchronous write on a backend without them", errors.ErrUnsupported))
		return
	}
	aw.WriteAtAsync(p, off, flags, done)
}

// SubmitCopier is an optional capability of an AsyncWriter whose
// WriteAtAsync has copied p (or no longer needs it) when it returns, so
// that the caller may reuse p at once, although done comes later: it
// relaxes AsyncWriter's "p must stay unchanged until done is called" to
// "until WriteAtAsync returns", on every path, the write's failures and a
// wait for room included. A replicated volume is one: it copies p into its
// proposal. A target then lends the write its receive buffer in place.
//
// Like AsyncWrites, a wrapper backend implements it whatever it wraps and
// reports CopiesOnSubmit of the wrapped backend, unless its own
// WriteAtAsync keeps p (then false). Callers ask CopiesOnSubmit(b).
type SubmitCopier interface {
	CopiesOnSubmit() bool
}

// CopiesOnSubmit reports whether b has asynchronous writes (AsAsyncWriter)
// that are done with their data when WriteAtAsync returns (SubmitCopier).
func CopiesOnSubmit(b Backend) bool {
	if _, ok := AsAsyncWriter(b); !ok {
		return false
	}
	sc, ok := b.(SubmitCopier)
	return ok && sc.CopiesOnSubmit()
}

// SpaceChecker is implemented by a thin backend that can run out of space
// before its Size. CheckSpace reports, without writing, whether a write of n
// bytes at off would still leave headroom bytes free: nil if so, an error
// wrapping ErrNoSpace if not (overwrites of allocated blocks need none). A
// replicated volume asks it before proposing a write, with headroom for
// what may be in flight, so that the write is refused with Capacity Exceeded
// up front instead of failing on a replica after it was committed.
type SpaceChecker interface {
	CheckSpace(off, n, headroom int64) error
}

// Error classes. Backends wrap these with %w; the target maps them to NVMe
// status codes in one place (target/status.go).
var (
	// ErrOutOfRange: the range lies beyond Size (LBA Out of Range).
	ErrOutOfRange = errors.New("backend: range out of bounds")
	// ErrMisaligned: offset or length is not a multiple of BlockSize.
	ErrMisaligned = errors.New("backend: misaligned offset or length")
	// ErrNoSpace: the backing store is full (Capacity Exceeded).
	ErrNoSpace = errors.New("backend: no space left")
	// ErrMedia: data could not be read back intact (Unrecovered Read Error).
	ErrMedia = errors.New("backend: unrecoverable media error")
	// ErrWriteFault: the write could not be made durable (Write Fault).
	ErrWriteFault = errors.New("backend: write fault")
	// ErrReadOnly: the namespace is write protected.
	ErrReadOnly = errors.New("backend: read only")
	// ErrInaccessible: this node cannot serve the volume now (not the
	// replication leader); the host should use another path (ANA Inaccessible).
	ErrInaccessible = errors.New("backend: volume not accessible on this node")
	// ErrTransition: the volume is changing owner; retry on another path soon
	// (ANA Transition).
	ErrTransition = errors.New("backend: volume in transition")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("backend: closed")
)
