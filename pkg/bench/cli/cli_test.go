package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestSocketEngine runs socket-server in-process on a free port, reads the
// address it prints, and measures QD 1 writes against it with JSON output.
func TestSocketEngine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, []string{"socket-server", "--listen", "127.0.0.1:0"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("socket-server printed %q, %v", line, err)
	}
	out := filepath.Join(t.TempDir(), "r.json")
	args := []string{"run", "--engine", "socket", "--addr", addr, "--preset", "QD1-write", "--runtime", "1s", "--ramp", "0s",
		"--json", out, "--progress", "off"}
	var stdout, stderr bytes.Buffer
	if code := Execute(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("%v: exit %d\n%s\n%s", args, code, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res []struct {
		Workload string `json:"workload"`
		Device   string `json:"device"`
		All      struct {
			IOPS    float64 `json:"iops"`
			Latency struct {
				MeanUS float64 `json:"mean_us"`
				P99US  float64 `json:"p99_us"`
			} `json:"latency"`
		} `json:"all"`
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res) != 1 {
		t.Fatalf("JSON: %v %s", err, b)
	}
	if r := res[0]; r.Workload != "QD1-write" || r.Device != "socket tcp "+addr || r.All.IOPS <= 0 ||
		r.All.Latency.MeanUS <= 0 || r.All.Latency.P99US < r.All.Latency.MeanUS/10 {
		t.Fatalf("result %+v", r)
	}
	stderr.Reset()
	if code := Execute(context.Background(), append(args, "--verify"), io.Discard, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "stores nothing") {
		t.Fatalf("--engine socket --verify: exit %d, %q", code, stderr.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("socket-server exited %d when its context ended", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("socket-server did not stop within 5 s of its context ending")
	}
	stderr.Reset()
	if code := Execute(context.Background(), []string{"run", "--engine", "socket", "--preset", "QD1-read"}, io.Discard, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "--engine socket needs one --addr") {
		t.Fatalf("--engine socket without --addr: exit %d, %q", code, stderr.String())
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
