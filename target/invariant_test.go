package target

import (
	"testing"

	"basalt/pkg/invariant"
	"basalt/pkg/invariant/invarianttest"
	"basalt/pkg/nvme"
)

// The core's broken invariants go through pkg/invariant (issue 14 part 7):
// a panic at the bug in tests, and in production a violation counted and
// contained to the one command: a second completion is dropped, an Execute
// of a request that is not active does nothing, and a command without a
// handler or whose slot is smaller than its transfer fails with Internal
// Error.
func TestCoreInvariants(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	q := a.io[0]

	r, _ := q.start(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
	q.wait(t, r)
	slot := r.Slot
	invarianttest.Expect(t, "completed twice", func() { q.sq.complete(r, nvme.StatusInternalError) })
	if n := q.completed[slot].Load(); n != 1 {
		t.Fatalf("a second completion reached the transport: %d responses", n)
	}
	if d := env.tgt.Stats().DoubleCompletions; d != 1 {
		t.Fatalf("DoubleCompletions %d", d)
	}
	invarianttest.Expect(t, "Execute of a request", func() { q.sq.Execute(r) })
	if n := q.completed[slot].Load(); n != 1 {
		t.Fatalf("Execute of a completed request completed it again: %d responses", n)
	}

	r = q.slot(t)
	r.Cmd = rwCmd(nvme.IORead, 1, 0, 0, 512)
	if !q.sq.Init(r) {
		t.Fatal(r.Cpl.Status)
	}
	r.execute = nil
	invarianttest.Expect(t, "without a handler", func() { q.sq.Execute(r) })
	if !invariant.Enabled {
		cpl, _ := q.wait(t, r)
		expectStatus(t, "no handler", cpl, nvme.StatusInternalError)
	}

	r = q.slot(t)
	r.Data = make([]byte, 512)
	r.Cmd = rwCmd(nvme.IORead, 1, 0, 7, 512)
	invarianttest.Expect(t, "transport buffer of 512 bytes", func() {
		if q.sq.Init(r) {
			t.Error("Init accepted a transfer larger than the slot's buffer")
		}
	})
	if !invariant.Enabled {
		cpl, _ := q.wait(t, r)
		expectStatus(t, "small buffer", cpl, nvme.StatusInternalError)
	}
}
