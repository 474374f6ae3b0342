//go:build linux

package timerslack

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary act as the program Ensure re-executes: with
// helperEnv set it calls Ensure and prints the slack of every thread.
func TestMain(m *testing.M) {
	if v := os.Getenv(helperEnv); v != "" {
		os.Exit(helper(v))
	}
	os.Exit(m.Run())
}

const helperEnv = "TIMERSLACK_TEST_HELPER"

func helper(v string) int {
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 3
	}
	if err := Ensure(time.Duration(ns)); err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		return 1
	}
	// Threads the runtime starts now must have it too.
	done := make(chan struct{})
	for range 4 {
		go func() {
			runtime.LockOSThread()
			time.Sleep(time.Millisecond)
			done <- struct{}{}
		}()
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 4
	}
	for range 4 {
		<-done
	}
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + t.Name() + "/timerslack_ns")
		if err != nil {
			continue // the thread exited
		}
		os.Stdout.WriteString("thread " + strings.TrimSpace(string(b)) + "\n")
	}
	os.Stdout.WriteString("marker " + os.Getenv(envMarker) + "\n")
	return 0
}

func TestEnsureSetsEveryThread(t *testing.T) {
	const want = 777 * time.Microsecond
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strconv.FormatInt(int64(want), 10))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	threads := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch f := strings.Fields(line); f[0] {
		case "thread":
			threads++
			if f[1] != strconv.FormatInt(int64(want), 10) {
				t.Errorf("a thread has slack %s ns, want %d", f[1], want)
			}
		case "marker":
			if len(f) > 1 {
				t.Errorf("the re-executed image still has %s=%s", envMarker, f[1])
			}
		}
	}
	if threads < 2 {
		t.Fatalf("saw %d threads, want several:\n%s", threads, out)
	}
}

func TestEnsureRejectsNonPositive(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Millisecond} {
		if err := Ensure(d); err == nil {
			t.Errorf("Ensure(%v) = nil, want an error", d)
		}
	}
}

func TestEnsureDoesNotLoop(t *testing.T) {
	cur, err := Get()
	if err != nil {
		t.Skip(err)
	}
	t.Setenv(envMarker, "1")
	err = Ensure(cur + time.Microsecond)
	if err == nil {
		t.Fatal("Ensure returned nil with the marker set and another slack in force")
	}
	if os.Getenv(envMarker) != "" {
		t.Error("the marker was left in the environment")
	}
}

func TestEnsureKeepsCurrent(t *testing.T) {
	cur, err := Get()
	if err != nil {
		t.Skip(err)
	}
	if err := Ensure(cur); err != nil {
		t.Fatalf("Ensure(current slack %v) = %v", cur, err)
	}
}
