package store

import (
	"errors"
	"testing"
	"time"
)

// TestFailedWriterFinishWaitsForItsGoroutines: a writer that has failed
// still waits, as the store closes, for the batch it has in flight and
// the segment-row commit in flight, which may yet write the drives and the
// metadata. Returning before them let a crashed store's late metadata
// writes land in the next store opened on the same metadata.
func TestFailedWriterFinishWaitsForItsGoroutines(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.opts.synchronous = true
	r := newRig(t, cfg)
	w := r.s.w
	fl := &flight{done: make(chan struct{})}
	rows := &rowCommit{done: make(chan struct{})}
	w.flights = append(w.flights, fl)
	w.rows.inflight = rows
	failure := errors.New("failed for the test")
	w.failed = failure

	finished := make(chan error, 1)
	go func() { finished <- w.finish() }()
	early := func(what string) {
		t.Helper()
		select {
		case <-finished:
			t.Fatalf("finish returned with %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
	early("a batch in flight")
	close(fl.done)
	early("a row commit in flight")
	close(rows.done)
	select {
	case err := <-finished:
		if !errors.Is(err, failure) {
			t.Fatalf("finish = %v, want the writer's failure", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("finish hangs once its goroutines are done")
	}
}
