package disk

import (
	"fmt"
	"time"
)

// ReadAt reads from the inner drive, unless a fault intervenes; see Fault.
func (d *FaultDrive) ReadAt(p []byte, off int64) (int, error) {
	if err := d.begin("read", p, off); err != nil || len(p) == 0 {
		return 0, err
	}
	choice := d.choose(OpRead, off, int64(len(p)))
	if choice.fault == FaultError {
		return 0, injectedError(OpRead, off, int64(len(p)))
	}
	n, err := d.inner.ReadAt(p, off)
	if err == nil && choice.fault == FaultBitFlip {
		bit := choice.random % uint64(len(p)*8)
		p[bit/8] ^= 1 << (bit % 8)
	}
	return n, err
}

// WriteAt writes to the inner drive, unless a fault intervenes; see Fault.
func (d *FaultDrive) WriteAt(p []byte, off int64) (int, error) {
	if err := d.begin("write", p, off); err != nil || len(p) == 0 {
		return 0, err
	}
	choice := d.choose(OpWrite, off, int64(len(p)))
	switch choice.fault {
	case FaultError:
		return 0, injectedError(OpWrite, off, int64(len(p)))
	case FaultMisdirect:
		return d.writeMisdirected(p, off, choice.random)
	case FaultTorn:
		return d.writeTorn(p, off, choice.random)
	}
	return d.inner.WriteAt(p, off)
}

// writeMisdirected writes p at a block-aligned offset other than off, chosen
// by random, or nowhere if the drive has no other place p fits.
func (d *FaultDrive) writeMisdirected(p []byte, off int64, random uint64) (int, error) {
	positions := (d.inner.Size()-int64(len(p)))/BlockSize + 1 // where p can start
	if positions <= 1 {
		return len(p), nil // dropped
	}
	target := int64(random%uint64(positions-1)) * BlockSize
	if target >= off {
		target += BlockSize // skip the intended offset
	}
	if _, err := d.inner.WriteAt(p, target); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeTorn writes the first cut bytes of p, cut at a sector boundary chosen
// by random strictly inside p, keeping the old content of the rest.
func (d *FaultDrive) writeTorn(p []byte, off int64, random uint64) (int, error) {
	sectors := uint64(len(p) / SectorSize)
	cut := int(1+random%(sectors-1)) * SectorSize
	whole := cut - cut%BlockSize // bytes written as whole blocks
	if whole > 0 {
		if _, err := d.inner.WriteAt(p[:whole], off); err != nil {
			return 0, err
		}
	}
	if cut > whole {
		block := AlignedBuffer(BlockSize)
		if _, err := d.inner.ReadAt(block, off+int64(whole)); err != nil {
			return 0, err
		}
		copy(block, p[whole:cut])
		if _, err := d.inner.WriteAt(block, off+int64(whole)); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Sync syncs the inner drive, unless a fault intervenes.
func (d *FaultDrive) Sync() error {
	if d.failed.Load() {
		return fmt.Errorf("%w: sync", ErrDriveFailed)
	}
	if d.choose(OpSync, 0, 0).fault == FaultError {
		return injectedError(OpSync, 0, 0)
	}
	return d.inner.Sync()
}

// Discard discards on the inner drive, unless a fault intervenes, and
// records the range (see Discards; with DiscardKeepsData the inner drive is
// left as it was).
func (d *FaultDrive) Discard(off, n int64) error {
	if d.failed.Load() {
		return fmt.Errorf("%w: discard of %d bytes at offset %d", ErrDriveFailed, n, off)
	}
	if err := checkRange("discard", off, n, d.inner.Size()); err != nil || n == 0 {
		return err
	}
	if d.choose(OpDiscard, off, n).fault == FaultError {
		return injectedError(OpDiscard, off, n)
	}
	d.mu.Lock()
	keep := d.mu.options.DiscardKeepsData
	d.mu.Unlock()
	if !keep {
		if err := d.inner.Discard(off, n); err != nil {
			return err
		}
	}
	d.mu.Lock()
	d.mu.discards = append(d.mu.discards, Extent{Off: off, Len: n})
	d.mu.Unlock()
	return nil
}

func (d *FaultDrive) begin(op string, p []byte, off int64) error {
	if d.failed.Load() {
		return fmt.Errorf("%w: %s of %d bytes at offset %d", ErrDriveFailed, op, len(p), off)
	}
	return checkBuffer(op, p, off, d.inner.Size())
}

func injectedError(op Op, off, n int64) error {
	return fmt.Errorf("%w: injected %s fault, %d bytes at offset %d", ErrIO, op, n, off)
}

// choice is the outcome for one operation: a fault and a random number that
// parameterises it (the bit to flip, the misdirected offset, the torn cut).
type choice struct {
	fault  Fault
	random uint64
}

// choose picks the fault for one operation and waits out any injected latency
// before it returns.
func (d *FaultDrive) choose(op Op, off, n int64) choice {
	d.mu.Lock()
	fault, latency := d.ruleFaultLocked(op, off, n)
	if latency == 0 && d.chanceLocked(d.mu.options.LatencyProbability) {
		latency = d.mu.options.Latency
	}
	if latency > 0 {
		d.mu.injected[FaultLatency]++
	}
	if fault == FaultNone {
		fault = d.randomFaultLocked(op)
	}
	d.mu.injected[fault]++
	c := choice{fault: fault, random: d.mu.random.Uint64()}
	d.mu.Unlock()
	if latency > 0 {
		timer := d.clock.NewTimer(latency)
		<-timer.C()
	}
	return c
}

// ruleFaultLocked applies the scripted rules to one operation.
func (d *FaultDrive) ruleFaultLocked(op Op, off, n int64) (Fault, time.Duration) {
	var latency time.Duration
	for i, r := range d.mu.options.Rules {
		if r.Op != op || !r.overlaps(off, n) {
			continue
		}
		d.mu.matches[i]++
		seen := d.mu.matches[i] - r.Skip
		if seen <= 0 || (r.Count > 0 && seen > r.Count) {
			continue
		}
		if r.Fault != FaultLatency {
			return r.Fault, latency
		}
		if r.Latency > 0 {
			latency = max(latency, r.Latency)
		} else {
			latency = max(latency, d.mu.options.Latency)
		}
	}
	return FaultNone, latency
}

func (r *Rule) overlaps(off, n int64) bool {
	if r.Length == 0 || r.Op == OpSync {
		return true
	}
	return off < r.Offset+r.Length && r.Offset < off+max(n, 1)
}

// randomFaultLocked draws the probabilistic faults for op, in a fixed order so
// that a seed replays the same way.
func (d *FaultDrive) randomFaultLocked(op Op) Fault {
	o := &d.mu.options
	switch op {
	case OpRead:
		if d.chanceLocked(o.ReadErrorProbability) {
			return FaultError
		}
		if d.chanceLocked(o.ReadBitFlipProbability) {
			return FaultBitFlip
		}
	case OpWrite:
		if d.chanceLocked(o.WriteErrorProbability) {
			return FaultError
		}
		if d.chanceLocked(o.WriteMisdirectProbability) {
			return FaultMisdirect
		}
		if d.chanceLocked(o.WriteTornProbability) {
			return FaultTorn
		}
	case OpDiscard:
		if d.chanceLocked(o.WriteErrorProbability) {
			return FaultError
		}
	case OpSync:
		if d.chanceLocked(o.SyncErrorProbability) {
			return FaultError
		}
	}
	return FaultNone
}

// chanceLocked returns true with probability p. A zero probability draws
// nothing, so enabling one fault kind does not disturb the others' sequence
// more than necessary.
func (d *FaultDrive) chanceLocked(p float64) bool {
	return p > 0 && d.mu.random.Float64() < p
}
