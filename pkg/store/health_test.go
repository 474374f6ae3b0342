package store

import (
	"context"
	"testing"

	"basalt/pkg/backend"
)

// A volume reports its store's health (backend.HealthReporter): the drive
// slots, the format's parity, capacity and use, and a drive taken out.
func TestVolumeHealth(t *testing.T) {
	r := newRig(t, defaultRigConfig()) // 4 drives: 3+1
	v, err := r.s.CreateVolume("v", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := v.WriteAt(ctx, make([]byte, 64<<10), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h, ok := backend.HealthOf(v)
	if !ok {
		t.Fatal("a store volume reports no health")
	}
	if h.Drives != 4 || h.FailedDrives != 0 || h.Parity != 1 || h.MediaErrors != 0 || h.Failed || h.ReadOnly {
		t.Fatalf("healthy store: %+v", h)
	}
	if h.UsedBytes != 64<<10 || h.CapacityBytes <= h.UsedBytes {
		t.Fatalf("capacity %d, used %d; want 64 KiB used of more", h.CapacityBytes, h.UsedBytes)
	}
	if err := r.s.FailDrive(2); err != nil {
		t.Fatal(err)
	}
	h2, _ := backend.HealthOf(v)
	if h2.FailedDrives != 1 || h2.Drives != 4 || h2.CapacityBytes >= h.CapacityBytes {
		t.Fatalf("after FailDrive: %+v (capacity was %d)", h2, h.CapacityBytes)
	}
}
