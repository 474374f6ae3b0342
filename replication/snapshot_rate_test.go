package replication

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"basalt/pkg/clock"
)

// TestSnapshotStreamIsPacedAtItsRate: a stream of 1,000 bytes at 1,000
// bytes a second takes a second of the host's clock; unpaced it takes none.
func TestSnapshotStreamIsPacedAtItsRate(t *testing.T) {
	clk := clock.NewManual(testEpoch)
	pw := &progressWriter{w: io.Discard, clock: clk, log: slog.New(slog.DiscardHandler), start: clk.Now(),
		progress: &streamProgress{}, rate: 1000}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 10 {
			if _, err := pw.Write(make([]byte, 100)); err != nil {
				t.Error(err)
			}
		}
	}()
	elapsed := time.Duration(0)
	for {
		select {
		case <-done:
			if elapsed < 990*time.Millisecond {
				t.Fatalf("1,000 bytes at 1,000 B/s took %v of the clock, want at least 1s", elapsed)
			}
			unpaced := &progressWriter{w: io.Discard, clock: clk, log: slog.New(slog.DiscardHandler), start: clk.Now(),
				progress: &streamProgress{}}
			if _, err := unpaced.Write(make([]byte, 1<<20)); err != nil {
				t.Fatal(err)
			}
			return
		default:
			time.Sleep(time.Millisecond) // let the writer reach its timer
			clk.Advance(10 * time.Millisecond)
			elapsed += 10 * time.Millisecond
			if elapsed > 5*time.Second {
				t.Fatal("the paced stream never finished")
			}
		}
	}
}
