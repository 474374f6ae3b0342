package replication

import (
	"testing"
	"time"
)

// TestLeaseReadsSkipTheLoop: once a read has taken a lease, a read barrier
// on the leader passes on the caller's goroutine (done runs before
// ReadBarrierAsync returns, with nothing polled) and sees the newest
// acknowledged write; once the lease lapses with no reads to renew it, a
// barrier goes through the loop again; a follower never passes one.
func TestLeaseReadsSkipTheLoop(t *testing.T) {
	c := newSimCluster(t, 3, func(*Config) {})
	c.startAll()
	l := c.leader()
	if err := c.write(l, 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.read(l, 0); err != nil { // takes a lease
		t.Fatal(err)
	}
	if err := c.write(l, 0, 2); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var result error = errPending
	c.vols[l].ReadAtAsync(buf, 0, func(err error) { result = err })
	if result != nil || buf[0] != 2 {
		t.Fatalf("read under the lease: %v, block holds %d (want nil at once, 2)", result, buf[0])
	}
	for _, id := range c.members {
		if id == l {
			continue
		}
		result = errPending
		c.vols[id].Group().ReadBarrierAsync(func(err error) { result = err })
		if result == nil {
			t.Fatalf("follower %v passed a read barrier", id)
		}
	}
	c.run(3 * time.Second) // no reads: the lease is not renewed and lapses
	result = errPending
	c.vols[l].Group().ReadBarrierAsync(func(err error) { result = err })
	if result != errPending {
		t.Fatalf("read barrier after the lease lapsed: %v at once, want it to go through the loop", result)
	}
	c.runUntil(time.Second, "the read barrier passes through the loop", func() bool { return result != errPending })
	if result != nil {
		t.Fatal(result)
	}
}
