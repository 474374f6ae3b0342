package target

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"basalt/pkg/nvme"
)

// collect waits for n completions on q in any order and returns them by
// request; every one must have completed exactly once.
func (q *fakeQueue) collect(tb testing.TB, n int) map[*Request]nvme.Completion {
	tb.Helper()
	out := make(map[*Request]nvme.Completion, n)
	for range n {
		select {
		case r := <-q.done:
			if q.completed[r.Slot].Load() != 1 {
				tb.Errorf("slot %d completed %d times", r.Slot, q.completed[r.Slot].Load())
			}
			out[r] = r.Cpl
		case <-time.After(waitLimit):
			tb.Errorf("%d of %d completions", len(out), n)
			return out
		}
	}
	return out
}

// Many controllers and queues at once, each with several commands in
// flight, while the configuration changes underneath (ANA states,
// namespaces, discovery ports, hosts) and status is read. Run with -race.
func TestConcurrency(t *testing.T) {
	env := newEnv(t)
	const ctrls, queues, batches, depth = 4, 4, 20, 8
	var as []*assoc
	for range ctrls {
		a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 5000)
		a.connectIO(queues, 31)
		as = append(as, a)
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() { // configuration churn that must not disturb the I/O
		defer churn.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			env.tgt.SetANAState(2, 1, []nvme.ANAState{nvme.ANAInaccessible, nvme.ANAOptimized}[i%2])
			if err := env.sub.AddNamespace(NamespaceConfig{NSID: 9, Backend: newMemBackend(1<<16, 512)}); err != nil {
				t.Error(err)
				return
			}
			env.tgt.SetRemoteSubsystems([]RemoteSubsystem{{NQN: testSubNQN, AllowAnyHost: true,
				Ports: []PortConfig{{ID: uint16(100 + i%3), TRADDR: "198.51.100.7", TRSVCID: "4420"}}}})
			env.sub.AllowHost(testHostB)
			_ = env.tgt.Stats()
			_ = env.tgt.Controllers()
			if err := env.sub.RemoveNamespace(9); err != nil {
				t.Error(err)
				return
			}
			env.sub.DisallowHost(testHostB)
		}
	}()
	var wg sync.WaitGroup
	for ci, a := range as {
		// Admin traffic alongside.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range batches {
				a.admin.mustDo(t, identifyCmd(nvme.CNSNamespace, 1, 0), nil)
				a.admin.mustDo(t, getLogCmd(nvme.LogANA, 0, false, nvme.NSIDAll, 4096, 0), nil)
			}
		}()
		for qi, q := range a.io {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each queue owns 8 LBAs per in-flight slot of namespace 1.
				base := uint64((ci*queues+qi)*depth) * 8
				for b := range batches {
					seed := byte(ci*31 + qi*7 + b)
					for i := range depth {
						w := rwCmd(nvme.IOWrite, 1, base+uint64(i)*8, 7, 512)
						if _, ok := q.start(t, w, pattern(4096, seed+byte(i))); !ok {
							t.Error("write refused")
						}
					}
					for r, cpl := range q.collect(t, depth) {
						if !cpl.Status.Success() {
							t.Errorf("write: %v", cpl.Status)
						}
						q.free <- r.Slot
					}
					for i := range depth {
						q.start(t, rwCmd(nvme.IORead, 1, base+uint64(i)*8, 7, 512), nil)
					}
					for r, cpl := range q.collect(t, depth) {
						i := (r.Cmd.SLBA() - base) / 8
						if !cpl.Status.Success() || !bytes.Equal(r.Data[:r.DataLen], pattern(4096, seed+byte(i))) {
							t.Errorf("read LBA %d: %v", r.Cmd.SLBA(), cpl.Status)
						}
						q.free <- r.Slot
					}
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	// Connect and disconnect churn: every controller goes cleanly.
	var cw sync.WaitGroup
	for i := range 8 {
		cw.Add(1)
		go func() {
			defer cw.Done()
			d := env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, env.ports[i%2], 0)
			readDiscoveryLogQuiet(t, d.admin)
			d.admin.sq.Release()
		}()
	}
	cw.Wait()
	for _, a := range as {
		a.admin.sq.Release()
		for _, q := range a.io {
			waitClosed(t, q)
			q.sq.Release()
		}
	}
	st := env.tgt.Stats()
	if st.Controllers != 0 || st.DiscoveryControllers != 0 || st.DoubleCompletions != 0 {
		t.Fatalf("stats after teardown %+v", st)
	}
	if want := uint64(ctrls * queues * batches * depth); st.ReadCommands != want || st.WriteCommands != want {
		t.Fatalf("stats %+v, want %d reads and writes", st, want)
	}
}

// readDiscoveryLogQuiet reads the discovery header from any goroutine.
func readDiscoveryLogQuiet(t *testing.T, q *fakeQueue) {
	cpl, _ := q.do(t, getLogCmd(nvme.LogDiscovery, 0, false, 0, 1024, 0), nil)
	if !cpl.Status.Success() {
		t.Error(fmt.Errorf("discovery log: %v", cpl.Status))
	}
}
