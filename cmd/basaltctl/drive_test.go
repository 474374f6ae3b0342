package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
)

// rebuildingDrives is a DriveManager of two slots whose replacement is
// rebuilt after a few looks.
type rebuildingDrives struct {
	mu     sync.Mutex
	drives []api.DriveView
	looks  int
}

func (f *rebuildingDrives) Drives() api.DrivesView {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := api.DrivesView{Drives: append([]api.DriveView(nil), f.drives...)}
	for i, d := range f.drives {
		if d.State != "rebuilding" {
			continue
		}
		f.looks++
		if f.looks > 3 {
			f.drives[i].State = "healthy"
			v.Drives[i].State = "healthy"
			continue
		}
		v.Rebuild = api.RebuildView{Running: true, Drives: []int{i}, SegmentsDone: f.looks, SegmentsTotal: 4,
			BytesDone: int64(f.looks) << 20, BytesTotal: 4 << 20, BytesPerSecond: 1 << 20, ETASeconds: float64(4 - f.looks)}
	}
	return v
}

func (f *rebuildingDrives) FailDrive(slot int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slot >= len(f.drives) {
		return fmt.Errorf("%w: no drive slot %d", cluster.ErrInvalid, slot)
	}
	f.drives[slot].State = "failed"
	return nil
}

func (f *rebuildingDrives) ReplaceDrive(slot int, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drives[slot].State != "failed" {
		return fmt.Errorf("%w: drive %d is %s", api.ErrDriveState, slot, f.drives[slot].State)
	}
	f.drives[slot].State, f.drives[slot].Path = "rebuilding", path
	return nil
}

func TestCLIDrives(t *testing.T) {
	f := &rebuildingDrives{drives: []api.DriveView{
		{Slot: 0, Path: "/d0", UUID: "u0", Size: 1 << 30, State: "healthy"},
		{Slot: 1, Path: "/d1", UUID: "u1", Size: 1 << 30, State: "healthy", Errors: 7},
	}}
	srv := httptest.NewServer(api.NewServer(api.Config{Drives: f}))
	defer srv.Close()

	out, errs, code := ctl(t, srv.URL, "drive", "list")
	if code != 0 || !strings.Contains(out, "SLOT") || !strings.Contains(out, "/d1") || !strings.Contains(out, "1 GiB") ||
		!strings.Contains(out, "healthy") {
		t.Fatalf("drive list: %d %s%s", code, out, errs)
	}
	if _, errs, code = ctl(t, srv.URL, "drive", "replace", "1", "/new"); code != 1 || !strings.Contains(errs, "only a failed drive") {
		t.Fatalf("replacing a healthy drive: %d %s", code, errs)
	}
	if out, errs, code = ctl(t, srv.URL, "drive", "fail", "1"); code != 0 || !strings.Contains(out, "failed") {
		t.Fatalf("drive fail: %d %s%s", code, out, errs)
	}
	out, errs, code = ctl(t, srv.URL, "drive", "replace", "1", "/new", "--wait", "--every", "1ms")
	if code != 0 || !strings.Contains(errs, "rebuilding 50%: 2 of 4 segments") || !strings.Contains(errs, "drive 1 rebuilt") ||
		!strings.Contains(out, "/new") {
		t.Fatalf("drive replace --wait: %d\n%s\n%s", code, out, errs)
	}
	out, _, code = ctl(t, srv.URL, "-o", "json", "drive", "list")
	var v api.DrivesView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Drives[1].State != "healthy" || v.Drives[1].Path != "/new" {
		t.Fatalf("drive list -o json: %d %s", code, out)
	}
	for _, args := range [][]string{{"drive", "fail", "x"}, {"drive", "replace", "1"}, {"drive", "fail", "-1"}} {
		if _, errs, code := ctl(t, srv.URL, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, errs)
		}
	}
	if _, errs, code := ctl(t, srv.URL, "drive", "fail", "9"); code != 1 || !strings.Contains(errs, "no drive slot 9") {
		t.Errorf("fail 9: %d %s", code, errs)
	}
}
