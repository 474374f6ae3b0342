package replication

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestBurstLargerThanTheBufferNeverWedgesTheLoop sends many large writes at
// once through the leader of three hosts whose write buffers are far smaller
// than the burst: the loops must admit entries only as the buffer has room
// (doc.go, "Buffer space"), keep compacting, and finish every write; none may
// wait for space the loop itself would have to free.
func TestBurstLargerThanTheBufferNeverWedgesTheLoop(t *testing.T) {
	const region = 2 << 20
	c := newTCPCluster(t, region, nil)
	leader, ok := c.leader(5 * time.Second)
	if !ok {
		t.Fatal("no leader elected")
	}
	const writers, rounds, size = 32, 4, 64 << 10 // 8 MiB: four times the buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	payload := func(w, r int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("w%02dr%d|", w, r)), size/6+1)[:size]
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if err := c.vols[leader].WriteAt(ctx, payload(w, r), int64(w)*size); err != nil {
					errs <- fmt.Errorf("writer %d round %d: %w", w, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if len(errs) > 0 {
		for id, h := range c.hosts {
			t.Logf("%v: %+v\n%+v", id, h.Stats(), c.vols[id].Group().Status())
		}
	}
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	got := make([]byte, size)
	for w := range writers {
		if err := c.vols[leader].ReadAt(ctx, got, int64(w)*size); err != nil || !bytes.Equal(got, payload(w, rounds-1)) {
			t.Fatalf("writer %d's block: %q, %v", w, got[:8], err)
		}
	}
	if st := c.hosts[leader].Stats(); st.AdmissionWaits == 0 {
		t.Errorf("the burst never waited for buffer space (%+v): the test did not exercise admission", st)
	}
	// The followers end with the leader's data too.
	want := c.locals[leader].bytes()
	for id, v := range c.vols {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if have := c.locals[id].bytes(); bytes.Equal(have, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("follower %v never caught up: %+v", id, v.Group().Status())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
