package main

import (
	"io"
	"log/slog"
	"net/http"
	"testing"
)

// TestPprofOffByDefault: without BASALT_PPROF no endpoint is served; with
// it, the heap profile is served on the address bound.
func TestPprofOffByDefault(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Setenv(pprofEnv, "")
	if addr, err := startPprof(log); addr != "" || err != nil {
		t.Fatalf("unset: serves %q (%v), want nothing", addr, err)
	}
	t.Setenv(pprofEnv, "127.0.0.1:0")
	addr, err := startPprof(log)
	if err != nil || addr == "" {
		t.Fatalf("set: %q, %v", addr, err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || len(b) == 0 {
		t.Fatalf("heap profile: %s, %d bytes", resp.Status, len(b))
	}
}
