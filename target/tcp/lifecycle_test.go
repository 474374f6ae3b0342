package tcp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/invariant"
	"basalt/pkg/nvme"
)

// Queue depth, teardown and listener behaviour.

// A queue holds SQSIZE+1 commands at once; the Linux host reuses a CID right
// after its completion. 128 pipelined commands (reads and writes) on a queue
// of SQSIZE 127 all complete, each exactly once, whether the core completes
// them on other goroutines, inline in Execute (while the receiver is busy and
// the sender's wake-up deferred), or both.
func TestPipelines128Commands(t *testing.T) {
	for _, mode := range []struct {
		name      string
		configure func(*fakeCore)
	}{
		{"async", func(c *fakeCore) { c.async = true }},
		{"inline", func(c *fakeCore) { c.lend = true }},
		{"mixed", func(c *fakeCore) { c.mixed = true }},
	} {
		t.Run(mode.name, func(t *testing.T) { testPipelines128Commands(t, mode.configure) })
	}
}

func testPipelines128Commands(t *testing.T, configure func(*fakeCore)) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), configure)
	h, _ := s.dial(t)
	h.icreq(nvme.DigestHeader)
	h.connect(1, 127, 0)
	for round := range 3 {
		var buf bytes.Buffer
		want := map[uint16]bool{}
		for i := range 128 {
			op, id := nvme.IORead, nvme.SGLTransportDataBlock
			var icd []byte
			if i%2 == 1 {
				op, id, icd = nvme.IOWrite, nvme.SGLDataBlockOffset, pattern(1024, byte(i))
			}
			c := rwCmd(h, op, uint64(i*2), 2, id)
			buf.Write(h.capsule(&c, icd))
			want[c.CID()] = true
		}
		h.write(buf.Bytes())
		for len(want) > 0 {
			p := h.readPDU()
			var cid uint16
			switch p.ch.Type {
			case nvme.PDUC2HData:
				cid = nvme.DecodeDataHeader(p.hdr).CCCID
				if p.ch.Flags&nvme.FlagLastPDU == 0 || len(p.data) != 1024 {
					t.Fatalf("round %d: C2HData %+v with %d bytes", round, p.ch, len(p.data))
				}
				continue
			case nvme.PDUCapsuleResp:
				cpl := nvme.DecodeCompletion(p.hdr[8:])
				cid = cpl.CID
				if !cpl.Status.Success() {
					t.Fatalf("CID %d: %v", cid, cpl.Status)
				}
			default:
				t.Fatalf("unexpected %v", p.ch.Type)
			}
			if !want[cid] {
				t.Fatalf("round %d: completion for CID %d not outstanding", round, cid)
			}
			delete(want, cid)
		}
	}
}

// All Depth() commands can be outstanding at once: the slot set grows to
// Depth()+1 after Connect, so a correct host never waits for a slot.
func TestFullQueueDepthInFlight(t *testing.T) {
	checkNoGoroutineLeaks(t)
	hold := make(chan struct{})
	s := startServer(t, testOptions(), func(c *fakeCore) { c.hold.Store(&hold) })
	h, core := s.dial(t)
	h.icreq(0)
	close(hold) // let the Connect through
	h.connect(1, 99, 0)
	hold2 := make(chan struct{})
	core.hold.Store(&hold2)
	var buf bytes.Buffer
	cids := map[uint16]bool{}
	for range 100 {
		c := h.cmd(nvme.IOFlush, 0, nvme.SGLTransportDataBlock)
		buf.Write(h.capsule(&c, nil))
		cids[c.CID()] = true
	}
	h.write(buf.Bytes())
	waitFor(t, func() bool { return core.executed.Load() == 101 })
	close(hold2)
	for range 100 {
		p := h.readPDU()
		delete(cids, nvme.DecodeCompletion(p.hdr[8:]).CID)
	}
	if len(cids) != 0 {
		t.Fatalf("no completion for %v", cids)
	}
}

// A CID that is still outstanding cannot come from a correct host; a
// Command ID Conflict status would carry the same CID and complete the
// host's original command, so the connection is terminated (FES 02h).
func TestOutstandingCIDReuseTerminates(t *testing.T) {
	checkNoGoroutineLeaks(t)
	hold := make(chan struct{})
	s := startServer(t, testOptions(), nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	core.hold.Store(&hold)
	defer close(hold)
	c := h.cmd(nvme.IOFlush, 0, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	waitFor(t, func() bool { return core.executed.Load() == 2 })
	h.sendCapsule(&c, nil)
	h.expectTermReq(nvme.FESPDUSequenceError, 0)
}

// A host may not have more than SQSIZE+1 commands outstanding, nor anything
// besides the Connect before it completes: FES 02h. (Without this check a
// host could park every slot in "awaiting data" and stall the receiver.)
func TestCommandsBeyondQueueDepthTerminate(t *testing.T) {
	checkNoGoroutineLeaks(t)
	t.Run("I/O queue", func(t *testing.T) {
		hold := make(chan struct{})
		defer close(hold)
		s := startServer(t, testOptions(), nil)
		h, core := s.dial(t)
		h.icreq(0)
		h.connect(1, 1, 0) // depth 2
		core.hold.Store(&hold)
		var buf bytes.Buffer
		for range 3 {
			c := rwCmd(h, nvme.IOWrite, 0, 64, nvme.SGLTransportDataBlock)
			buf.Write(h.capsule(&c, nil))
		}
		h.write(buf.Bytes())
		// The termination; the R2Ts of the first two only if the sender
		// got to them before teardown aborted them.
		for range 2 {
			if p, err := h.tryReadPDU(); err != nil || p.ch.Type != nvme.PDUR2T {
				if err != nil || p.ch.Type != nvme.PDUC2HTermReq {
					t.Fatalf("want R2T or C2HTermReq, got %+v, %v", p.ch, err)
				}
				if tr := nvme.DecodeTermReq(p.hdr); tr.FES != nvme.FESPDUSequenceError {
					t.Fatalf("C2HTermReq FES %v", tr.FES)
				}
				h.expectClosed()
				return
			}
		}
		h.expectTermReq(nvme.FESPDUSequenceError, 0)
	})
	t.Run("before Connect completes", func(t *testing.T) {
		hold := make(chan struct{})
		defer close(hold)
		s := startServer(t, testOptions(), func(c *fakeCore) { c.hold.Store(&hold) })
		h, _ := s.dial(t)
		h.icreq(0)
		c := h.cmd(nvme.OpcodeFabrics, nvme.ConnectDataSize, nvme.SGLDataBlockOffset)
		c.EncodeConnect(nvme.ConnectCmd{QID: 0, SQSIZE: 31})
		f := h.cmd(nvme.IOFlush, 0, nvme.SGLTransportDataBlock)
		h.write(append(h.capsule(&c, make([]byte, nvme.ConnectDataSize)), h.capsule(&f, nil)...))
		h.expectTermReq(nvme.FESPDUSequenceError, 0)
	})
}

// A CID may be reused as soon as its completion has been seen.
func TestCIDReusedAfterCompletion(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, _ := s.dial(t)
	h.icreq(0)
	h.connect(1, 0, 0) // SQSIZE 0: one command at a time
	for i := range 50 {
		c := rwCmd(h, nvme.IORead, uint64(i), 1, nvme.SGLTransportDataBlock)
		c.SetCID(0xA005) // genctr in CID[15:12], as Linux does
		h.sendCapsule(&c, nil)
		h.readData(0xA005)
		h.expectResp(0xA005)
	}
}

// Teardown (≈ nvmet_tcp_release_queue_work): when the host goes away the
// core is released, executing commands are waited for, their late
// completions are dropped, and no goroutine is left behind.
func TestTeardownWaitsForExecutingCommands(t *testing.T) {
	checkNoGoroutineLeaks(t)
	hold := make(chan struct{})
	s := startServer(t, testOptions(), nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	core.hold.Store(&hold)
	var buf bytes.Buffer
	for i := range 8 {
		c := rwCmd(h, nvme.IORead, uint64(i), 8, nvme.SGLTransportDataBlock)
		buf.Write(h.capsule(&c, nil))
	}
	w := rwCmd(h, nvme.IOWrite, 0, 64, nvme.SGLTransportDataBlock)
	buf.Write(h.capsule(&w, nil)) // will wait for H2CData forever
	h.write(buf.Bytes())
	h.expectR2T(w.CID())
	waitFor(t, func() bool { return core.executed.Load() == 9 })
	h.c.Close()
	waitFor(t, func() bool { return core.released.Load() == 1 })
	s.l.mu.Lock()
	open := len(s.l.mu.conns)
	s.l.mu.Unlock()
	if open != 1 {
		t.Fatalf("connection ended before its commands completed")
	}
	close(hold)
	core.running.Wait()
	waitFor(t, func() bool {
		s.l.mu.Lock()
		defer s.l.mu.Unlock()
		return len(s.l.mu.conns) == 0
	})
	if core.executed.Load() != 9 {
		t.Fatalf("the write waiting for data was executed")
	}
}

// A core may complete, on Release, a request the transport abandoned while
// it waited for host data: exactly one of the two wins, nothing panics or
// leaks. Run many times to hit both orders.
func TestTeardownRacesCoreCompletingAwaitingRequest(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), func(c *fakeCore) { c.completeOnRelease = true })
	for range 20 {
		h, core := s.dial(t)
		h.icreq(0)
		h.connect(1, 31, 0)
		w := rwCmd(h, nvme.IOWrite, 0, 64, nvme.SGLTransportDataBlock)
		h.sendCapsule(&w, nil)
		h.expectR2T(w.CID())
		h.c.Close()
		waitFor(t, func() bool { return core.released.Load() == 1 })
	}
	waitFor(t, func() bool {
		s.l.mu.Lock()
		defer s.l.mu.Unlock()
		return len(s.l.mu.conns) == 0
	})
}

// Completing a request twice is a core bug, a broken invariant: the
// transport never sends a second response for a CID the host may have
// reused. With the invariants tag it panics; without, the connection is
// closed and the violation counted.
func TestQueueResponseTwiceIsAnInvariant(t *testing.T) {
	opts := testOptions()
	opts.EnsureDefaults()
	conn := newMemConn(nil)
	q := newQueue(conn, newCoreSource(nil).factory, &opts, nil)
	q.start()
	s := q.table.Load().slots[3]
	s.setState(slotInCore)
	q.inflight.Add(1)
	q.QueueResponse(&s.req)
	before := invariant.Violations()
	defer func() {
		r := recover()
		switch {
		case invariant.Enabled && r == nil:
			t.Fatal("second QueueResponse did not panic with the invariants tag")
		case !invariant.Enabled && r != nil:
			t.Fatalf("second QueueResponse panicked without the invariants tag: %v", r)
		case !invariant.Enabled && (invariant.Violations() != before+1 || !conn.isClosed()):
			t.Fatalf("violations %d -> %d, connection closed %v", before, invariant.Violations(), conn.isClosed())
		}
	}()
	q.QueueResponse(&s.req)
}

// QueueOps.Close (keep-alive expiry, controller reset) closes the socket.
func TestCoreCloseClosesConnection(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(0, 31, 0)
	core.ops.Close(errors.New("keep-alive timeout"))
	core.ops.Close(errors.New("again")) // idempotent
	h.expectClosed()
	waitFor(t, func() bool { return core.released.Load() == 1 })
}

// A connection without an ICReq within ICReqTimeout is closed (the host
// itself gives the ICResp 10 s).
func TestICReqTimeoutClosesConnection(t *testing.T) {
	checkNoGoroutineLeaks(t)
	mc := clock.NewManual(time.Unix(0, 0))
	opts := testOptions()
	opts.Clock = mc
	opts.ICReqTimeout = 3 * time.Second
	opts.ConnectTimeout = time.Minute
	s := startServer(t, opts, nil)
	h, core := s.dial(t)
	mc.BlockUntil(1)
	mc.Advance(2 * time.Second)
	h.write([]byte{0}) // part of a header: still not an ICReq
	mc.Advance(time.Second)
	h.expectClosed()
	waitFor(t, func() bool { return core.released.Load() == 1 })

	h2, _ := s.dial(t) // an ICReq in time keeps the connection
	mc.BlockUntil(1)
	h2.icreq(0)
	mc.Advance(time.Minute - time.Second) // within ConnectTimeout
	h2.connect(0, 31, 0)
}

// Shutdown stops reading, lets received commands complete and their
// responses reach the host, then closes (net/http Shutdown).
func TestShutdownDrainsReceivedCommands(t *testing.T) {
	checkNoGoroutineLeaks(t)
	hold := make(chan struct{})
	s := startServer(t, testOptions(), nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	h.writeR2T(0, pattern(4096, 1), 4096)
	core.hold.Store(&hold)
	c := rwCmd(h, nvme.IORead, 0, 8, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	waitFor(t, func() bool { return core.executed.Load() == 3 })
	done := make(chan error, 1)
	go func() { done <- s.l.Shutdown(context.Background()) }()
	waitFor(t, func() bool { return core.released.Load() == 1 })
	close(hold)
	if data, _ := h.readData(c.CID()); !bytes.Equal(data, pattern(4096, 1)) {
		t.Fatalf("read data differs")
	}
	h.expectResp(c.CID())
	h.expectClosed()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := net.Dial("tcp", s.l.Addr().String()); err == nil {
		t.Fatalf("listener still accepting")
	}
}

// When Shutdown's context ends first, the connections are closed at once.
func TestShutdownContextExpiryCloses(t *testing.T) {
	checkNoGoroutineLeaks(t)
	hold := make(chan struct{})
	s := startServer(t, testOptions(), nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	core.hold.Store(&hold)
	c := h.cmd(nvme.IOFlush, 0, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	waitFor(t, func() bool { return core.executed.Load() == 2 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.l.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown: %v", err)
	}
	h.expectClosed()
	close(hold)
}

// Serve retries temporary accept errors with a growing back-off on the
// Listener's clock, and returns ErrServerClosed after Close.
func TestServeBacksOffOnTemporaryAcceptErrors(t *testing.T) {
	checkNoGoroutineLeaks(t)
	mc := clock.NewManual(time.Unix(0, 0))
	opts := testOptions()
	opts.Clock = mc
	opts.EnsureDefaults()
	fl := &flakyListener{errs: 3, closed: make(chan struct{})}
	l := newListener(fl, newCoreSource(nil).factory, opts)
	served := make(chan error, 1)
	go func() { served <- l.Serve() }()
	t.Cleanup(func() { l.Close() })
	for i, d := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
		mc.BlockUntil(1)
		mc.Advance(d - time.Nanosecond)
		if got := fl.calls(); got != i+1 {
			t.Fatalf("%d Accept calls before the %v back-off ended, want %d", got, d, i+1)
		}
		mc.Advance(time.Nanosecond)
	}
	waitFor(t, func() bool { return fl.calls() == 4 })
	l.Close()
	if err := <-served; err != ErrServerClosed {
		t.Fatalf("Serve: %v", err)
	}
}

// flakyListener fails Accept with EMFILE errs times, then blocks until
// closed.
type flakyListener struct {
	mu     sync.Mutex
	errs   int
	n      int
	closed chan struct{}
	once   sync.Once
}

func (f *flakyListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	f.n++
	if f.errs > 0 {
		f.errs--
		f.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	f.mu.Unlock()
	<-f.closed
	return nil, net.ErrClosed
}

func (f *flakyListener) calls() int     { f.mu.Lock(); defer f.mu.Unlock(); return f.n }
func (f *flakyListener) Close() error   { f.once.Do(func() { close(f.closed) }); return nil }
func (f *flakyListener) Addr() net.Addr { return &net.TCPAddr{} }

func TestOptionsValidateReportsEveryProblem(t *testing.T) {
	o := Options{MAXH2CDATA: 4094, ICReqTimeout: -1, ConnectTimeout: -1, H2CDataTimeout: -1, DrainTimeout: -1, ReadBufferSize: 10}
	o.EnsureDefaults()
	err := o.Validate()
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Validate: %v", err)
	}
	for _, field := range []string{"MAXH2CDATA", "ICReqTimeout", "ConnectTimeout", "H2CDataTimeout", "DrainTimeout", "ReadBufferSize"} {
		if !bytes.Contains([]byte(err.Error()), []byte(field)) {
			t.Errorf("error %q does not mention %s", err, field)
		}
	}
	for _, m := range []uint32{4096, 4100, 1 << 20} {
		o := Options{MAXH2CDATA: m}
		o.EnsureDefaults()
		if err := o.Validate(); err != nil {
			t.Errorf("MAXH2CDATA %d: %v", m, err)
		}
	}
	if _, err := listen("127.0.0.1:0", nil, Options{MAXH2CDATA: 1000}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("listen with bad options: %v", err)
	}
	_, err = NewBudget(Limits{MaxConnections: -1, MaxWriteBytes: 100})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("NewBudget: %v", err)
	}
	for _, field := range []string{"MaxConnections", "MaxWriteBytes"} {
		if !bytes.Contains([]byte(err.Error()), []byte(field)) {
			t.Errorf("error %q does not mention %s", err, field)
		}
	}
}
