package tcp

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/nvme"
	"basalt/target"
)

// Teardown against the real core (issue 14, finding 2): whatever state a
// command is in when its connection ends (waiting for H2C data after its
// R2T, in the backend, its response queued to send), it completes once in
// the core, which releases its namespace reference, and its slot and
// buffer are given back; removing the namespace then finishes at once, or
// within the drain bound when the backend itself holds a command.

const mib = 1 << 20

// liveTarget is a real core on a manual clock behind a Listener.
type liveTarget struct {
	t     *target.Target
	sub   *target.Subsystem
	l     *Listener
	clock *clock.Manual
}

func startLiveTarget(t *testing.T, cfg target.Config, be backend.Backend, opts Options) *liveTarget {
	t.Helper()
	lt := &liveTarget{clock: clock.NewManual(time.Unix(1000, 0))}
	cfg.Clock = lt.clock
	var err error
	if lt.t, err = target.New(cfg); err != nil {
		t.Fatal(err)
	}
	lt.sub, err = lt.t.AddSubsystem(target.SubsystemConfig{NQN: itSubNQN, AllowAnyHost: true,
		Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: be}}})
	if err != nil {
		t.Fatal(err)
	}
	port, err := lt.t.AddPort(target.PortConfig{ID: 1, TRADDR: "127.0.0.1", TRSVCID: "4420"})
	if err != nil {
		t.Fatal(err)
	}
	if lt.l, err = Listen(lt.t, port, "127.0.0.1:0", opts); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- lt.l.Serve() }()
	t.Cleanup(func() {
		lt.l.Close()
		lt.l.Wait()
		<-served
		lt.t.Close()
	})
	return lt
}

// connectIO connects an enabled controller's admin queue and one I/O
// queue of SQSIZE sqsize.
func (lt *liveTarget) connectIO(t *testing.T, sqsize uint16) (admin, io *testHost) {
	t.Helper()
	rt := &realTarget{l: lt.l}
	admin = rt.dial(t, 0)
	cntlid := admin.connectCtrl(0, 31, nvme.CNTLIDDynamic, 0)
	const cc = 4<<20 | 6<<16
	admin.propertySet(nvme.PropCC, cc|1)
	waitFor(t, func() bool { return admin.propertyGet(nvme.PropCSTS, false)&1 != 0 })
	io = rt.dial(t, 0)
	io.connectCtrl(1, sqsize, cntlid, 0)
	return admin, io
}

// conns returns the number of connections the Listener serves.
func (lt *liveTarget) conns() int {
	lt.l.mu.Lock()
	defer lt.l.mu.Unlock()
	return len(lt.l.mu.conns)
}

// writeCmd is a Write of n bytes at slba on NSID 1 moved by R2T.
func writeCmd(h *testHost, slba uint64, n int) nvme.Command {
	c := rwCmd(h, nvme.IOWrite, slba, n/itLBA, nvme.SGLTransportDataBlock)
	c.SetNSID(1)
	return c
}

// sendData sends data[from:to] of an R2T's transfer in 64 KiB H2CData PDUs.
func sendData(h *testHost, c *nvme.Command, r2t nvme.DataHeader, data []byte, from, to int) {
	var b bytes.Buffer
	for off := from; off < to; off += 64 << 10 {
		end := min(off+64<<10, to)
		b.Write(h.h2cData(c.CID(), r2t.TTAG, uint32(off), data[off:end], end == len(data)))
	}
	h.write(b.Bytes())
}

// removeNamespace runs RemoveNamespace(1) and returns its error and how
// much manual time it needed, advancing the clock by step while it waits
// (step 0: never). It fails the test if it has not returned after 10 s of
// real time: a removal waiting for a reference nobody will release.
func (lt *liveTarget) removeNamespace(t *testing.T, step time.Duration) (error, time.Duration) {
	t.Helper()
	start := lt.clock.Now()
	done := make(chan error, 1)
	go func() { done <- lt.sub.RemoveNamespace(1) }()
	limit := time.After(10 * time.Second)
	for {
		select {
		case err := <-done:
			return err, lt.clock.Now().Sub(start)
		case <-limit:
			t.Fatalf("RemoveNamespace has not returned after %v of manual time", lt.clock.Now().Sub(start))
		case <-time.After(time.Millisecond):
			if step > 0 {
				lt.clock.Advance(step)
			}
		}
	}
}

// checkReleased checks that nothing holds the namespace or a buffer.
func checkReleased(t *testing.T, ns *target.Namespace, b *Budget) {
	t.Helper()
	waitFor(t, func() bool { s := b.Stats(); return s.WriteBytes == 0 && s.ReadBytes == 0 })
	if n := ns.InFlight(); n != 0 {
		t.Fatalf("%d commands still hold the namespace", n)
	}
}

// A host writes 1 MiB (Linux sends every write over 8 KiB by R2T), gets
// the R2T, sends none or part of the data, and drops the connection: the
// write is aborted in the core, so the namespace is released and removing
// it needs no wait at all (the manual clock never moves).
func TestDroppedHostMidWriteReleasesNamespace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes int
		sent   int // bytes of each write sent before the drop
	}{
		{"no data", 1, 0},
		{"part of the data", 1, 320 << 10},
		{"four writes", 4, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoGoroutineLeaks(t)
			be, _ := backend.NewMemory(16*mib, itLBA)
			lt := startLiveTarget(t, target.Config{MDTS: 8}, be, testOptions()) // MDTS 1 MiB
			_, io := lt.connectIO(t, 31)
			data := pattern(mib, 7)
			for i := range tc.writes {
				c := writeCmd(io, uint64(i)*mib/itLBA, mib)
				io.sendCapsule(&c, nil)
				r2t := io.expectR2T(c.CID())
				sendData(io, &c, r2t, data, 0, tc.sent)
			}
			ns := lt.sub.Namespace(1)
			if n := ns.InFlight(); n != int64(tc.writes) {
				t.Fatalf("%d commands hold the namespace before the drop, want %d", n, tc.writes)
			}
			io.c.Close()
			waitFor(t, func() bool { return lt.conns() == 1 }) // the admin queue's
			checkReleased(t, ns, lt.l.Budget())
			if err, took := lt.removeNamespace(t, 0); err != nil || took != 0 {
				t.Fatalf("RemoveNamespace: %v after %v", err, took)
			}
		})
	}
}

// A host that stays connected but never sends the data its R2T asked for
// does not hold a namespace removal: after half the drain timeout the
// subsystem's controllers are destroyed, the write is aborted, and the
// removal returns.
func TestRemoveNamespaceBoundedWithHostStalledMidWrite(t *testing.T) {
	checkNoGoroutineLeaks(t)
	be, _ := backend.NewMemory(16*mib, itLBA)
	lt := startLiveTarget(t, target.Config{MDTS: 8, DrainTimeout: 4 * time.Second}, be, testOptions())
	admin, io := lt.connectIO(t, 31)
	c := writeCmd(io, 0, mib)
	io.sendCapsule(&c, nil)
	io.expectR2T(c.CID())
	ns := lt.sub.Namespace(1)
	err, took := lt.removeNamespace(t, 100*time.Millisecond)
	if err != nil || took < 2*time.Second || took > 4*time.Second {
		t.Fatalf("RemoveNamespace: %v after %v, want nil after 2 s to 4 s", err, took)
	}
	io.expectClosed()
	admin.expectClosed()
	checkReleased(t, ns, lt.l.Budget())
}

// parkingBackend is a memory backend whose writes are asynchronous, as a
// replicated volume's are, and wait in the backend until release.
type parkingBackend struct {
	*backend.Memory
	mu      sync.Mutex
	parked  []func()
	started chan struct{}
}

func newParkingBackend() *parkingBackend {
	m, _ := backend.NewMemory(16*mib, itLBA)
	return &parkingBackend{Memory: m, started: make(chan struct{}, 64)}
}

func (b *parkingBackend) AsyncWrites() bool { return true }

func (b *parkingBackend) WriteAtAsync(p []byte, off int64, f backend.WriteFlags, done func(error)) {
	b.mu.Lock()
	b.parked = append(b.parked, func() { done(b.WriteAt(context.Background(), p, off, f)) })
	b.mu.Unlock()
	b.started <- struct{}{}
}

// release completes the parked writes from a goroutine of its own.
func (b *parkingBackend) release() {
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

// A write whose backend call is in flight when the host drops: the
// connection's teardown waits for it (the backend still reads its
// buffer), the namespace removal returns ErrDrainTimeout within the drain
// bound instead of waiting for the backend, and once the backend calls
// back the write completes once: the namespace and its buffer are
// released.
func TestRemoveNamespaceBoundedWithWriteInBackend(t *testing.T) {
	checkNoGoroutineLeaks(t)
	be := newParkingBackend()
	lt := startLiveTarget(t, target.Config{DrainTimeout: 4 * time.Second}, be, testOptions())
	_, io := lt.connectIO(t, 31)
	data := pattern(128<<10, 3)
	c := writeCmd(io, 0, len(data))
	io.sendCapsule(&c, nil)
	sendData(io, &c, io.expectR2T(c.CID()), data, 0, len(data))
	<-be.started
	io.c.Close()
	ns := lt.sub.Namespace(1)
	err, took := lt.removeNamespace(t, 100*time.Millisecond)
	if !errors.Is(err, target.ErrDrainTimeout) || took < 4*time.Second || took > 4*time.Second+200*time.Millisecond {
		t.Fatalf("RemoveNamespace: %v after %v, want ErrDrainTimeout after 4 s", err, took)
	}
	if n := ns.InFlight(); n != 1 {
		t.Fatalf("%d commands hold the namespace while the backend has the write, want 1", n)
	}
	be.release()
	waitFor(t, func() bool { return lt.conns() == 0 })
	checkReleased(t, ns, lt.l.Budget())
	got := make([]byte, len(data))
	if err := be.ReadAt(context.Background(), got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the write in the backend did not complete: %v", err)
	}
}

// Reads whose responses are queued to send when the host drops (it never
// read them, so the sender is stuck on a full socket): the sender's write
// fails, every slot and read buffer is given back, once, and nothing holds
// the namespace.
func TestDroppedHostWithResponsesQueuedReleasesEverything(t *testing.T) {
	checkNoGoroutineLeaks(t)
	be, _ := backend.NewMemory(16*mib, itLBA)
	lt := startLiveTarget(t, target.Config{}, be, testOptions())
	_, io := lt.connectIO(t, 127)
	var burst bytes.Buffer
	for i := range 128 {
		r := rwCmd(io, nvme.IORead, uint64(i)*256, 256, nvme.SGLTransportDataBlock) // 128 KiB each
		r.SetNSID(1)
		burst.Write(io.capsule(&r, nil))
	}
	io.write(burst.Bytes())
	b := lt.l.Budget()
	// 16 MiB of responses cannot all fit the sockets' buffers: some stay
	// queued, holding their read buffers.
	waitFor(t, func() bool { return lt.t.Stats().ReadCommands == 128 })
	if s := b.Stats(); s.ReadBytes == 0 {
		t.Fatalf("no read buffer held with 16 MiB of responses unread: %+v", s)
	}
	io.c.Close()
	waitFor(t, func() bool { return lt.conns() == 1 })
	checkReleased(t, lt.sub.Namespace(1), b)
	if err, took := lt.removeNamespace(t, 0); err != nil || took != 0 {
		t.Fatalf("RemoveNamespace: %v after %v", err, took)
	}
}

// A fatal transport error on an admin queue sends its C2HTermReq before
// the connection closes, as on an I/O queue, although releasing the admin
// queue destroys the controller, which closes its connections.
func TestAdminQueueFatalErrorSendsTermReq(t *testing.T) {
	checkNoGoroutineLeaks(t)
	be, _ := backend.NewMemory(16*mib, itLBA)
	lt := startLiveTarget(t, target.Config{}, be, testOptions())
	admin, io := lt.connectIO(t, 31)
	bad := make([]byte, nvme.CommonHeaderSize)
	bad[0] = 0x7F // no such PDU type: FES 01h at the type
	bad[2], bad[4] = nvme.CommonHeaderSize, nvme.CommonHeaderSize
	admin.write(bad)
	admin.expectTermReq(nvme.FESInvalidHeaderField, nvme.OffsetType)
	io.expectClosed()
}
