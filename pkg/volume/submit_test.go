package volume

import (
	"bytes"
	"testing"
	"time"

	"basalt/pkg/backend"
)

// A Volume is done with a write's data when WriteAtAsync returns
// (backend.SubmitCopier): writes proposed from one buffer that the caller
// overwrites right after each call, all completing later, read back as
// they were when submitted. Counted reports what it counts.
func TestWriteAtAsyncCopiesOnSubmit(t *testing.T) {
	c := newSimCluster(t, 23)
	for _, id := range members {
		c.start(id, newMemory(t, simVolumeSize))
	}
	leader := c.leader()
	v := c.vols[leader]
	if !backend.CopiesOnSubmit(v) || !backend.CopiesOnSubmit(&Counted{Backend: v}) {
		t.Fatal("a Volume, or a Counted Volume, does not report that it copies on submit")
	}
	if backend.CopiesOnSubmit(Instrument(asyncMemory{Memory: newMemory(t, 1<<20)}, c.clock)) {
		t.Fatal("a Counted backend that keeps p reports that it copies on submit")
	}
	const writes = 8
	p := make([]byte, 4096)
	results := make([]error, writes)
	for i := range writes {
		results[i] = errPending
		copy(p, bytes.Repeat([]byte{byte(i + 1)}, len(p)))
		v.WriteAtAsync(p, int64(i)*4096, 0, func(err error) { results[i] = err })
		copy(p, bytes.Repeat([]byte{0xEE}, len(p))) // reused at once
	}
	c.runUntil(5*time.Second, "the writes complete", func() bool {
		for _, err := range results {
			if err == errPending {
				return false
			}
		}
		return true
	})
	for i := range writes {
		if results[i] != nil {
			t.Fatalf("write %d: %v", i, results[i])
		}
		got, err := c.read(leader, int64(i))
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(i + 1)}, 4096)) {
			t.Fatalf("block %d reads back %#x... (%v), want %#x", i, got[0], err, i+1)
		}
	}
}
