package host

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/nvme"
)

// An ANA error (SCT 3, no DNR) makes the host re-read the path's ANA log and
// resubmit on the best remaining path.
func TestMultiPathFailsOverOnANAError(t *testing.T) {
	var aReads atomic.Int32
	a := newFakeTarget(t, fakeConfig{ANA: true})
	a.cfg.OnIO = func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		if cmd.Opcode() != nvme.IORead {
			return false
		}
		aReads.Add(1)
		a.mu.Lock()
		a.cfg.ANAState = nvme.ANAInaccessible // leadership moved away
		a.mu.Unlock()
		fc.sendResp(cmd.CID(), nvme.StatusANATransition, 0, 0)
		return true
	}
	b := newFakeTarget(t, fakeConfig{ANA: true, ANAState: nvme.ANANonOptimized})
	ca, cb := dialFake(t, a, Options{}), dialFake(t, b, Options{})
	mp := NewMultiPath(ca, cb)
	ctx := testContext(t)
	if err := mp.Write(ctx, 1, 3, pattern(4096, 1), false); err != nil {
		t.Fatalf("Write on the optimized path: %v", err)
	}
	buf := make([]byte, 4096)
	if err := mp.Read(ctx, 1, 0, buf); err != nil {
		t.Fatalf("Read with failover: %v", err)
	}
	if aReads.Load() != 1 {
		t.Errorf("path A saw %d reads, want 1", aReads.Load())
	}
	if st, _ := ca.ANAState(1); st != nvme.ANAInaccessible {
		t.Errorf("path A's ANA state was not re-read: %v", st)
	}
	if err := mp.Read(ctx, 1, 0, buf); err != nil || aReads.Load() != 1 {
		t.Errorf("second Read: %v, A reads %d; want it served by B alone", err, aReads.Load())
	}
	ps := mp.Paths(1)
	if len(ps) != 2 || ps[0].ANA != nvme.ANAInaccessible || ps[1].ANA != nvme.ANANonOptimized || !ps[0].Live {
		t.Errorf("Paths(1) = %+v", ps)
	}
}

func TestMultiPathFailsOverOnConnectionLoss(t *testing.T) {
	a := newFakeTarget(t, fakeConfig{OnIO: func(fc *fakeConn, _ *nvme.Command, _ []byte) bool {
		fc.c.Close()
		return true
	}})
	b := newFakeTarget(t, fakeConfig{})
	ca, cb := dialFake(t, a, Options{}), dialFake(t, b, Options{})
	mp := NewMultiPath(ca, cb)
	if err := mp.Flush(testContext(t), 1); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if ca.Err() == nil {
		t.Error("path A should be down")
	}
	if err := mp.Flush(testContext(t), 1); err != nil {
		t.Fatalf("second Flush: %v", err)
	}
}

// A status with DNR is final even for SCT 3, and non-path errors are not
// retried elsewhere.
func TestMultiPathReturnsNonPathErrors(t *testing.T) {
	for _, st := range []nvme.Status{nvme.StatusLBAOutOfRange, nvme.StatusANAInaccessible.WithDNR()} {
		var calls atomic.Int32
		respond := func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
			calls.Add(1)
			fc.sendResp(cmd.CID(), st, 0, 0)
			return true
		}
		a, b := newFakeTarget(t, fakeConfig{OnIO: respond}), newFakeTarget(t, fakeConfig{OnIO: respond})
		mp := NewMultiPath(dialFake(t, a, Options{}), dialFake(t, b, Options{}))
		err := mp.Read(testContext(t), 1, 0, make([]byte, 4096))
		if s, ok := StatusOf(err); !ok || s != st || calls.Load() != 1 {
			t.Errorf("status %v: err %v after %d calls, want it returned after 1", st, err, calls.Load())
		}
	}
}

// Linux queues I/O while no path is usable; MultiPath retries until ctx ends.
func TestMultiPathWaitsWhileNoPathIsUsable(t *testing.T) {
	a := newFakeTarget(t, fakeConfig{ANA: true, ANAState: nvme.ANAInaccessible})
	ca := dialFake(t, a, Options{})
	mp := NewMultiPath(ca)
	ctx, cancel := context.WithTimeout(testContext(t), 250*time.Millisecond)
	defer cancel()
	go func() {
		time.Sleep(120 * time.Millisecond)
		a.mu.Lock()
		a.cfg.ANAState = nvme.ANAOptimized
		a.mu.Unlock()
	}()
	if err := mp.Read(ctx, 1, 0, make([]byte, 4096)); err != nil {
		t.Fatalf("Read after the path became optimized: %v", err)
	}
	a.mu.Lock()
	a.cfg.ANAState = nvme.ANAInaccessible
	a.mu.Unlock()
	ca.RefreshANA(testContext(t))
	ctx2, cancel2 := context.WithTimeout(testContext(t), 150*time.Millisecond)
	defer cancel2()
	if err := mp.Read(ctx2, 1, 0, make([]byte, 4096)); !errors.Is(err, ErrNoPath) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read with no usable path = %v", err)
	}
	ca.Close()
	if err := mp.Read(testContext(t), 1, 0, make([]byte, 4096)); !errors.Is(err, ErrNoPath) {
		t.Fatalf("Read with no live path = %v", err)
	}
}
