package pmem

import (
	"errors"
	"fmt"
)

// CacheLineSize is the unit in which the CPU writes memory back to the media.
// Stores to different cache lines reach persistence independently; callers that
// want two structures to persist independently place them in different lines.
const CacheLineSize = 64

var (
	// ErrClosed is returned by Persist after Close.
	ErrClosed = errors.New("pmem: region closed")
	// ErrRange is returned by Persist for a range outside the region.
	ErrRange = errors.New("pmem: range outside region")
	// ErrSize is returned by OpenFile and NewFake for an unusable size.
	ErrSize = errors.New("pmem: invalid region size")
	// ErrUnsupported is returned by OpenFile where file mappings are not
	// implemented (operating systems other than Linux).
	ErrUnsupported = errors.New("pmem: file regions not supported on this platform")
)

// Region is a range of memory whose stores can be made durable.
type Region interface {
	// Bytes returns the mapped memory. The slice is the same on every call,
	// its length is Size(), and it stays valid until Close.
	Bytes() []byte
	// Persist makes the bytes [off, off+n) durable: once it returns nil, they
	// survive power loss in every Mode whose Durable method says so. It may
	// persist more (whole cache lines or pages) but never promises it. Persist
	// of disjoint ranges may run concurrently. A non-nil error means nothing is
	// known about the range; the region should be treated as failed, since a
	// retry cannot tell what reached the media (the "fsyncgate" lesson).
	Persist(off, n int) error
	// Size returns the length of the region in bytes.
	Size() int
	// Mode says how Persist works, for logs and status pages.
	Mode() Mode
	// Close unmaps the region. It does not persist anything.
	Close() error
}

// Mode is the persistence mechanism behind a Region.
type Mode uint8

const (
	// ModeDAX: a MAP_SYNC mapping of a file on a DAX filesystem; Persist is a
	// cache-line write-back and a store fence.
	ModeDAX Mode = iota + 1
	// ModeMsync: a MAP_SHARED mapping of a file on a block-backed filesystem;
	// Persist is msync(MS_SYNC).
	ModeMsync
	// ModeVolatile: a MAP_SHARED mapping of a file on tmpfs or ramfs; Persist
	// does nothing (the pages are the file), and nothing survives a power
	// loss; the bytes survive the process.
	ModeVolatile
	// ModeFake: the in-memory test double; persistence is simulated.
	ModeFake
	// ModeMemory: anonymous memory (NewMemory); nothing survives the process.
	ModeMemory
)

// String describes the mode for logs, for example "dax (MAP_SYNC, clwb)".
func (m Mode) String() string {
	switch m {
	case ModeDAX:
		return "dax (MAP_SYNC, " + writeBackMethod.String() + ")"
	case ModeMsync:
		return "msync"
	case ModeVolatile:
		return "tmpfs (no persistence, lost on power loss)"
	case ModeFake:
		return "fake (simulated persistence)"
	case ModeMemory:
		return "memory (volatile, lost when the process ends)"
	default:
		return fmt.Sprintf("Mode(%d)", uint8(m))
	}
}

// Durable reports whether data persisted in this mode survives a power loss
// (simulated, for ModeFake).
func (m Mode) Durable() bool {
	return m == ModeDAX || m == ModeMsync || m == ModeFake
}

// writeBack names the way ModeDAX writes cache lines back to the media.
type writeBack uint8

const (
	writeBackMsync writeBack = iota // no usable instruction: msync
	writeBackCLFLUSH
	writeBackCLFLUSHOPT
	writeBackCLWB
)

func (w writeBack) String() string {
	switch w {
	case writeBackCLFLUSH:
		return "clflush"
	case writeBackCLFLUSHOPT:
		return "clflushopt"
	case writeBackCLWB:
		return "clwb"
	default:
		return "msync"
	}
}

// checkRange returns an error wrapping ErrRange unless 0 <= off, 0 <= n and
// off+n <= size.
func checkRange(off, n, size int) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("%w: persist [%d, +%d) of a %d-byte region", ErrRange, off, n, size)
	}
	return nil
}
