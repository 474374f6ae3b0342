package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
)

// fakeDrives is a DriveManager of three slots that records the changes.
type fakeDrives struct {
	mu     sync.Mutex
	drives []api.DriveView
	calls  []string
}

func newFakeDrives() *fakeDrives {
	f := &fakeDrives{}
	for i := range 3 {
		f.drives = append(f.drives, api.DriveView{Slot: i, Path: fmt.Sprintf("/d%d", i), UUID: fmt.Sprintf("u%d", i),
			Size: 1 << 30, State: "healthy"})
	}
	return f
}

func (f *fakeDrives) Drives() api.DrivesView {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := api.DrivesView{Drives: append([]api.DriveView(nil), f.drives...)}
	for _, d := range f.drives {
		if d.State == "rebuilding" {
			v.Rebuild = api.RebuildView{Running: true, Drives: []int{d.Slot}, SegmentsDone: 3, SegmentsTotal: 10,
				BytesDone: 3 << 20, BytesTotal: 10 << 20, BytesPerSecond: 1 << 20, ETASeconds: 7}
		}
	}
	return v
}

func (f *fakeDrives) FailDrive(slot int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slot >= len(f.drives) {
		return fmt.Errorf("%w: no drive slot %d", cluster.ErrInvalid, slot)
	}
	f.calls = append(f.calls, fmt.Sprintf("fail %d", slot))
	f.drives[slot].State = "failed"
	return nil
}

func (f *fakeDrives) ReplaceDrive(slot int, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slot >= len(f.drives) {
		return fmt.Errorf("%w: no drive slot %d", cluster.ErrInvalid, slot)
	}
	if f.drives[slot].State != "failed" {
		return fmt.Errorf("%w: drive %d is %s", api.ErrDriveState, slot, f.drives[slot].State)
	}
	f.calls = append(f.calls, fmt.Sprintf("replace %d %s", slot, path))
	f.drives[slot].State, f.drives[slot].Path = "rebuilding", path
	return nil
}

func TestDriveRoutes(t *testing.T) {
	f := newFakeDrives()
	srv := httptest.NewServer(api.NewServer(api.Config{Drives: f}))
	defer srv.Close()
	cl := api.NewClient(srv.URL)

	v, err := cl.Drives(ctx(t))
	if err != nil || len(v.Drives) != 3 || v.Drives[1].Path != "/d1" || v.Drives[1].State != "healthy" ||
		v.Drives[1].Size != 1<<30 || v.Rebuild.Running {
		t.Fatalf("GET /v1/drives: %v %+v", err, v)
	}
	if _, err := cl.ReplaceDrive(ctx(t), 1, "/new"); !errors.Is(err, api.ErrDriveState) && !isCode(err, "conflict", 409) {
		t.Fatalf("replacing a healthy drive: %v", err)
	}
	if v, err = cl.FailDrive(ctx(t), 1); err != nil || v.Drives[1].State != "failed" || !strings.Contains(v.Note, "replace") {
		t.Fatalf("fail: %v %+v", err, v)
	}
	if v, err = cl.ReplaceDrive(ctx(t), 1, "/new"); err != nil || v.Drives[1].State != "rebuilding" ||
		v.Drives[1].Path != "/new" || !v.Rebuild.Running || v.Rebuild.SegmentsTotal != 10 {
		t.Fatalf("replace: %v %+v", err, v)
	}
	if strings.Join(f.calls, ", ") != "fail 1, replace 1 /new" {
		t.Fatalf("calls %v", f.calls)
	}

	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"slot not a number", "POST", "/v1/drives/x/fail", "", 400, "invalid"},
		{"negative slot", "POST", "/v1/drives/-1/fail", "", 400, "invalid"},
		{"no such slot", "POST", "/v1/drives/7/fail", "", 400, "invalid"},
		{"replace without a path", "POST", "/v1/drives/0/replace", `{}`, 400, "invalid"},
		{"replace with an unknown field", "POST", "/v1/drives/0/replace", `{"path":"/x","force":true}`, 400, "invalid"},
		{"replace a healthy drive", "POST", "/v1/drives/0/replace", `{"path":"/x"}`, 409, "conflict"},
		{"wrong method", "DELETE", "/v1/drives", "", 405, "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkStatus(t, srv.URL, tt.method, tt.path, tt.body, tt.status, tt.code)
		})
	}
}

func TestDriveRoutesWithoutAStore(t *testing.T) {
	srv := httptest.NewServer(api.NewServer(api.Config{}))
	defer srv.Close()
	checkStatus(t, srv.URL, "GET", "/v1/drives", "", 501, "unsupported")
	checkStatus(t, srv.URL, "POST", "/v1/drives/0/fail", "", 501, "unsupported")
}

func isCode(err error, code string, status int) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == code && ae.Status == status
}

func checkStatus(t *testing.T, base, method, path, body string, status int, code string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != status || e.Code != code {
		t.Fatalf("%s %s: %d %q (%s), want %d %q", method, path, resp.StatusCode, e.Code, e.Message, status, code)
	}
}
