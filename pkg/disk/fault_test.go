package disk

import (
	"bytes"
	"errors"
	"math/bits"
	"slices"
	"testing"
	"time"

	"basalt/pkg/clock"
)

const faultDriveSize = 32 * BlockSize

// newFaultOverMem returns a FaultDrive over a MemDrive whose every block holds
// pattern(faultDriveSize, 1).
func newFaultOverMem(t *testing.T, options FaultOptions) (*FaultDrive, *MemDrive, []byte) {
	t.Helper()
	inner := NewMem(faultDriveSize)
	original := pattern(faultDriveSize, 1)
	mustWrite(t, inner, original, 0)
	return NewFault(inner, options, 1), inner, original
}

func TestFaultErrorsWrapErrIOAndTransferNothing(t *testing.T) {
	options := FaultOptions{ReadErrorProbability: 1, WriteErrorProbability: 1, SyncErrorProbability: 1}
	d, inner, original := newFaultOverMem(t, options)
	p := AlignedBuffer(BlockSize)
	if n, err := d.ReadAt(p, 0); n != 0 || !errors.Is(err, ErrIO) {
		t.Fatalf("read: %d, %v", n, err)
	}
	if !bytes.Equal(p, make([]byte, BlockSize)) {
		t.Fatal("failed read filled the buffer")
	}
	if n, err := d.WriteAt(pattern(BlockSize, 2), 0); n != 0 || !errors.Is(err, ErrIO) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if err := d.Discard(0, BlockSize); !errors.Is(err, ErrIO) {
		t.Fatalf("discard: %v", err)
	}
	if err := d.Sync(); !errors.Is(err, ErrIO) {
		t.Fatalf("sync: %v", err)
	}
	if got := mustRead(t, inner, faultDriveSize, 0); !bytes.Equal(got, original) {
		t.Fatal("failed operations changed the inner drive")
	}
	if inner.UnsyncedBlocks() != faultDriveSize/BlockSize {
		t.Fatal("a failed sync reached the inner drive")
	}
	if d.Injected(FaultError) != 4 {
		t.Fatalf("Injected(FaultError) = %d, want 4", d.Injected(FaultError))
	}
}

func TestFaultBitFlipChangesOneBitOfTheReadOnly(t *testing.T) {
	d, inner, original := newFaultOverMem(t, FaultOptions{ReadBitFlipProbability: 1})
	got := mustRead(t, d, 4*BlockSize, 0)
	differing := 0
	for i := range got {
		differing += bits.OnesCount8(got[i] ^ original[i])
	}
	if differing != 1 {
		t.Fatalf("%d bits differ, want 1", differing)
	}
	if stored := mustRead(t, inner, faultDriveSize, 0); !bytes.Equal(stored, original) {
		t.Fatal("bit flip on read changed the stored data")
	}
}

func TestFaultMisdirectedWriteLandsElsewhere(t *testing.T) {
	d, inner, original := newFaultOverMem(t, FaultOptions{WriteMisdirectProbability: 1})
	data := pattern(2*BlockSize, 2)
	mustWrite(t, d, data, 4*BlockSize)
	stored := mustRead(t, inner, faultDriveSize, 0)
	if !bytes.Equal(stored[4*BlockSize:6*BlockSize], original[4*BlockSize:6*BlockSize]) &&
		!bytes.Equal(stored[4*BlockSize:6*BlockSize], data) {
		t.Fatal("intended range holds neither old data nor the write")
	}
	landed := -1
	for b := 0; b+2 <= faultDriveSize/BlockSize; b++ {
		if b != 4 && bytes.Equal(stored[b*BlockSize:(b+2)*BlockSize], data) {
			landed = b
		}
	}
	if landed < 0 {
		t.Fatal("misdirected write is nowhere on the drive")
	}
	t.Logf("write for block 4 landed at block %d", landed)
}

func TestFaultMisdirectedWriteWithNowhereElseIsDropped(t *testing.T) {
	inner := NewMem(2 * BlockSize)
	d := NewFault(inner, FaultOptions{WriteMisdirectProbability: 1}, 1)
	mustWrite(t, d, pattern(2*BlockSize, 2), 0)
	if got := mustRead(t, inner, 2*BlockSize, 0); !bytes.Equal(got, make([]byte, 2*BlockSize)) {
		t.Fatal("write that could land nowhere else changed the drive")
	}
}

func TestFaultTornWriteKeepsASectorAlignedPrefix(t *testing.T) {
	for seed := range int64(20) {
		inner := NewMem(faultDriveSize)
		old := pattern(faultDriveSize, 1)
		mustWrite(t, inner, old, 0)
		d := NewFault(inner, FaultOptions{WriteTornProbability: 1}, seed)
		data := pattern(3*BlockSize, 2)
		mustWrite(t, d, data, 2*BlockSize)
		got := mustRead(t, inner, 3*BlockSize, 2*BlockSize)
		cut := 0
		for cut < len(data) && bytes.Equal(got[cut:cut+SectorSize], data[cut:cut+SectorSize]) {
			cut += SectorSize
		}
		if cut == 0 || cut == len(data) {
			t.Fatalf("seed %d: cut at %d is not strictly inside the write", seed, cut)
		}
		if !bytes.Equal(got[cut:], old[2*BlockSize+cut:5*BlockSize]) {
			t.Fatalf("seed %d: bytes after the cut at %d are not the old data", seed, cut)
		}
	}
}

// An injected latency holds the operation until the manual clock passes it.
func TestFaultLatencyWaitsOnTheClock(t *testing.T) {
	manual := clock.NewManual(time.Unix(0, 0))
	d, _, original := newFaultOverMem(t, FaultOptions{
		LatencyProbability: 1, Latency: 5 * time.Millisecond, Clock: manual,
	})
	done := make(chan []byte)
	go func() {
		p := AlignedBuffer(BlockSize)
		if _, err := d.ReadAt(p, 0); err != nil {
			t.Error(err)
		}
		done <- p
	}()
	manual.BlockUntil(1)
	select {
	case <-done:
		t.Fatal("read finished before its latency elapsed")
	default:
	}
	manual.Advance(5 * time.Millisecond)
	if got := <-done; !bytes.Equal(got, original[:BlockSize]) {
		t.Fatal("delayed read returned wrong data")
	}
	if d.Injected(FaultLatency) != 1 {
		t.Fatalf("Injected(FaultLatency) = %d", d.Injected(FaultLatency))
	}
}

func TestFaultFailLosesTheWholeDrive(t *testing.T) {
	d, _, _ := newFaultOverMem(t, FaultOptions{})
	d.Fail()
	if !d.Failed() {
		t.Fatal("Failed() = false after Fail")
	}
	p := AlignedBuffer(BlockSize)
	errs := map[string]error{"sync": d.Sync(), "discard": d.Discard(0, BlockSize)}
	_, errs["read"] = d.ReadAt(p, 0)
	_, errs["write"] = d.WriteAt(p, 0)
	_, errs["misaligned read"] = d.ReadAt(p, 1)
	for name, err := range errs {
		if !errors.Is(err, ErrDriveFailed) {
			t.Errorf("%s: %v, want ErrDriveFailed", name, err)
		}
	}
	if d.Size() != faultDriveSize {
		t.Fatal("a failed drive forgot its size")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// A scripted rule skips, then injects a fixed number of times, and only for
// operations overlapping its range.
func TestFaultRuleSkipCountAndRange(t *testing.T) {
	d, _, _ := newFaultOverMem(t, FaultOptions{Rules: []Rule{
		{Op: OpWrite, Fault: FaultError, Offset: 8 * BlockSize, Length: BlockSize, Skip: 1, Count: 2},
	}})
	data := pattern(2*BlockSize, 2)
	outcomes := []struct {
		off     int64
		wantErr bool
	}{
		{0, false},             // outside the range
		{7 * BlockSize, false}, // overlaps; skipped
		{8 * BlockSize, true},  // injected 1
		{7 * BlockSize, true},  // injected 2
		{8 * BlockSize, false}, // count exhausted
		{9 * BlockSize, false}, // adjacent, not overlapping
	}
	for i, o := range outcomes {
		_, err := d.WriteAt(data, o.off)
		if gotErr := errors.Is(err, ErrIO); gotErr != o.wantErr {
			t.Fatalf("write %d at %d: error %v, want error %v", i, o.off, err, o.wantErr)
		}
	}
	d.AddRule(Rule{Op: OpRead, Fault: FaultBitFlip})
	if got := mustRead(t, d, BlockSize, 0); bytes.Equal(got, data[:BlockSize]) {
		t.Fatal("rule added with AddRule did not flip a bit")
	}
}

// The same seed and operations inject the same faults.
func TestFaultSeedReplays(t *testing.T) {
	run := func(seed int64) []bool {
		d := NewFault(NewMem(faultDriveSize), FaultOptions{WriteErrorProbability: 0.5}, seed)
		var failed []bool
		for i := range 64 {
			_, err := d.WriteAt(pattern(BlockSize, 2), int64(i%16)*BlockSize)
			failed = append(failed, err != nil)
		}
		return failed
	}
	a, b, c := run(5), run(5), run(6)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 5 replayed differently at op %d", i)
		}
	}
	same := true
	for i := range a {
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("seeds 5 and 6 injected identical faults")
	}
}

func TestFaultContractViolationsDrawNoFault(t *testing.T) {
	d, _, _ := newFaultOverMem(t, FaultOptions{WriteErrorProbability: 1, ReadErrorProbability: 1})
	if _, err := d.WriteAt(AlignedBuffer(BlockSize), 1); !errors.Is(err, ErrMisaligned) {
		t.Fatalf("misaligned write: %v", err)
	}
	if _, err := d.ReadAt(AlignedBuffer(BlockSize), faultDriveSize); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if d.Injected(FaultError) != 0 {
		t.Fatal("an invalid operation drew a fault")
	}
}

func TestNewFaultRejectsInvalidOptions(t *testing.T) {
	bad := []FaultOptions{
		{ReadErrorProbability: 1.5},
		{WriteTornProbability: -0.1},
		{Rules: []Rule{{Op: OpRead, Fault: FaultTorn}}},
		{Rules: []Rule{{Op: OpSync, Fault: FaultBitFlip}}},
		{Rules: []Rule{{Op: OpWrite, Fault: FaultError, Count: -1}}},
	}
	for i, options := range bad {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("options %d: NewFault did not panic", i)
				}
			}()
			NewFault(NewMem(BlockSize), options, 1)
		}()
	}
}

func TestOpAndFaultStrings(t *testing.T) {
	if OpDiscard.String() != "discard" || Op(9).String() != "Op(9)" {
		t.Fatal("Op.String")
	}
	if FaultMisdirect.String() != "misdirect" || Fault(42).String() != "Fault(42)" {
		t.Fatal("Fault.String")
	}
}

func TestFaultDiscardIsRecordedAndMayKeepTheOldBytes(t *testing.T) {
	for _, keep := range []bool{false, true} {
		d, inner, original := newFaultOverMem(t, FaultOptions{DiscardKeepsData: keep})
		if err := d.Discard(2*BlockSize, 3*BlockSize); err != nil {
			t.Fatal(err)
		}
		if err := d.Discard(BlockSize, 0); err != nil { // empty: not recorded
			t.Fatal(err)
		}
		if got, want := d.Discards(), []Extent{{Off: 2 * BlockSize, Len: 3 * BlockSize}}; !slices.Equal(got, want) {
			t.Fatalf("keep=%v: Discards() = %v, want %v", keep, got, want)
		}
		want := slices.Clone(original)
		if !keep {
			clear(want[2*BlockSize : 5*BlockSize])
		}
		if got := mustRead(t, inner, faultDriveSize, 0); !bytes.Equal(got, want) {
			t.Fatalf("keep=%v: the inner drive holds the wrong bytes after the discard", keep)
		}
	}
	d, _, _ := newFaultOverMem(t, FaultOptions{Rules: []Rule{{Op: OpDiscard, Fault: FaultError}}})
	if err := d.Discard(0, BlockSize); !errors.Is(err, ErrIO) || len(d.Discards()) != 0 {
		t.Fatalf("failed discard: %v, recorded %v", err, d.Discards())
	}
}
