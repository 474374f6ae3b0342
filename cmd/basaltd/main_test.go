package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary run basaltd's main with the arguments in
// basaltdArgs, so that the tests can check its exit code and messages.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(basaltdArgs); ok {
		if os.Getenv(hangShutdown) != "" {
			beforeShutdown = func() { select {} }
		}
		if b, err := time.ParseDuration(os.Getenv(bound)); err == nil {
			shutdownBound = b
		}
		os.Args = append([]string{"basaltd"}, strings.Fields(args)...)
		os.Exit(run())
	}
	os.Exit(m.Run())
}

const (
	basaltdArgs  = "BASALTD_TEST_ARGS"
	hangShutdown = "BASALTD_TEST_HANG_SHUTDOWN" // the clean stop never finishes
	bound        = "BASALTD_TEST_SHUTDOWN_BOUND"
)

// basaltd runs main with args and returns its exit code and stderr.
func basaltd(t *testing.T, args string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), basaltdArgs+"="+args)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	}
	t.Fatal(err)
	return 0, ""
}

func TestTimerSlackIsBounded(t *testing.T) {
	for _, slack := range []string{"11ms", "1s", "-1ms"} {
		code, stderr := basaltd(t, "--config /nonexistent --timer-slack "+slack)
		if code != 2 || !strings.Contains(stderr, "--timer-slack") {
			t.Errorf("--timer-slack %s: exit %d, stderr %q; want 2 and a message naming the flag", slack, code, stderr)
		}
	}
	// Within bounds the flag is accepted and the missing file is the error.
	code, stderr := basaltd(t, "--config /nonexistent --timer-slack 2ms")
	if code != 2 || !strings.Contains(stderr, "/nonexistent") || strings.Contains(stderr, "--timer-slack") {
		t.Errorf("--timer-slack 2ms: exit %d, stderr %q; want the configuration error only", code, stderr)
	}
}

func TestConfigIsRequired(t *testing.T) {
	code, stderr := basaltd(t, "")
	if code != 2 || !strings.Contains(stderr, "--config") {
		t.Errorf("no arguments: exit %d, stderr %q; want 2 and a message naming --config", code, stderr)
	}
}
