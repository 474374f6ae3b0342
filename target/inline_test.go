package target

import (
	"bytes"
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
)

// declaredBackend is a memBackend that answers NonBlocking (NonBlocker).
type declaredBackend struct {
	*memBackend
	nonBlocking bool
}

func (b declaredBackend) NonBlocking() bool { return b.nonBlocking }

// withNamespace3 adds NSID 3 on be to the test subsystem.
func withNamespace3(be backend.Backend) func(*Config, *SubsystemConfig) {
	return func(_ *Config, sc *SubsystemConfig) {
		sc.Namespaces = append(sc.Namespaces,
			NamespaceConfig{NSID: 3, Backend: be, NGUID: [16]byte{3, 3}, UUID: [16]byte{0xA, 3}})
	}
}

// I/O on a namespace whose backend is a NonBlocker answering true
// completes inside Execute, on the caller's goroutine, no queue worker is
// started, and DoneWithDataOnReturn says so; a backend answering false, or
// without the method, gets a worker. Either way the data and the
// completions are the same.
func TestNonBlockingBackendRunsInline(t *testing.T) {
	mem, err := backend.NewMemory(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		be     backend.Backend
		inline bool
	}{
		{"Memory", mem, true},
		{"declares non-blocking", declaredBackend{newMemBackend(1<<20, 512), true}, true},
		{"declares blocking", declaredBackend{newMemBackend(1<<20, 512), false}, false},
		{"no capability", newMemBackend(1<<20, 512), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, withNamespace3(tc.be))
			a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
			a.connectIO(1, 31)
			q := a.io[0]
			flush := newCmd(nvme.IOFlush)
			flush.SetNSID(3)
			for i, cmd := range []nvme.Command{
				rwCmd(nvme.IOWrite, 3, 8, 7, 512),
				rwCmd(nvme.IORead, 3, 8, 7, 512),
				flush,
			} {
				r := q.slot(t)
				r.Cmd = cmd
				if !q.sq.Init(r) {
					t.Fatalf("command %d refused: %v", i, r.Cpl.Status)
				}
				if q.sq.DoneWithDataOnReturn(r) != tc.inline {
					t.Fatalf("command %d: DoneWithDataOnReturn %v", i, !tc.inline)
				}
				if r.Dir == DirH2C {
					copy(r.Data, pattern(4096, 9))
				}
				q.sq.Execute(r)
				if tc.inline && q.completed[r.Slot].Load() != 1 {
					t.Fatalf("command %d: not completed when Execute returned", i)
				}
				cpl, data := q.wait(t, r)
				if !cpl.Status.Success() {
					t.Fatalf("command %d: %v", i, cpl.Status)
				}
				if cmd.Opcode() == nvme.IORead && !bytes.Equal(data, pattern(4096, 9)) {
					t.Fatalf("read back wrong data")
				}
			}
			if workers := q.sq.workers.Load(); (workers == 0) != tc.inline {
				t.Fatalf("%d workers started, inline %v", workers, tc.inline)
			}
		})
	}
}

// A backend error on an inline command goes through the normal completion
// path (status mapping, error log) before Execute returns. Only I/O
// commands are reported inline (may be lent data).
func TestNonBlockingBackendErrorsInline(t *testing.T) {
	m := newMemBackend(1<<20, 512)
	env := newEnv(t, withNamespace3(declaredBackend{m, true}))
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
	a.connectIO(1, 31)
	m.setErr(backend.ErrMedia)
	r, ok := a.io[0].start(t, rwCmd(nvme.IORead, 3, 0, 0, 512), nil)
	if !ok || a.io[0].completed[r.Slot].Load() != 1 {
		t.Fatal("read not completed inside Execute")
	}
	cpl, _ := a.io[0].wait(t, r)
	expectStatus(t, "media error", cpl, nvme.StatusUnrecoveredReadError)
	if !env.sub.Namespace(3).inline || env.sub.Namespace(1).inline {
		t.Fatal("inline flag not taken from the backend")
	}
	// Fabrics and admin commands run inline too, but are never lent data.
	id := a.admin.slot(t)
	id.Cmd = identifyCmd(nvme.CNSNamespace, 3, 0)
	if !a.admin.sq.Init(id) || a.admin.sq.DoneWithDataOnReturn(id) {
		t.Fatal("admin command reported as an inline I/O command")
	}
	a.admin.sq.Execute(id)
	a.admin.wait(t, id)
}
