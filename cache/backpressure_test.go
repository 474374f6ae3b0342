package cache_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"

	"basalt/cache"
)

// fillLog appends 448-byte payloads (one 512-byte record each) until the next
// would not fit, and returns the records.
func fillLog(t *testing.T, b *cache.Buffer) []record {
	t.Helper()
	var live []record
	for b.Stats().Size-b.Stats().Used >= 512 {
		p := payloadFor(cache.Seq(len(live)+1), 448)
		live = append(live, record{mustAppend(t, b, 1, p), 1, p})
	}
	return live
}

// waitForWaiters spins until n Appends have queued for space.
func waitForWaiters(b *cache.Buffer, n uint64) {
	for b.Stats().SpaceWaits < n {
		runtime.Gosched()
	}
}

type appendResult struct {
	seq cache.Seq
	err error
}

func appendAsync(ctx context.Context, b *cache.Buffer, kind cache.Kind, p []byte) <-chan appendResult {
	done := make(chan appendResult, 1)
	go func() {
		seq, err := b.Append(ctx, kind, p)
		done <- appendResult{seq, err}
	}()
	return done
}

func TestAppendBlocksWhenFullAndResumesAfterRelease(t *testing.T) {
	b, f := openFake(t, 4096, 1)
	live := fillLog(t, b)
	if len(live) != 8 {
		t.Fatalf("filled the 4 KiB log with %d records, want 8", len(live))
	}
	p := payloadFor(100, 448)
	done := appendAsync(context.Background(), b, 2, p)
	waitForWaiters(b, 1)
	for range 1000 {
		runtime.Gosched()
	}
	select {
	case r := <-done:
		t.Fatalf("Append on a full log returned %v, %v", r.seq, r.err)
	default:
	}
	// Nothing was overwritten while it waited.
	checkRecords(t, b, live)
	if err := b.Release(live[0].Seq); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.seq != 9 {
		t.Fatalf("Append after Release = %v, %v; want seq 9", r.seq, r.err)
	}
	live = append(live[1:], record{9, 2, p})
	checkRecords(t, b, live)
	b, _ = crashAndOpen(t, f)
	checkRecords(t, b, live)
}

func TestAppendReturnsContextErrorWhileBlocked(t *testing.T) {
	b, _ := openFake(t, 4096, 1)
	live := fillLog(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	done := appendAsync(ctx, b, 1, make([]byte, 448))
	waitForWaiters(b, 1)
	cancel()
	if r := <-done; !errors.Is(r.err, context.Canceled) || r.seq != 0 {
		t.Fatalf("cancelled Append = %v, %v; want context.Canceled", r.seq, r.err)
	}
	checkRecords(t, b, live)
	// The cancelled waiter left the queue: the next Append goes through once
	// there is space.
	if err := b.Release(live[0].Seq); err != nil {
		t.Fatal(err)
	}
	if seq := mustAppend(t, b, 1, make([]byte, 448)); seq != 9 {
		t.Fatalf("Append after the cancelled one got seq %v, want 9", seq)
	}
	if _, err := b.Append(ctx, 1, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a done context = %v", err)
	}
}

// TestWaitingAppendsAreServedInArrivalOrder: a large record waiting for space
// is not overtaken by small ones that would fit sooner.
func TestWaitingAppendsAreServedInArrivalOrder(t *testing.T) {
	b, _ := openFake(t, 4096, 1)
	live := fillLog(t, b)
	large := appendAsync(context.Background(), b, 1, make([]byte, 1500))
	waitForWaiters(b, 1)
	small := appendAsync(context.Background(), b, 2, make([]byte, 10))
	waitForWaiters(b, 2)
	if err := b.Release(live[0].Seq); err != nil { // room for the small one only
		t.Fatal(err)
	}
	for range 1000 {
		runtime.Gosched()
	}
	select {
	case r := <-small:
		t.Fatalf("small Append overtook the large one: %v, %v", r.seq, r.err)
	default:
	}
	if err := b.Release(live[3].Seq); err != nil {
		t.Fatal(err)
	}
	if r := <-large; r.err != nil || r.seq != 9 {
		t.Fatalf("large Append = %v, %v; want seq 9", r.seq, r.err)
	}
	if r := <-small; r.err != nil || r.seq != 10 {
		t.Fatalf("small Append = %v, %v; want seq 10", r.seq, r.err)
	}
}

func TestCloseFailsWaitingAppends(t *testing.T) {
	b, _ := openFake(t, 4096, 1)
	fillLog(t, b)
	done := appendAsync(context.Background(), b, 1, make([]byte, 448))
	waitForWaiters(b, 1)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !errors.Is(r.err, cache.ErrClosed) {
		t.Fatalf("Append waiting at Close = %v, %v; want ErrClosed", r.seq, r.err)
	}
}

func TestTruncateWhileAppendWaits(t *testing.T) {
	b, f := openFake(t, 4096, 1)
	live := fillLog(t, b)
	p := payloadFor(50, 448)
	done := appendAsync(context.Background(), b, 3, p)
	waitForWaiters(b, 1)
	if err := b.Truncate(7); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.seq != 7 {
		t.Fatalf("Append waiting across Truncate(7) = %v, %v; want seq 7", r.seq, r.err)
	}
	live = append(live[:6], record{7, 3, p})
	checkRecords(t, b, live)
	b, _ = crashAndOpen(t, f)
	checkRecords(t, b, live)
}

// TestConcurrentAppendsAreAcknowledgedInOrder runs appenders and a releaser
// at once on a small log. Every acknowledged record must read back, seqs must
// be unique, and each appender's records must get increasing seqs; a reopen
// must find every unreleased record.
func TestConcurrentAppendsAreAcknowledgedInOrder(t *testing.T) {
	b, f := openFake(t, 16<<10, 1)
	const appenders, perAppender = 8, 200
	var mu sync.Mutex
	acked := map[cache.Seq][]byte{}
	var wg sync.WaitGroup
	for w := range appenders {
		wg.Go(func() {
			previous := cache.Seq(0)
			for i := range perAppender {
				p := payloadFor(cache.Seq(w*1000+i), 16+(w*37+i*101)%1500)
				seq, err := b.Append(context.Background(), cache.Kind(w), p)
				if err != nil || seq <= previous {
					t.Errorf("appender %d: Append = %v, %v after seq %v", w, seq, err, previous)
					return
				}
				previous = seq
				// Others may have released it already.
				_, got, err := b.Read(seq, nil)
				if errors.Is(err, cache.ErrReleased) {
					got, err = p, nil
				}
				if err != nil || !bytes.Equal(got, p) {
					t.Errorf("appender %d: Read(%v) right after Append: %v", w, seq, err)
					return
				}
				mu.Lock()
				acked[seq] = p
				mu.Unlock()
				if seq > 8 {
					if err := b.Release(seq - 8); err != nil {
						t.Errorf("Release(%v): %v", seq-8, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(acked) != appenders*perAppender {
		t.Fatalf("%d records acknowledged, want %d", len(acked), appenders*perAppender)
	}
	st := b.Stats()
	var want []record
	for seq := st.First; seq <= st.Last; seq++ {
		want = append(want, record{seq, 0, acked[seq]})
	}
	b = reopen(t, b, f)
	got := replayAll(t, b)
	if len(got) != len(want) {
		t.Fatalf("reopen found %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("reopen: record %d is %v, want seq %v", i, got[i], want[i].Seq)
		}
	}
}
