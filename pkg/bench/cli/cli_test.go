package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"basalt/pkg/backend"
	"basalt/target"
	"basalt/target/tcp"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{"4096": 4096, "4k": 4096, "4K": 4096, "4KiB": 4096, "8kb": 8192, "1m": 1 << 20, "4GiB": 4 << 30, "0": 0}
	for in, want := range good {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "k", "-4k", "4x", "1.5m", "99999999999t"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

func TestSpecsExpandPresetsAndSweeps(t *testing.T) {
	w := workloadFlags{presets: []string{"W1", "QD1-write"}, qds: []int{1, 8}, bs: "4k", jobs: 1, seed: 1, offset: "0", size: "0"}
	specs, err := w.specs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, " "); got != "W1-qd1 W1-qd8 QD1-write" {
		t.Fatalf("specs %q", got)
	}
	w = workloadFlags{qds: []int{4}, bs: "8k", read: 70, random: 50, jobs: 2, seed: 1, offset: "0", size: "0"}
	if specs, err = w.specs(); err != nil || specs[0].Name != "8k-70r-50rand" || specs[0].QueueDepth != 4 {
		t.Fatalf("explicit shape: %v %+v", err, specs)
	}
	w.presets = []string{"W9"}
	if _, err := w.specs(); err == nil {
		t.Fatal("unknown preset accepted")
	}
}

// TestCommandLine drives basalt-bench end to end against an in-process
// target: a journaled prefill, a verified run with JSON output, verify.
func TestCommandLine(t *testing.T) {
	addr := serve(t)
	dir := t.TempDir()
	journal, out := filepath.Join(dir, "j"), filepath.Join(dir, "r.json")
	nqn := "--nqn=nqn.2026-11.io.basalt:cli-test"
	steps := [][]string{
		{"prefill", "--addr", addr, nqn, "--journal", journal, "--progress", "off"},
		{"run", "--addr", addr, nqn, "--preset", "W3,QD1-read", "--qd", "4", "--ramp", "0s", "--runtime", "200ms",
			"--journal", journal, "--resume", "--json", out, "--progress", "on", "--cpu-pid", strconv.Itoa(os.Getpid())},
		{"verify", "--addr", addr, nqn, "--journal", journal},
		{"presets"},
	}
	for _, args := range steps {
		var stdout, stderr bytes.Buffer
		if code := Execute(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, stdout.String(), stderr.String())
		}
		if args[0] == "verify" && !strings.Contains(stdout.String(), "0 FAILED") {
			t.Fatalf("verify output:\n%s", stdout.String())
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res []map[string]any
	if err := json.Unmarshal(b, &res); err != nil || len(res) != 2 || res[0]["workload"] != "W3" || res[0]["verify"] != true {
		t.Fatalf("JSON: %v %s", err, b)
	}
	var stderr bytes.Buffer
	if code := Execute(context.Background(), []string{"run", "--addr", addr, nqn, "--journal", journal}, &bytes.Buffer{}, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "--resume") {
		t.Fatalf("an existing journal without --resume: exit %d, %s", code, stderr.String())
	}
	if code := Execute(context.Background(), []string{"run"}, &bytes.Buffer{}, &stderr); code == 0 {
		t.Fatal("run without --addr succeeded")
	}
}

func serve(t *testing.T) string {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	tgt, err := target.New(target.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	be, err := backend.NewMemory(8<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: "nqn.2026-11.io.basalt:cli-test", AllowAnyHost: true,
		Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: be}}}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	p, err := tgt.AddPort(target.PortConfig{ID: 1, TRADDR: "127.0.0.1", TRSVCID: port})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tcp.Listen(tgt, p, addr, tcp.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); l.Serve() }() //nolint:errcheck // ends with Close
	t.Cleanup(func() { l.Close(); <-done; tgt.Close() })
	return addr
}
