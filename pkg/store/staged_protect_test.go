//go:build linux

package store

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/disk"
)

// These tests stage writes from memory mapped outside the Go heap and
// revoke all access to it (mprotect PROT_NONE) as soon as the contract
// lets the caller reuse it: after the floor passes its token, after
// DeleteVolume returns, after Close returns. A store that reads the bytes
// afterwards faults, and the fault kills the test binary: a failure no
// retry or recover hides.

// mappedBlocks returns n blocks of anonymous memory, one page each.
func mappedBlocks(t *testing.T, n int) []byte {
	t.Helper()
	if os.Getpagesize() != BlockSize {
		t.Skipf("pages of %d bytes, not one block", os.Getpagesize())
	}
	b, err := syscall.Mmap(-1, 0, n*BlockSize, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(b) })
	return b
}

func protect(t testing.TB, b []byte, prot int) {
	if err := syscall.Mprotect(b, prot); err != nil {
		t.Fatal(err)
	}
}

// readUntil reads v's first n blocks over and over until stop, checking
// each against want (nil: any block a write made), and returns the first
// error other than those of a read that meets Close: backend.ErrClosed, or
// a drive closed under a read already past the store's check.
func readUntil(v *Volume, n int, want []uint64, stop *atomic.Bool) error {
	for !stop.Load() {
		got, err := tryReadTags(v, 0, n)
		if errors.Is(err, backend.ErrClosed) || errors.Is(err, disk.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		for i := range want {
			if got[i] != want[i] {
				return errors.New("a block reads another write's data")
			}
		}
	}
	return nil
}

// TestStagedReleasedBytesAreNeverRead: a group stages writes from mapped
// pages and revokes each page as soon as the floor passes its token, then
// maps it again for a later write; readers read the same blocks all along.
// A reader or the writer that touched a released page would fault.
func TestStagedReleasedBytesAreNeverRead(t *testing.T) {
	const pages, blocks = 64, 32
	mem := mappedBlocks(t, pages)
	cfg := stagedRigConfig(true)
	cfg.opts.StagedSize = 64 << 10 // pads and releases often
	r := newRig(t, cfg)
	v, _ := r.s.CreateVolume("v", blocks*BlockSize)
	var stop atomic.Bool
	var readers sync.WaitGroup
	errs := make(chan error, 3)
	for range 2 {
		readers.Go(func() { errs <- readUntil(v, blocks, nil, &stop) })
	}
	type heldPage struct{ token, page uint64 }
	var held []heldPage
	want := make([]uint64, blocks)
	revoke := func() { // every page the floor has passed
		floor, ok := v.StagedFloor()
		for len(held) > 0 && (!ok || held[0].token < floor) {
			p := held[0].page
			protect(t, mem[p*BlockSize:(p+1)*BlockSize], syscall.PROT_NONE)
			held = held[1:]
		}
	}
	ops := 3000
	if raceEnabled || testing.Short() {
		ops = 600
	}
	for i := range uint64(ops) {
		for revoke(); len(held) == pages; revoke() {
			time.Sleep(100 * time.Microsecond) // the group waits for its log to be released
		}
		page := mem[i%pages*BlockSize : (i%pages+1)*BlockSize]
		protect(t, page, syscall.PROT_READ|syscall.PROT_WRITE)
		makeBlock(page, i+1)
		if err := v.WriteStaged(page, int64(i%blocks)*BlockSize, i+1); err != nil {
			t.Fatal(err)
		}
		held = append(held, heldPage{token: i + 1, page: i % pages})
		want[i%blocks] = i + 1
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	protect(t, mem, syscall.PROT_NONE) // every write is released
	wantTags(t, v, 0, want)
	stop.Store(true)
	readers.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestStagedDeleteVolumeForgetsTheCallersBytes: once DeleteVolume returns,
// the store never reads the deleted volume's staged bytes, whatever it
// still has to destage, read, flush and close; readers of both volumes run
// throughout.
func TestStagedDeleteVolumeForgetsTheCallersBytes(t *testing.T) {
	const n = 64
	mem := mappedBlocks(t, n)
	r := newRig(t, stagedRigConfig(true))
	gone, _ := r.s.CreateVolume("gone", n*BlockSize)
	kept, _ := r.s.CreateVolume("kept", n*BlockSize)
	want := make([]uint64, n)
	for i := range n {
		makeBlock(mem[i*BlockSize:], uint64(i+1))
		if err := gone.WriteStaged(mem[i*BlockSize:(i+1)*BlockSize], int64(i)*BlockSize, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		want[i] = uint64(1000 + i)
		writeStagedHeap(t, kept, i, want[i])
		if i == n/2 {
			if err := r.s.Flush(ctx); err != nil { // half of them destaged
				t.Fatal(err)
			}
		}
	}
	var stop atomic.Bool
	var readers sync.WaitGroup
	errs := make(chan error, 4)
	for _, v := range []*Volume{gone, kept, gone} {
		readers.Go(func() { errs <- readUntil(v, n, nil, &stop) })
	}
	time.Sleep(10 * time.Millisecond)
	if err := r.s.DeleteVolume("gone"); err != nil {
		t.Fatal(err)
	}
	protect(t, mem, syscall.PROT_NONE)
	for i := range n {
		want[i] = uint64(2000 + i)
		writeStagedHeap(t, kept, i, want[i])
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wantFloor(t, gone, 0, false)
	stop.Store(true)
	readers.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	r.reopen()
	kept, _ = r.s.Volume("kept")
	wantTags(t, kept, 0, want)
}

// writeStagedHeap stages one block with tag at lba from a fresh buffer of
// its own (token tag), which the caller never changes.
func writeStagedHeap(t *testing.T, v *Volume, lba int, tag uint64) {
	t.Helper()
	if err := v.WriteStaged(taggedBlocks(tag), int64(lba)*BlockSize, tag); err != nil {
		t.Fatal(err)
	}
}

// TestStagedCloseForgetsTheCallersBytes: once Close returns, the store
// never reads a staged byte again, on a healthy store (which destaged
// everything) and on a failed one (which kept its records unreleased),
// with readers running across the Close.
func TestStagedCloseForgetsTheCallersBytes(t *testing.T) {
	for _, failed := range []bool{false, true} {
		t.Run(map[bool]string{false: "healthy", true: "failed"}[failed], func(t *testing.T) {
			const n = 32
			mem := mappedBlocks(t, n)
			cfg := stagedRigConfig(true)
			cfg.faults = true
			r := newRig(t, cfg)
			v, _ := r.s.CreateVolume("v", n*BlockSize)
			if err := v.WriteStaged(taggedBlocks(1, 2, 3), 0, 1); err != nil {
				t.Fatal(err)
			}
			if err := r.s.Flush(ctx); err != nil { // a segment open on every drive
				t.Fatal(err)
			}
			for i := range n {
				makeBlock(mem[i*BlockSize:], uint64(i+10))
				if err := v.WriteStaged(mem[i*BlockSize:(i+1)*BlockSize], int64(i)*BlockSize, uint64(i+2)); err != nil {
					t.Fatal(err)
				}
			}
			if failed {
				r.fault[0].Fail()
				r.fault[1].Fail()
				if err := r.s.Flush(ctx); err == nil {
					t.Fatal("Flush with two of four drives lost succeeded")
				}
			}
			floor, outstanding := v.StagedFloor() // the writer may have destaged some before the loss
			var stop atomic.Bool
			var readers sync.WaitGroup
			errs := make(chan error, 2)
			for range 2 {
				readers.Go(func() { errs <- readUntil(v, n, nil, &stop) })
			}
			time.Sleep(10 * time.Millisecond)
			closeErr := r.s.Close()
			r.s = nil
			protect(t, mem, syscall.PROT_NONE)
			time.Sleep(10 * time.Millisecond) // the readers keep going, and must not fault
			stop.Store(true)
			readers.Wait()
			close(errs)
			for err := range errs {
				if err != nil && !failed {
					t.Fatal(err)
				}
			}
			if failed != (closeErr != nil) {
				t.Fatalf("Close: %v", closeErr)
			}
			if !failed {
				wantFloor(t, v, 0, false) // Close destaged everything
				return
			}
			if !outstanding {
				t.Fatal("no floor after the failed Flush")
			}
			wantFloor(t, v, floor, true) // a failed store's floor stays
		})
	}
}

// TestStagedStaleReadRetries: a reader that found a staged version in the
// overlay just before the record was released (the window between lookup
// and copy, here made deterministic) retries from the map without reading
// the caller's bytes, which the caller has revoked meanwhile.
func TestStagedStaleReadRetries(t *testing.T) {
	mem := mappedBlocks(t, 1)
	r := newRig(t, stagedRigConfig(false))
	v, _ := r.s.CreateVolume("v", 1<<20)
	makeBlock(mem, 42)
	if err := v.WriteStaged(mem, 0, 1); err != nil {
		t.Fatal(err)
	}
	ref, ok := v.v.ov.lookup(0)
	if !ok {
		t.Fatal("the staged block is not in the overlay")
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wantFloor(t, v, 0, false)
	protect(t, mem, syscall.PROT_NONE)
	dst := make([]byte, BlockSize)
	if err := r.s.stage.readBlock(&readScratch{}, ref, dst); !errors.Is(err, errRetry) {
		t.Fatalf("read of a released record: %v, want errRetry", err)
	}
	wantTags(t, v, 0, []uint64{42})
}
