package store

import (
	"bytes"
	"context"
	"testing"
	"time"

	"basalt/pkg/pmem"
)

// TestNewWriteBufferKeepsItsRecords replaces the store's write buffer with a
// blank one (a tmpfs buffer after a reboot, a replaced NVDIMM), writes into
// it, crashes, and recovers: the records in the new buffer must not be
// taken for destaged because the old buffer's records with the same
// sequence numbers were (the checkpoint names the buffer it counts in).
func TestNewWriteBufferKeepsItsRecords(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.crashable = true
	cfg.opts.PartialStripeDelay = time.Hour // nothing destages by itself
	r := newRig(t, cfg)
	ctx := context.Background()
	v, err := r.s.CreateVolume("v", 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	block := func(lba, gen int) []byte { return bytes.Repeat([]byte{byte(lba), byte(gen), 0x5A, 0xA5}, BlockSize/4) }
	for lba := range 40 { // 40 records, destaged: the checkpoint says the buffer is destaged up to 40
		if err := v.WriteAt(ctx, block(lba, 1), int64(lba)*BlockSize, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r.reopen()
	if err := r.s.Close(); err != nil { // swap the buffer while the store is down
		t.Fatal(err)
	}
	r.s = nil
	for i, m := range r.mem {
		r.mem[i] = m.CrashClone(0, 0)
	}
	r.region = pmem.NewFake(len(r.region.Persisted()), 3)
	r.open()
	v, err = r.s.Volume("v")
	if err != nil {
		t.Fatal(err)
	}
	for lba := range 5 { // records 1..5 of the new buffer, not destaged
		if err := v.WriteAt(ctx, block(lba, 2), int64(lba)*BlockSize, 0); err != nil {
			t.Fatal(err)
		}
	}
	r.crash(1, 0)
	r.open()
	v, err = r.s.Volume("v")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, BlockSize)
	for lba := range 40 {
		want := block(lba, 1)
		if lba < 5 {
			want = block(lba, 2)
		}
		if err := v.ReadAt(ctx, got, int64(lba)*BlockSize); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("lba %d after the crash: gen %d (%v), want gen %d", lba, got[1], err, want[1])
		}
	}
}

// TestFlushOnAMemoryBufferMakesEverythingDurable is the contract a cluster
// node relies on when its store stages writes in memory (pmem.Memory): once
// Flush returns, every write and trim before it is on the drives, so that a
// crash, which loses the whole buffer, loses nothing the Raft log no longer
// holds.
func TestFlushOnAMemoryBufferMakesEverythingDurable(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.crashable = true
	cfg.memoryBuffer = true
	cfg.opts.PartialStripeDelay = time.Hour
	r := newRig(t, cfg)
	ctx := context.Background()
	v, err := r.s.CreateVolume("v", 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	block := func(lba, gen int) []byte { return bytes.Repeat([]byte{byte(lba), byte(gen), 0x3C, 0xC3}, BlockSize/4) }
	for lba := range 100 {
		if err := v.WriteAt(ctx, block(lba, 1), int64(lba)*BlockSize, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Trim(ctx, 10*BlockSize, 10*BlockSize); err != nil {
		t.Fatal(err)
	}
	for lba := 20; lba < 30; lba++ {
		if err := v.WriteAt(ctx, block(lba, 2), int64(lba)*BlockSize, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r.crash(7, 0)
	r.open()
	if v, err = r.s.Volume("v"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, BlockSize)
	for lba := range 100 {
		want := block(lba, 1)
		switch {
		case lba >= 10 && lba < 20:
			want = make([]byte, BlockSize)
		case lba >= 20 && lba < 30:
			want = block(lba, 2)
		}
		if err := v.ReadAt(ctx, got, int64(lba)*BlockSize); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("lba %d after the crash: %x... (%v), want %x...", lba, got[:4], err, want[:4])
		}
	}
}
