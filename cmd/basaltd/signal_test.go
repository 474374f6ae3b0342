package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"basalt/tests/ports"
)

// TestStopIsBounded checks the three ways a node stops: one signal and a
// clean stop (exit 0); a second signal while the clean stop hangs (exit 1
// at once); a clean stop that hangs past the bound (exit 1 at the bound).
func TestStopIsBounded(t *testing.T) {
	cases := []struct {
		name     string
		hang     bool
		signals  int
		wantCode int
		within   time.Duration
		wantLog  string
	}{
		{"clean", false, 1, 0, 5 * time.Second, "stopped"},
		{"second signal", true, 2, 1, 2 * time.Second, "second signal: exiting now"},
		{"bound", true, 1, 1, 5 * time.Second, "did not finish in time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd, stderr := startNode(t, c.hang)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitFor(t, stderr, "shutting down", 5*time.Second)
			start := time.Now()
			if c.signals == 2 {
				time.Sleep(200 * time.Millisecond) // the clean stop is under way, hanging
				if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-done:
				code := 0
				var exit *exec.ExitError
				if errors.As(err, &exit) {
					code = exit.ExitCode()
				}
				if code != c.wantCode || !strings.Contains(stderr.String(), c.wantLog) {
					t.Fatalf("exit %d after %v, want %d and %q in:\n%s", code, time.Since(start), c.wantCode, c.wantLog, stderr)
				}
			case <-time.After(c.within):
				_ = cmd.Process.Kill()
				t.Fatalf("basaltd still running %v after the signal:\n%s", c.within, stderr)
			}
		})
	}
}

// startNode starts basaltd (this test binary running main) as a single node
// with one memory namespace, with a 2 s shutdown bound, and waits until it
// listens.
func startNode(t *testing.T, hang bool) (*exec.Cmd, *lockedBuilder) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "basaltd.toml")
	addr := ports.FreeAddr(t)
	body := fmt.Sprintf(`[node]
name = "n1"
[nvme]
listen = %q
advertise = %q
[[subsystem]]
nqn = "nqn.2026-11.io.basalt:t"
allow_any_host = true
  [[subsystem.namespace]]
  nsid = 1
  backend = "memory"
  size = "4MiB"
`, addr, addr)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), basaltdArgs+"=--timer-slack 0 --config "+cfg, bound+"=2s")
	if hang {
		cmd.Env = append(cmd.Env, hangShutdown+"=1")
	}
	stderr := &lockedBuilder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitFor(t, stderr, "nvme connect", 10*time.Second)
	return cmd, stderr
}

func waitFor(t *testing.T, b *lockedBuilder, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v in:\n%s", want, d, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
