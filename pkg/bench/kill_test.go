package bench_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"basalt/pkg/bench"
)

// mixed is a verified 50/50 random workload of 4-16 KiB I/Os.
func mixed(runtime time.Duration) bench.Spec {
	s := spec("mixed", 8192, 50, 90, 16, 2, runtime)
	s.Verify = true
	return s
}

func prefillVerified(t testing.TB, d bench.Device, v *bench.Verifier) {
	t.Helper()
	pre := prefillSpec(64<<10, 4, 2)
	pre.Verify = true
	if _, err := bench.Run(context.Background(), d, pre, bench.Options{Verifier: v}); err != nil {
		t.Fatal(err)
	}
}

// TestKillTargetThenVerify: the target dies in the middle of a journaled
// run; a new target over the same data must hold every acknowledged write;
// the run can then be resumed from the journal; and corruption is caught.
func TestKillTargetThenVerify(t *testing.T) {
	const size = 8 << 20
	tt := startTarget(t, nil, size, 1)
	d := dial(t, tt.addrs, 2, 16, 300*time.Millisecond)
	path := filepath.Join(t.TempDir(), "journal")
	v, err := bench.NewJournaledVerifier(path, d.LBASize(), 0, d.Size(), 1234)
	if err != nil {
		t.Fatal(err)
	}
	prefillVerified(t, d, v)
	go func() { time.Sleep(250 * time.Millisecond); tt.stop() }()
	_, err = bench.Run(context.Background(), d, mixed(10*time.Second), bench.Options{Verifier: v})
	if !errors.Is(err, bench.ErrIO) {
		t.Fatalf("run against a killed target returned %v, want ErrIO", err)
	}
	v.Close()
	d.Close()

	tt2 := startTarget(t, tt.be, size, 1)
	d2 := dial(t, tt2.addrs, 1, 8, time.Second)
	rep, err := bench.VerifyJournal(context.Background(), d2, path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 0 || rep.Checked != size/bench.VerifyUnit || rep.OK+rep.Newer != rep.Checked {
		t.Fatalf("verify after target kill: %+v", rep)
	}
	t.Logf("after killing the target: %+v", rep)

	v2, rep2, err := bench.ResumeVerifier(context.Background(), d2, path)
	if err != nil || rep2.Failed != 0 {
		t.Fatalf("resume: %v %+v", err, rep2)
	}
	s := mixed(150 * time.Millisecond)
	s.Jobs, s.QueueDepth = 1, 8
	if _, err := bench.Run(context.Background(), d2, s, bench.Options{Verifier: v2}); err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	v2.Close()
	if rep, err := bench.VerifyJournal(context.Background(), d2, path); err != nil || rep.Failed != 0 || rep.InFlight != 0 {
		t.Fatalf("verify after a clean resumed run: %v %+v", err, rep)
	}
	corruptAndCheck(t, tt2, d2, path)
}

// corruptAndCheck damages units behind the target's back and expects
// VerifyJournal to name each.
func corruptAndCheck(t *testing.T, tt *testTarget, d bench.Device, path string) {
	ctx := context.Background()
	unit := func(i int) []byte {
		b := make([]byte, bench.VerifyUnit)
		if err := tt.be.ReadAt(ctx, b, int64(i)*bench.VerifyUnit); err != nil {
			t.Fatal(err)
		}
		return b
	}
	put := func(i int, b []byte) {
		if err := tt.be.WriteAt(ctx, b, int64(i)*bench.VerifyUnit, 0); err != nil {
			t.Fatal(err)
		}
	}
	flipped := unit(10)
	flipped[2000] ^= 1
	put(10, flipped)
	put(20, make([]byte, bench.VerifyUnit))
	put(30, unit(31))
	rep, err := bench.VerifyJournal(ctx, d, path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 3 || len(rep.Errors) != 3 {
		t.Fatalf("3 damaged units, report %+v", rep)
	}
	for i, want := range []uint64{10, 20, 30} {
		if rep.Errors[i].LBA != want {
			t.Errorf("error %d names LBA %d, want %d: %v", i, rep.Errors[i].LBA, want, rep.Errors[i])
		}
	}
}

// TestKillBenchThenVerify runs the bench in a child process, kills it with
// SIGKILL in the middle of a journaled run, and verifies from the journal.
func TestKillBenchThenVerify(t *testing.T) {
	if addr := os.Getenv("BASALT_BENCH_CHILD_ADDR"); addr != "" {
		benchChild(t, addr, os.Getenv("BASALT_BENCH_CHILD_JOURNAL"))
		return
	}
	tt := startTarget(t, nil, 8<<20, 1)
	path := filepath.Join(t.TempDir(), "journal")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillBenchThenVerify$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BASALT_BENCH_CHILD_ADDR="+tt.addrs[0], "BASALT_BENCH_CHILD_JOURNAL="+path)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Prefill writes 128 records, the mixed run many more.
		if st, err := os.Stat(path); err == nil && st.Size() > 64+32*2000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never got going")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() //nolint:errcheck // killed
	d := dial(t, tt.addrs, 1, 8, time.Second)
	rep, err := bench.VerifyJournal(context.Background(), d, path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 0 || rep.Checked != (8<<20)/bench.VerifyUnit {
		t.Fatalf("verify after killing the bench: %+v", rep)
	}
	t.Logf("after kill -9 of the bench: %+v", rep)
}

func benchChild(t *testing.T, addr, path string) {
	d := dial(t, []string{addr}, 2, 16, time.Second)
	v, err := bench.NewJournaledVerifier(path, d.LBASize(), 0, d.Size(), 99)
	if err != nil {
		t.Fatal(err)
	}
	prefillVerified(t, d, v)
	bench.Run(context.Background(), d, mixed(time.Minute), bench.Options{Verifier: v}) //nolint:errcheck // killed
}
