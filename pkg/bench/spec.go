package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sentinel errors.
var (
	// ErrInvalidSpec: a workload specification is inconsistent.
	ErrInvalidSpec = errors.New("bench: invalid workload")
	// ErrVerify: data read back is not what was written (wrapped by a
	// *VerifyError).
	ErrVerify = errors.New("bench: data verification failed")
	// ErrJournal: a journal file is unreadable or belongs to another layout.
	ErrJournal = errors.New("bench: bad journal")
	// ErrIO: an I/O completed with an error the run cannot absorb.
	ErrIO = errors.New("bench: I/O failed")
)

// Spec is one workload, shaped like a fio job: every job (queue) keeps
// QueueDepth I/Os in flight over its share of the region [Offset,
// Offset+Size) until Ramp+Runtime has passed (or, with Once, until it has
// written its share once, sequentially).
type Spec struct {
	Name       string
	BlockSize  int // bytes, a multiple of the device's LBA size
	ReadPct    int // share of reads, 0..100
	RandomPct  int // share of random offsets, 0..100; the rest continue sequentially
	QueueDepth int // I/Os in flight per job
	Jobs       int // jobs, each with its own queue and goroutine
	Ramp       time.Duration
	Runtime    time.Duration
	Offset     int64 // bytes
	Size       int64 // bytes; 0 = to the end of the device
	// Once stops each job after it wrote its share of the region once,
	// sequentially (prefill). ReadPct and RandomPct must be 0.
	Once bool
	// Verify stamps every 4 KiB of every write (VerifyUnit) and checks every
	// read against the generation last acknowledged for it.
	Verify bool
	// Seed drives offsets, the read/write mix and the payload.
	Seed uint64
}

// Preset is a named workload shape; Apply copies it onto a Spec.
type Preset struct {
	Name, Description string
	BlockSize         int
	ReadPct           int
	RandomPct         int
	QueueDepth        int // 0 = keep the Spec's
}

// Presets are the reference workloads W1-W5 on which docs/bench compares
// Basalt with Ceph, plus the queue-depth-1 latency runs.
var Presets = []Preset{
	{Name: "W1", Description: "4 KiB random read", BlockSize: 4096, ReadPct: 100, RandomPct: 100},
	{Name: "W2", Description: "4 KiB random write", BlockSize: 4096, ReadPct: 0, RandomPct: 100},
	{Name: "W3", Description: "8 KiB 80/20 read/write, random", BlockSize: 8192, ReadPct: 80, RandomPct: 100},
	{Name: "W4", Description: "16 KiB 70/30 read/write, 80% random", BlockSize: 16384, ReadPct: 70, RandomPct: 80},
	{Name: "W5", Description: "32 KiB 50/50 read/write, 50% random", BlockSize: 32768, ReadPct: 50, RandomPct: 50},
	{Name: "QD1-read", Description: "4 KiB random read, QD 1", BlockSize: 4096, ReadPct: 100, RandomPct: 100, QueueDepth: 1},
	{Name: "QD1-write", Description: "4 KiB random write, QD 1", BlockSize: 4096, ReadPct: 0, RandomPct: 100, QueueDepth: 1},
}

// LookupPreset finds a preset by name (case-insensitive).
func LookupPreset(name string) (Preset, error) {
	i := slices.IndexFunc(Presets, func(p Preset) bool { return strings.EqualFold(p.Name, name) })
	if i < 0 {
		names := make([]string, len(Presets))
		for j, p := range Presets {
			names[j] = p.Name
		}
		return Preset{}, fmt.Errorf("%w: unknown preset %q (have %s)", ErrInvalidSpec, name, strings.Join(names, ", "))
	}
	return Presets[i], nil
}

// Apply sets s's name, block size, mix and (if the preset fixes it) queue depth.
func (p Preset) Apply(s *Spec) {
	s.Name, s.BlockSize, s.ReadPct, s.RandomPct = p.Name, p.BlockSize, p.ReadPct, p.RandomPct
	if p.QueueDepth != 0 {
		s.QueueDepth = p.QueueDepth
	}
}

// Validate checks s against a device with LBA size lbaSize, capacity size
// and largest transfer maxTransfer (0 = none), and fills in Size. Every
// problem is reported at once.
func (s *Spec) Validate(lbaSize int, size int64, maxTransfer int) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.BlockSize <= 0 || lbaSize <= 0 || s.BlockSize%lbaSize != 0 {
		bad("block size %d is not a positive multiple of the LBA size %d", s.BlockSize, lbaSize)
	}
	if s.Verify && s.BlockSize%VerifyUnit != 0 {
		bad("verify needs a block size that is a multiple of %d, not %d", VerifyUnit, s.BlockSize)
	}
	if maxTransfer > 0 && s.BlockSize > maxTransfer {
		bad("block size %d exceeds the device's largest transfer %d", s.BlockSize, maxTransfer)
	}
	if s.ReadPct < 0 || s.ReadPct > 100 || s.RandomPct < 0 || s.RandomPct > 100 {
		bad("read %d%% / random %d%% must lie in 0..100", s.ReadPct, s.RandomPct)
	}
	if s.QueueDepth < 1 || s.QueueDepth > 4096 || s.Jobs < 1 || s.Jobs > 256 {
		bad("queue depth %d must lie in 1..4096 and jobs %d in 1..256", s.QueueDepth, s.Jobs)
	}
	if s.Once && (s.ReadPct != 0 || s.RandomPct != 0) {
		bad("a once-over (prefill) run writes sequentially only")
	}
	if !s.Once && s.Runtime <= 0 {
		bad("runtime %v must be positive", s.Runtime)
	}
	if s.Ramp < 0 {
		bad("ramp %v is negative", s.Ramp)
	}
	if s.Size == 0 {
		s.Size = size - s.Offset
	}
	if s.Offset < 0 || s.Size <= 0 || s.Offset+s.Size > size || (lbaSize > 0 && (s.Offset%int64(lbaSize) != 0 || s.Size%int64(lbaSize) != 0)) {
		bad("region [%d, +%d) is not an LBA-aligned part of the %d-byte device", s.Offset, s.Size, size)
	} else if s.BlockSize > 0 && s.Jobs > 0 && s.Size/int64(s.Jobs) < int64(s.BlockSize)*int64(max(s.QueueDepth, 1)) {
		bad("region of %d bytes is too small for %d jobs x QD %d x %d-byte blocks", s.Size, s.Jobs, s.QueueDepth, s.BlockSize)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidSpec, errors.Join(errs...))
}

// share returns job j's part of the region: [start, start+length), both
// multiples of the block size.
func (s *Spec) share(j int) (start, length int64) {
	bs := int64(s.BlockSize)
	blocks := s.Size / bs
	per := blocks / int64(s.Jobs)
	start = s.Offset + int64(j)*per*bs
	length = per * bs
	if j == s.Jobs-1 {
		length = (blocks - int64(j)*per) * bs
	}
	return start, length
}
