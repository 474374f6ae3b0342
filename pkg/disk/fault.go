package disk

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/clock"
)

// Op is a kind of drive operation, as seen by FaultDrive.
type Op uint8

const (
	OpRead Op = iota + 1
	OpWrite
	OpSync
	OpDiscard
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpSync:
		return "sync"
	case OpDiscard:
		return "discard"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Fault is a misbehaviour FaultDrive can inject.
type Fault uint8

const (
	FaultNone Fault = iota
	// FaultError fails the operation with an error wrapping ErrIO; nothing
	// is transferred. Any Op.
	FaultError
	// FaultLatency delays the operation, which then proceeds. Any Op.
	FaultLatency
	// FaultBitFlip flips one bit of the data returned by a successful read.
	// OpRead only. The drive's content is unchanged.
	FaultBitFlip
	// FaultMisdirect lands a write at another block-aligned offset and
	// reports success; the intended range keeps its old content. Where no
	// other offset fits, the write is dropped. OpWrite only.
	FaultMisdirect
	// FaultTorn writes only a prefix of the data, cut at a 512-byte sector
	// boundary, and reports success; the rest keeps its old content.
	// OpWrite only.
	FaultTorn
	faultCount
)

func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultError:
		return "error"
	case FaultLatency:
		return "latency"
	case FaultBitFlip:
		return "bit-flip"
	case FaultMisdirect:
		return "misdirect"
	case FaultTorn:
		return "torn"
	}
	return fmt.Sprintf("Fault(%d)", uint8(f))
}

// appliesTo reports whether f can be injected into op.
func (f Fault) appliesTo(op Op) bool {
	switch f {
	case FaultError, FaultLatency:
		return true
	case FaultBitFlip:
		return op == OpRead
	case FaultMisdirect, FaultTorn:
		return op == OpWrite
	}
	return false
}

// Rule is a scripted fault: it injects Fault into operations of kind Op that
// overlap [Offset, Offset+Length) (Length 0: any offset; OpSync ignores the
// range), letting the first Skip matching operations pass and then injecting
// Count times (0: forever).
type Rule struct {
	Op      Op
	Fault   Fault
	Offset  int64
	Length  int64
	Skip    int
	Count   int
	Latency time.Duration // for FaultLatency; 0 means FaultOptions.Latency
}

// FaultOptions configures a FaultDrive. Every probability is in [0, 1] and 0
// by default, so the zero value injects nothing.
type FaultOptions struct {
	ReadErrorProbability      float64
	ReadBitFlipProbability    float64
	WriteErrorProbability     float64 // applies to OpWrite and OpDiscard
	WriteMisdirectProbability float64
	WriteTornProbability      float64
	SyncErrorProbability      float64
	// LatencyProbability delays any operation by Latency, measured on Clock.
	LatencyProbability float64
	Latency            time.Duration
	// Clock measures injected latency; nil means clock.Real(). With a
	// clock.Manual a delayed operation waits until the test advances it.
	Clock clock.Clock
	// Rules are consulted, in order, before the probabilities. The first
	// rule that injects a fault other than latency ends the search.
	Rules []Rule
	// DiscardKeepsData makes a successful Discard leave the inner drive's
	// bytes as they were (it is still recorded, see Discards): a device may
	// return the old data or zeros for a discarded range, and callers must
	// not depend on either.
	DiscardKeepsData bool
}

// Extent is a byte range of a drive.
type Extent struct{ Off, Len int64 }

// validate panics on a configuration no test means to write.
func (o *FaultOptions) validate() {
	for _, p := range []float64{o.ReadErrorProbability, o.ReadBitFlipProbability,
		o.WriteErrorProbability, o.WriteMisdirectProbability, o.WriteTornProbability,
		o.SyncErrorProbability, o.LatencyProbability} {
		if !(p >= 0 && p <= 1) {
			panic(fmt.Sprintf("disk: fault probability %v outside [0, 1]", p))
		}
	}
	for i, r := range o.Rules {
		if !r.Fault.appliesTo(r.Op) || r.Skip < 0 || r.Count < 0 || r.Length < 0 {
			panic(fmt.Sprintf("disk: invalid fault rule %d: %+v", i, r))
		}
	}
}

// FaultDrive wraps a Drive and injects faults, chosen by scripted Rules and by
// seeded probabilities. Given the same seed and the same sequence of
// operations it injects the same faults. Operations that break the Drive
// contract fail as they would on the inner drive, and never draw a fault.
// It is safe for concurrent use; concurrent callers make the order of
// operations, and so the faults each one draws, depend on scheduling.
type FaultDrive struct {
	inner  Drive
	clock  clock.Clock
	failed atomic.Bool
	mu     struct {
		sync.Mutex
		options  FaultOptions
		random   *rand.Rand
		matches  []int // per rule: matching operations seen so far
		injected [faultCount]int
		discards []Extent // successful discards, in order
	}
}

var _ Drive = (*FaultDrive)(nil)

// NewFault returns a FaultDrive over inner. It panics if a probability is
// outside [0, 1] or a rule names a fault its Op cannot have.
func NewFault(inner Drive, options FaultOptions, seed int64) *FaultDrive {
	options.validate()
	d := &FaultDrive{inner: inner, clock: options.Clock}
	if d.clock == nil {
		d.clock = clock.Real()
	}
	d.mu.options = options
	d.mu.options.Rules = append([]Rule(nil), options.Rules...)
	d.mu.matches = make([]int, len(options.Rules))
	d.mu.random = rand.New(rand.NewPCG(uint64(seed), 0x6661_756c_74)) // "fault"
	return d
}

// AddRule appends a scripted rule.
func (d *FaultDrive) AddRule(r Rule) {
	d.mu.Lock()
	defer d.mu.Unlock()
	options := FaultOptions{Rules: []Rule{r}}
	options.validate()
	d.mu.options.Rules = append(d.mu.options.Rules, r)
	d.mu.matches = append(d.mu.matches, 0)
}

// Fail makes the whole drive lost: from now on every operation fails with an
// error wrapping ErrDriveFailed. It cannot be undone.
func (d *FaultDrive) Fail() { d.failed.Store(true) }

// Failed reports whether Fail was called.
func (d *FaultDrive) Failed() bool { return d.failed.Load() }

// Injected returns how many times f has been injected; Injected(FaultNone)
// counts the operations that ran clean.
func (d *FaultDrive) Injected(f Fault) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f >= faultCount {
		return 0
	}
	return d.mu.injected[f]
}

// Discards returns the ranges of the discards that succeeded, oldest first.
func (d *FaultDrive) Discards() []Extent {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Extent(nil), d.mu.discards...)
}

// Inner returns the wrapped drive.
func (d *FaultDrive) Inner() Drive { return d.inner }

// Size returns the inner drive's size.
func (d *FaultDrive) Size() int64 { return d.inner.Size() }

// BlockSize returns the inner drive's block size.
func (d *FaultDrive) BlockSize() int { return d.inner.BlockSize() }

// Close closes the inner drive, failed or not.
func (d *FaultDrive) Close() error { return d.inner.Close() }
