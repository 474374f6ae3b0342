package target

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
)

// asyncBackend is a memBackend whose writes are also offered asynchronously
// (backend.AsyncWriter): WriteAtAsync parks each write until release, then
// completes it from another goroutine, the way a replicated volume does
// from its Raft loop.
type asyncBackend struct {
	*memBackend
	mu      sync.Mutex
	parked  []func()
	started chan struct{}
	// copies: WriteAtAsync copies p before it returns and says so
	// (backend.SubmitCopier); otherwise it keeps p until the write runs.
	copies bool
}

func newAsyncBackend() *asyncBackend {
	return &asyncBackend{memBackend: newMemBackend(1<<20, 512), started: make(chan struct{}, 64)}
}

func (b *asyncBackend) AsyncWrites() bool    { return true }
func (b *asyncBackend) CopiesOnSubmit() bool { return b.copies }

func (b *asyncBackend) WriteAtAsync(p []byte, off int64, f backend.WriteFlags, done func(error)) {
	if b.copies {
		p = bytes.Clone(p)
	}
	b.mu.Lock()
	b.parked = append(b.parked, func() { done(b.WriteAt(context.Background(), p, off, f)) })
	b.mu.Unlock()
	b.started <- struct{}{}
}

// release completes every parked write from a goroutine of its own.
func (b *asyncBackend) release() {
	b.mu.Lock()
	parked := b.parked
	b.parked = nil
	b.mu.Unlock()
	go func() {
		for _, f := range parked {
			f()
		}
	}()
}

// A write on a namespace whose backend is an AsyncWriter starts inside
// Execute, holds no queue worker while the backend works, and completes when
// the backend calls back: with the data in place, or with the status its
// error maps to. Reads still go to a worker.
func TestAsyncWriterWritesCompleteOnCallback(t *testing.T) {
	be := newAsyncBackend()
	env := newEnv(t, withNamespace3(be))
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
	a.connectIO(1, 31)
	q := a.io[0]
	var writes []*Request
	for i := range 4 {
		r := q.slot(t)
		r.Cmd = rwCmd(nvme.IOWrite, 3, uint64(8*i), 7, 512)
		if !q.sq.Init(r) {
			t.Fatalf("write %d refused: %v", i, r.Cpl.Status)
		}
		if q.sq.DoneWithDataOnReturn(r) {
			t.Fatal("an asynchronous write may not be lent the transport's buffer")
		}
		copy(r.Data, pattern(4096, byte(i)))
		q.sq.Execute(r)
		<-be.started
		if q.completed[r.Slot].Load() != 0 {
			t.Fatalf("write %d completed before the backend called back", i)
		}
		writes = append(writes, r)
	}
	if w := q.sq.workers.Load(); w != 0 {
		t.Fatalf("%d queue workers started for asynchronous writes", w)
	}
	be.release()
	for i, r := range writes {
		cpl, _ := q.wait(t, r)
		if !cpl.Status.Success() {
			t.Fatalf("write %d: %v", i, cpl.Status)
		}
	}
	for i := range 4 {
		r, _ := q.start(t, rwCmd(nvme.IORead, 3, uint64(8*i), 7, 512), nil)
		if _, data := q.wait(t, r); !bytes.Equal(data, pattern(4096, byte(i))) {
			t.Fatalf("block run %d reads back wrong data", i)
		}
	}

	// An error from the backend maps like a synchronous one.
	be.setErr(backend.ErrNoSpace)
	r, _ := q.start(t, rwCmd(nvme.IOWrite, 3, 0, 7, 512), pattern(4096, 1))
	<-be.started
	be.release()
	cpl, _ := q.wait(t, r)
	expectStatus(t, "no space", cpl, nvme.StatusCapacityExceeded)
	if n := q.sq.counters.writeCmds.Load(); n != 5 {
		t.Fatalf("%d write commands counted, want 5", n)
	}
}

func TestAsAsyncWriterNeedsTheCapability(t *testing.T) {
	if _, ok := backend.AsAsyncWriter(newMemBackend(1<<20, 512)); ok {
		t.Fatal("a backend without WriteAtAsync taken as an AsyncWriter")
	}
	if _, ok := backend.AsAsyncWriter(newAsyncBackend()); !ok {
		t.Fatal("an AsyncWriter not recognized")
	}
}

// A write on an asynchronous backend that copies on submit
// (backend.CopiesOnSubmit) is done with r.Data when Execute returns, though
// it completes later: DoneWithDataOnReturn says so, and data overwritten
// right after Execute (a transport reusing its read buffer) is not what is
// written. Reads and flushes on it, which run on a worker, are not.
func TestAsyncWriterCopyingOnSubmitIsDoneWithData(t *testing.T) {
	be := newAsyncBackend()
	be.copies = true
	env := newEnv(t, withNamespace3(be))
	if ns := env.sub.Namespace(3); !ns.copiesOnSubmit || ns.aw == nil {
		t.Fatal("the namespace did not take copies-on-submit from its backend")
	}
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
	a.connectIO(1, 31)
	q := a.io[0]
	var writes []*Request
	for i := range 4 {
		r := q.slot(t)
		r.Cmd = rwCmd(nvme.IOWrite, 3, uint64(8*i), 7, 512)
		if !q.sq.Init(r) {
			t.Fatalf("write %d refused: %v", i, r.Cpl.Status)
		}
		if !q.sq.DoneWithDataOnReturn(r) {
			t.Fatalf("write %d: the core keeps the data of a write its backend copies on submit", i)
		}
		copy(r.Data, pattern(4096, byte(i+1)))
		q.sq.Execute(r)
		<-be.started
		copy(r.Data, pattern(4096, 0xEE)) // reused once Execute returned
		writes = append(writes, r)
	}
	be.release()
	for i, r := range writes {
		if cpl, _ := q.wait(t, r); !cpl.Status.Success() {
			t.Fatalf("write %d: %v", i, cpl.Status)
		}
	}
	flush := newCmd(nvme.IOFlush)
	flush.SetNSID(3)
	for _, cmd := range []nvme.Command{rwCmd(nvme.IORead, 3, 0, 7, 512), flush} {
		r := q.slot(t)
		r.Cmd = cmd
		if !q.sq.Init(r) || q.sq.DoneWithDataOnReturn(r) {
			t.Fatalf("opcode %#x reported done with its data on return (or refused: %v)", cmd.Opcode(), r.Cpl.Status)
		}
		q.sq.Execute(r)
		q.wait(t, r)
	}
	for i := range 4 {
		r, _ := q.start(t, rwCmd(nvme.IORead, 3, uint64(8*i), 7, 512), nil)
		if _, data := q.wait(t, r); !bytes.Equal(data, pattern(4096, byte(i+1))) {
			t.Fatalf("block run %d reads back wrong data", i)
		}
	}
}

// nonBlockingAsync is an asyncBackend that also says it never blocks
// (NonBlocker), as one embedding backend.Memory does.
type nonBlockingAsync struct{ *asyncBackend }

func (nonBlockingAsync) NonBlocking() bool { return true }

// On a NonBlocker that is also an AsyncWriter, a write is started
// asynchronously and is done with its data on return only if the backend
// copies on submit; its reads, executed inline, are.
func TestNonBlockingAsyncWriterKeepsWriteData(t *testing.T) {
	for _, copies := range []bool{false, true} {
		be := newAsyncBackend()
		be.copies = copies
		env := newEnv(t, withNamespace3(nonBlockingAsync{be}))
		a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
		a.connectIO(1, 31)
		q := a.io[0]
		for _, tc := range []struct {
			cmd  nvme.Command
			done bool
		}{{rwCmd(nvme.IOWrite, 3, 0, 7, 512), copies}, {rwCmd(nvme.IORead, 3, 0, 7, 512), true}} {
			r := q.slot(t)
			r.Cmd = tc.cmd
			if !q.sq.Init(r) {
				t.Fatalf("opcode %#x refused: %v", tc.cmd.Opcode(), r.Cpl.Status)
			}
			if got := q.sq.DoneWithDataOnReturn(r); got != tc.done {
				t.Fatalf("copies %v, opcode %#x: DoneWithDataOnReturn %v, want %v", copies, tc.cmd.Opcode(), got, tc.done)
			}
			q.sq.Execute(r)
			if r.Dir == DirH2C {
				<-be.started
				be.release()
			}
			q.wait(t, r)
		}
	}
}
