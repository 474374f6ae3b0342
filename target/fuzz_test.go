package target

import (
	"context"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
)

// Queue states a fuzzed command is submitted in.
const (
	fuzzUnconnected = iota
	fuzzAdminDisabled
	fuzzAdmin
	fuzzIO
	fuzzDiscovery
	fuzzModes
)

// FuzzExecuteCommand submits an arbitrary SQE with arbitrary data to a
// queue in one of several states. Init/Execute must not panic, and the
// command must complete exactly once: at once, later, or at the latest when
// the association is torn down (an AER).
func FuzzExecuteCommand(f *testing.F) {
	seeds := []nvme.Command{
		connectCmd(0, 31, 5000, 0), connectCmd(1, 31, 0, 0),
		propGetCmd(nvme.PropCAP, true), propSetCmd(nvme.PropCC, 0x00460001|1<<14),
		identifyCmd(nvme.CNSController, 0, 0), identifyCmd(nvme.CNSNSDescriptorList, 1, 0),
		getLogCmd(nvme.LogANA, 1, false, nvme.NSIDAll, 4096, 0), getLogCmd(nvme.LogDiscovery, 0, false, 0, 4096, 1024),
		getLogCmd(nvme.LogError, 0, false, 0, 4096, 64),
		setFeatCmd(nvme.FeatNumberOfQueues, 0xFFFF), setFeatCmd(nvme.FeatKeepAliveTimer, 1),
		newCmd(nvme.AdminAsyncEventReq), newCmd(nvme.AdminKeepAlive), newCmd(nvme.AdminAbort),
		rwCmd(nvme.IORead, 1, 0, 7, 512), rwCmd(nvme.IOWrite, 2, 511, 0, 4096),
		rwCmd(nvme.IODatasetMgmt, 1, 0, 7, 512), rwCmd(nvme.IOWriteZeroes, 1, 0, 0xFFFF, 0),
	}
	data := connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN)
	for i, c := range seeds {
		for mode := range fuzzModes {
			if (i+mode)%2 == 0 {
				f.Add(uint8(mode), c[:], data)
			}
		}
	}
	shared := newEnv(f)
	f.Fuzz(func(t *testing.T, mode uint8, sqe []byte, payload []byte) {
		env := shared.with(t)
		var cmd nvme.Command
		copy(cmd[:], sqe)
		var a *assoc
		var q *fakeQueue
		switch mode % fuzzModes {
		case fuzzUnconnected:
			q = newFakeQueue(env.tgt, env.ports[0])
		case fuzzAdminDisabled:
			q = newFakeQueue(env.tgt, env.ports[0])
			q.mustDo(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
		case fuzzAdmin:
			a = env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 0)
			q = a.admin
		case fuzzIO:
			a = env.connectAdmin(testSubNQN, testHostNQN, env.ports[1], 0)
			a.connectIO(1, 63)
			q = a.io[0]
		case fuzzDiscovery:
			a = env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, env.ports[0], 0)
			q = a.admin
		}
		r := q.slot(t)
		r.Cmd = cmd
		if q.sq.Init(r) {
			if r.TransferLen > uint32(cap(r.Data)) || (r.Dir == DirNone) != (r.TransferLen == 0) {
				t.Fatalf("Init accepted Dir %d TransferLen %d (cap %d)", r.Dir, r.TransferLen, cap(r.Data))
			}
			if r.Dir == DirH2C {
				clear(r.Data[:r.TransferLen])
				copy(r.Data[:r.TransferLen], payload)
			}
			q.sq.Execute(r)
		}
		// Tear everything down; a parked AER completes now.
		release := []*fakeQueue{q}
		if a != nil {
			release = append(a.io, a.admin)
		}
		for _, x := range release {
			x.sq.Release()
		}
		select {
		case got := <-q.done:
			if got != r {
				t.Fatal("completion for another request")
			}
		case <-time.After(waitLimit):
			t.Fatalf("command %x never completed", cmd[:8])
		}
		if n := q.completed[r.Slot].Load(); n != 1 {
			t.Fatalf("completed %d times", n)
		}
		if r.Cpl.CID != cmd.CID() {
			t.Fatalf("CID %#x echoed as %#x", cmd.CID(), r.Cpl.CID)
		}
		if !r.Cpl.Status.Success() && r.DataLen != 0 {
			t.Fatal("failed command with data")
		}
		select {
		case <-q.done:
			t.Fatal("second completion")
		default:
		}
		if d := env.tgt.Stats().DoubleCompletions; d != 0 {
			t.Fatalf("%d double completions", d)
		}
	})
}

// benchQueue returns an I/O queue of a connected controller.
func benchQueue(b *testing.B, env *testEnv, port int) *fakeQueue {
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[port], 0)
	a.connectIO(1, 127)
	return a.io[0]
}

// BenchmarkDispatch measures Init + Execute + completion of a 4 KiB read
// or write, one command in flight: on a blocking backend (the hand-off to
// the queue worker included) and on a NonBlocker (backend.Memory, executed
// inline). The steady state must not allocate.
func BenchmarkDispatch(b *testing.B) {
	mem, err := backend.NewMemory(2<<20, 4096)
	if err != nil {
		b.Fatal(err)
	}
	for _, path := range []struct {
		name string
		nsid uint32
	}{{"worker", 2}, {"inline", 3}} {
		for _, op := range []nvme.Opcode{nvme.IORead, nvme.IOWrite} {
			name := path.name + "/" + map[nvme.Opcode]string{nvme.IORead: "read-4k", nvme.IOWrite: "write-4k"}[op]
			b.Run(name, func(b *testing.B) { benchmarkDispatch(b, withNamespace3(mem), rwCmd(op, path.nsid, 7, 0, 4096)) })
		}
	}
	b.Run("async/write-4k", func(b *testing.B) {
		benchmarkDispatch(b, withNamespace3(immediateAsync{mem}), rwCmd(nvme.IOWrite, 3, 7, 0, 4096))
	})
}

// immediateAsync offers a backend's writes asynchronously
// (backend.AsyncWriter), completing each before WriteAtAsync returns: the
// target's side of the asynchronous write path, alone.
type immediateAsync struct{ backend.Backend }

func (b immediateAsync) AsyncWrites() bool { return true }

func (b immediateAsync) WriteAtAsync(p []byte, off int64, f backend.WriteFlags, done func(error)) {
	done(b.WriteAt(context.Background(), p, off, f))
}

// benchmarkDispatch runs cmd to completion b.N times on a fresh I/O queue.
func benchmarkDispatch(b *testing.B, mutate func(*Config, *SubsystemConfig), cmd nvme.Command) {
	env := newEnv(b, mutate)
	q := benchQueue(b, env, 0)
	r := q.slot(b)
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r.Cmd = cmd
		if !q.sq.Init(r) {
			b.Fatal("Init refused")
		}
		q.sq.Execute(r)
		<-q.done
	}
	b.StopTimer()
	if !r.Cpl.Status.Success() {
		b.Fatal(r.Cpl.Status)
	}
}

// BenchmarkDispatchParallel runs one queue per goroutine (as one TCP
// connection per CPU does), one 4 KiB read in flight each.
func BenchmarkDispatchParallel(b *testing.B) {
	env := newEnv(b)
	b.SetBytes(4096)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		q := benchQueue(b, env, 0)
		r := q.slot(b)
		cmd := rwCmd(nvme.IORead, 2, 7, 0, 4096)
		for pb.Next() {
			r.Cmd = cmd
			q.sq.Init(r)
			q.sq.Execute(r)
			<-q.done
		}
	})
}
