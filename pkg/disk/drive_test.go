package disk

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

func TestAlignedBufferIsAlignedAndSized(t *testing.T) {
	for _, n := range []int{0, 1, 511, 4096, 4097, 3 * 4096, 1 << 20} {
		p := AlignedBuffer(n)
		if len(p) != n || cap(p) != n {
			t.Fatalf("AlignedBuffer(%d): len %d cap %d", n, len(p), cap(p))
		}
		if n > 0 && alignmentOffset(p) != 0 {
			t.Fatalf("AlignedBuffer(%d) is not %d-aligned", n, BlockSize)
		}
		if wantAligned := n%BlockSize == 0; IsAligned(p) != wantAligned {
			t.Fatalf("IsAligned(AlignedBuffer(%d)) = %v", n, IsAligned(p))
		}
	}
	if IsAligned(AlignedBuffer(2 * BlockSize)[1 : BlockSize+1]) {
		t.Fatal("IsAligned accepted a buffer one byte past a boundary")
	}
}

// pattern returns an aligned buffer of n bytes filled from seed.
func pattern(n int, seed uint64) []byte {
	p := AlignedBuffer(n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func mustWrite(t *testing.T, d Drive, p []byte, off int64) {
	t.Helper()
	if n, err := d.WriteAt(p, off); err != nil || n != len(p) {
		t.Fatalf("WriteAt(%d bytes, %d) = %d, %v", len(p), off, n, err)
	}
}

func mustRead(t *testing.T, d Drive, n int, off int64) []byte {
	t.Helper()
	p := AlignedBuffer(n)
	if got, err := d.ReadAt(p, off); err != nil || got != n {
		t.Fatalf("ReadAt(%d bytes, %d) = %d, %v", n, off, got, err)
	}
	return p
}

// driveMaker opens a fresh drive of the given size for the contract tests.
type driveMaker struct {
	name string
	open func(t *testing.T, size int64) Drive
}

func driveMakers() []driveMaker {
	return append(fileDriveMakers(), // file_linux_test.go
		driveMaker{"mem", func(t *testing.T, size int64) Drive { return NewMem(size) }},
		driveMaker{"fault-without-faults", func(t *testing.T, size int64) Drive {
			return NewFault(NewMem(size), FaultOptions{}, 1)
		}},
	)
}

// TestDriveContract runs the Drive contract from drive.go against every
// implementation: round trips, alignment and range errors that do nothing,
// empty operations, Discard, Close, and concurrent use of disjoint ranges.
func TestDriveContract(t *testing.T) {
	for _, maker := range driveMakers() {
		t.Run(maker.name, func(t *testing.T) {
			t.Run("round trip", func(t *testing.T) { testRoundTrip(t, maker.open(t, 64*BlockSize)) })
			t.Run("invalid operations", func(t *testing.T) { testInvalidOperations(t, maker.open(t, 16*BlockSize)) })
			t.Run("discard reads zeros", func(t *testing.T) { testDiscard(t, maker.open(t, 16*BlockSize)) })
			t.Run("closed", func(t *testing.T) { testClosed(t, maker.open(t, 16*BlockSize)) })
			t.Run("concurrent", func(t *testing.T) { testConcurrent(t, maker.open(t, 64*BlockSize)) })
		})
	}
}

func testRoundTrip(t *testing.T, d Drive) {
	defer d.Close()
	if d.Size() != 64*BlockSize || d.BlockSize() != BlockSize {
		t.Fatalf("Size() = %d, BlockSize() = %d", d.Size(), d.BlockSize())
	}
	data := pattern(5*BlockSize, 7)
	mustWrite(t, d, data, 3*BlockSize)
	last := pattern(BlockSize, 8)
	mustWrite(t, d, last, d.Size()-BlockSize)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, d, len(data), 3*BlockSize); !bytes.Equal(got, data) {
		t.Fatal("read back differs from written data")
	}
	if got := mustRead(t, d, BlockSize, d.Size()-BlockSize); !bytes.Equal(got, last) {
		t.Fatal("last block differs")
	}
	if got := mustRead(t, d, BlockSize, 0); !bytes.Equal(got, make([]byte, BlockSize)) {
		t.Fatal("unwritten block is not zero")
	}
}

func testInvalidOperations(t *testing.T, d Drive) {
	defer d.Close()
	size := d.Size()
	unaligned := AlignedBuffer(2 * BlockSize)[1 : BlockSize+1]
	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"read at unaligned offset", func() error { _, err := d.ReadAt(AlignedBuffer(BlockSize), 100); return err }, ErrMisaligned},
		{"write of partial block", func() error { _, err := d.WriteAt(AlignedBuffer(512), 0); return err }, ErrMisaligned},
		{"write from unaligned buffer", func() error { _, err := d.WriteAt(unaligned, 0); return err }, ErrMisaligned},
		{"read from unaligned buffer", func() error { _, err := d.ReadAt(unaligned, 0); return err }, ErrMisaligned},
		{"read past end", func() error { _, err := d.ReadAt(AlignedBuffer(2*BlockSize), size-BlockSize); return err }, ErrOutOfRange},
		{"write at end", func() error { _, err := d.WriteAt(AlignedBuffer(BlockSize), size); return err }, ErrOutOfRange},
		{"write at negative offset", func() error { _, err := d.WriteAt(AlignedBuffer(BlockSize), -BlockSize); return err }, ErrOutOfRange},
		{"discard unaligned", func() error { return d.Discard(0, 100) }, ErrMisaligned},
		{"discard past end", func() error { return d.Discard(size-BlockSize, 2*BlockSize) }, ErrOutOfRange},
		{"discard negative length", func() error { return d.Discard(0, -BlockSize) }, ErrOutOfRange},
	}
	for _, tt := range tests {
		if err := tt.op(); !errors.Is(err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
	if got := mustRead(t, d, int(size), 0); !bytes.Equal(got, make([]byte, size)) {
		t.Fatal("a rejected operation changed the drive")
	}
	if n, err := d.WriteAt(nil, 0); n != 0 || err != nil {
		t.Fatalf("empty write = %d, %v", n, err)
	}
	if n, err := d.ReadAt([]byte{}, size); n != 0 || err != nil {
		t.Fatalf("empty read at end = %d, %v", n, err)
	}
	if err := d.Discard(BlockSize, 0); err != nil {
		t.Fatalf("empty discard: %v", err)
	}
}

func testDiscard(t *testing.T, d Drive) {
	defer d.Close()
	mustWrite(t, d, pattern(8*BlockSize, 3), 0)
	if err := d.Discard(2*BlockSize, 3*BlockSize); err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, d, 8*BlockSize, 0)
	want := pattern(8*BlockSize, 3)
	clear(want[2*BlockSize : 5*BlockSize])
	if !bytes.Equal(got, want) {
		t.Fatal("discard did not zero exactly its range")
	}
}

func testClosed(t *testing.T, d Drive) {
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	p := AlignedBuffer(BlockSize)
	checks := map[string]error{
		"close twice": d.Close(),
		"sync":        d.Sync(),
		"discard":     d.Discard(0, BlockSize),
	}
	_, checks["read"] = d.ReadAt(p, 0)
	_, checks["write"] = d.WriteAt(p, 0)
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// testConcurrent writes and reads disjoint block ranges from several
// goroutines; run with -race it checks the drives' own synchronisation.
func testConcurrent(t *testing.T, d Drive) {
	defer d.Close()
	const workers = 8
	blocksEach := int(d.Size()/BlockSize) / workers
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range blocksEach {
				off := int64(w*blocksEach+i) * BlockSize
				data := pattern(BlockSize, uint64(off))
				if _, err := d.WriteAt(data, off); err != nil {
					errs <- err
					return
				}
				got := AlignedBuffer(BlockSize)
				if _, err := d.ReadAt(got, off); err != nil || !bytes.Equal(got, data) {
					errs <- fmt.Errorf("block at %d: %v, equal %v", off, err, bytes.Equal(got, data))
					return
				}
			}
			errs <- d.Sync()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
