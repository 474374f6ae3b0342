package tcp

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/invariant"
	"basalt/pkg/invariant/invarianttest"
	"basalt/pkg/nvme"
	"basalt/target"
)

// Every client resource has a limit (issue 14, finding 6): connections per
// node and per host address, no buffer before a valid ICReq, deadlines for
// the ICReq, the Connect and the H2C data after an R2T, and budgets for
// the data buffers of writes (per node and per controller) and of reads.

// budgetOptions are testOptions with a Budget of limits.
func budgetOptions(t testing.TB, limits Limits) Options {
	t.Helper()
	b, err := NewBudget(limits)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.Budget = b
	return o
}

// dialFrom connects to addr from the loopback address src (all of
// 127.0.0.0/8 is local on Linux).
func dialFrom(t testing.TB, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// refused reports whether the target closed c without a byte.
func refused(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err := c.Read(b[:])
	return err == io.EOF
}

// A connection beyond MaxConnectionsPerHost from one address, or beyond
// MaxConnections on the node, is closed as soon as it is accepted; one
// that ends makes room for another. Stats count both refusals.
func TestConnectionLimits(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, budgetOptions(t, Limits{MaxConnections: 4, MaxConnectionsPerHost: 2}), nil)
	addr := s.l.Addr().String()
	b := s.l.Budget()
	handshake := func(c net.Conn) {
		t.Helper()
		newTestHost(t, c).icreq(0)
	}
	a1, a2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
	handshake(a1)
	handshake(a2)
	if !refused(dialFrom(t, "127.0.0.1", addr)) {
		t.Fatal("a third connection from 127.0.0.1 was served")
	}
	handshake(dialFrom(t, "127.0.0.2", addr))
	handshake(dialFrom(t, "127.0.0.3", addr))
	if !refused(dialFrom(t, "127.0.0.4", addr)) {
		t.Fatal("a fifth connection on the node was served")
	}
	st := b.Stats()
	if st.Connections != 4 || st.Accepted != 4 || st.RejectedHostLimit != 1 || st.RejectedNodeLimit != 1 {
		t.Fatalf("stats %+v", st)
	}
	a1.Close()
	waitFor(t, func() bool { return b.Stats().Connections == 3 })
	handshake(dialFrom(t, "127.0.0.1", addr))
}

// A connection holds no buffer and no slot before a valid ICReq: then a
// 16 KiB read buffer, and ReadBufferSize once an I/O queue is connected
// (an admin queue keeps 16 KiB). Data buffers come from the Budget per
// command and go back to it.
func TestBuffersOnlyAfterICReq(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, budgetOptions(t, Limits{}), nil)
	b := s.l.Budget()
	idle, _ := s.dial(t)
	waitFor(t, func() bool { return b.Stats().Connections == 1 })
	if st := b.Stats(); st.ReadBufferBytes != 0 || st.BuffersAllocated != 0 {
		t.Fatalf("before any ICReq: %+v", st)
	}
	q := s.onlyQueue(t)
	if q.table.Load() != nil || q.cids != nil {
		t.Fatal("slots or CID set allocated before the ICReq")
	}
	idle.icreq(0)
	waitFor(t, func() bool { return b.Stats().ReadBufferBytes == handshakeReadBufferSize })
	admin, _ := s.dial(t)
	admin.icreq(0)
	admin.connect(0, 31, 0)
	io, _ := s.dial(t)
	io.icreq(0)
	io.connect(1, 127, 0)
	io.writeR2T(0, pattern(64<<10, 1), 32<<10)
	if got := io.read(0, 128); !bytes.Equal(got, pattern(64<<10, 1)) {
		t.Fatal("read back differs")
	}
	// The read's data buffer goes back once its C2HData is sent, which the
	// host may see before the queue's goroutine returns it.
	waitFor(t, func() bool { st := b.Stats(); return st.WriteBytes == 0 && st.ReadBytes == 0 })
	st := b.Stats()
	if want := int64(2*handshakeReadBufferSize + DefaultReadBufferSize); st.ReadBufferBytes != want {
		t.Fatalf("read buffers %d bytes, want %d (two at 16 KiB, one I/O queue)", st.ReadBufferBytes, want)
	}
	if st.WriteBytes != 0 || st.ReadBytes != 0 || st.CachedBytes == 0 {
		t.Fatalf("data buffers after the I/O: %+v", st)
	}
}

// A connection whose ICResp was sent but whose Connect has not succeeded
// within ConnectTimeout is closed; a connected queue that then stays idle
// is not.
func TestConnectTimeoutClosesConnection(t *testing.T) {
	checkNoGoroutineLeaks(t)
	mc := clock.NewManual(time.Unix(0, 0))
	opts := budgetOptions(t, Limits{})
	opts.Clock = mc
	opts.ConnectTimeout = 5 * time.Second
	s := startServer(t, opts, nil)
	h, core := s.dial(t)
	h.icreq(0)
	mc.BlockUntil(1)
	mc.Advance(5*time.Second - time.Nanosecond)
	if n := s.l.Budget().Stats().ConnectTimeouts; n != 0 {
		t.Fatalf("%d Connect timeouts before the deadline", n)
	}
	mc.Advance(time.Nanosecond)
	h.expectClosed()
	waitFor(t, func() bool { return core.released.Load() == 1 })
	if n := s.l.Budget().Stats().ConnectTimeouts; n != 1 {
		t.Fatalf("%d Connect timeouts, want 1", n)
	}

	h2, _ := s.dial(t) // connected in time: no deadline left, even idle
	h2.icreq(0)
	mc.BlockUntil(1)
	h2.connect(1, 31, 0)
	mc.Advance(time.Hour)
	h2.writeR2T(0, pattern(4096, 2), 4096)
}

// The data an R2T asks for must arrive within H2CDataTimeout of the R2T;
// otherwise the connection is closed (there is no FES for it), and the
// write is aborted in the core. Another write's R2T, sent later, is timed
// from its own R2T.
func TestH2CDataTimeoutClosesConnection(t *testing.T) {
	checkNoGoroutineLeaks(t)
	mc := clock.NewManual(time.Unix(0, 0))
	opts := budgetOptions(t, Limits{})
	opts.Clock = mc
	opts.H2CDataTimeout = 30 * time.Second
	s := startServer(t, opts, nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	slow := rwCmd(h, nvme.IOWrite, 0, 64, nvme.SGLTransportDataBlock)
	h.sendCapsule(&slow, nil)
	r2t := h.expectR2T(slow.CID())
	mc.BlockUntil(1) // the H2C data timer
	mc.Advance(20 * time.Second)
	late := rwCmd(h, nvme.IOWrite, 100, 64, nvme.SGLTransportDataBlock)
	h.sendCapsule(&late, nil)
	h.expectR2T(late.CID())
	data := pattern(64*fakeBlockSize, 3)
	h.write(h.h2cData(slow.CID(), r2t.TTAG, 0, data[:4096], false)) // part of it
	mc.Advance(10*time.Second - time.Nanosecond)
	// Still open: a flush completes.
	f := h.cmd(nvme.IOFlush, 0, nvme.SGLTransportDataBlock)
	if cpl := h.do(&f); !cpl.Status.Success() {
		t.Fatalf("flush: %v", cpl.Status)
	}
	if n := s.l.Budget().Stats().H2CDataTimeouts; n != 0 {
		t.Fatalf("%d H2C data timeouts before the deadline", n)
	}
	mc.Advance(time.Nanosecond)
	h.expectClosed()
	waitFor(t, func() bool { return core.released.Load() == 1 && core.refs.Load() == 0 })
	if n := s.l.Budget().Stats().H2CDataTimeouts; n != 1 || core.aborted.Load() != 2 {
		t.Fatalf("%d H2C data timeouts, %d aborted, want 1 and 2", n, core.aborted.Load())
	}
}

// The host is late with H2C data only while the receiver waits for its
// input: data that arrived while the receiver was held up elsewhere (here
// a backend that makes Execute wait) does not time the connection out.
func TestH2CDataTimeoutSparesAStalledReceiver(t *testing.T) {
	checkNoGoroutineLeaks(t)
	mc := clock.NewManual(time.Unix(0, 0))
	opts := budgetOptions(t, Limits{})
	opts.Clock = mc
	opts.H2CDataTimeout = 30 * time.Second
	s := startServer(t, opts, nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	w := rwCmd(h, nvme.IOWrite, 0, 64, nvme.SGLTransportDataBlock)
	h.sendCapsule(&w, nil)
	r2t := h.expectR2T(w.CID())
	stall := make(chan struct{})
	core.stall.Store(&stall)
	f := h.cmd(nvme.IOFlush, 0, nvme.SGLTransportDataBlock)
	h.sendCapsule(&f, nil)
	data := pattern(64*fakeBlockSize, 4)
	h.write(h.h2cData(w.CID(), r2t.TTAG, 0, data, true)) // arrives while Execute waits
	waitFor(t, func() bool { return !s.onlyQueue(t).awaitingInput.Load() })
	mc.Advance(30 * time.Second)
	for range 10 { // each check finds the receiver stalled and looks again 3 s later
		mc.BlockUntil(1)
		mc.Advance(3 * time.Second)
	}
	mc.BlockUntil(1)
	if n := s.l.Budget().Stats().H2CDataTimeouts; n != 0 {
		t.Fatalf("%d H2C data timeouts while the receiver was stalled", n)
	}
	core.stall.Store(nil)
	close(stall)
	h.expectResp(f.CID())
	if cpl := h.expectResp(w.CID()); !cpl.Status.Success() {
		t.Fatalf("write: %v", cpl.Status)
	}
}

// Writes beyond the node's write budget get their R2T only when an
// earlier write's buffer is back; meanwhile they hold no buffer. All
// complete with their data.
func TestWriteBudgetDefersR2T(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, budgetOptions(t, Limits{MaxWriteBytes: 256 << 10}), nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	b := s.l.Budget()
	var cmds []nvme.Command
	var burst bytes.Buffer
	for i := range 4 {
		c := rwCmd(h, nvme.IOWrite, uint64(i)*256, 256, nvme.SGLTransportDataBlock) // 128 KiB
		cmds = append(cmds, c)
		burst.Write(h.capsule(&c, nil))
	}
	h.write(burst.Bytes())
	r2ts := map[uint16]nvme.DataHeader{}
	for range 2 {
		r := nvme.DecodeDataHeader(h.readPDU().hdr)
		r2ts[r.CCCID] = r
	}
	waitFor(t, func() bool { return b.Stats().WritesWaiting == 2 })
	if st := b.Stats(); st.WriteBytes != 256<<10 || st.WriteWaits != 2 {
		t.Fatalf("stats %+v", st)
	}
	for i := 0; i < 4; i++ {
		c := cmds[i]
		r, ok := r2ts[c.CID()]
		for !ok { // granted when an earlier write's buffer came back: after its completion
			p := h.readPDU()
			if p.ch.Type != nvme.PDUR2T {
				t.Fatalf("write %d: a PDU of type %v while it waits for its R2T", i, p.ch.Type)
			}
			got := nvme.DecodeDataHeader(p.hdr)
			r2ts[got.CCCID] = got
			r, ok = r2ts[c.CID()]
		}
		data := pattern(128<<10, byte(i))
		sendData(h, &c, r, data, 0, len(data))
		for { // the completion, and maybe the next write's R2T
			p := h.readPDU()
			if p.ch.Type == nvme.PDUR2T {
				r := nvme.DecodeDataHeader(p.hdr)
				r2ts[r.CCCID] = r
				continue
			}
			if cpl := nvme.DecodeCompletion(p.hdr[8:]); cpl.CID != c.CID() || !cpl.Status.Success() {
				t.Fatalf("write %d: %+v", i, cpl)
			}
			break
		}
	}
	for i := range 4 {
		if !bytes.Equal(h.read(uint64(i)*256, 256), pattern(128<<10, byte(i))) {
			t.Fatalf("write %d read back differs", i)
		}
	}
	if st := b.Stats(); st.WriteBytes != 0 || st.WritesWaiting != 0 || core.refs.Load() != 0 {
		t.Fatalf("after the writes: %+v, %d in the core", st, core.refs.Load())
	}
}

// One controller's queues share MaxControllerWriteBytes: a write of its
// second queue waits while another controller's write gets its R2T at
// once; when the host drops, the waiting write is aborted in the core.
func TestControllerWriteBudget(t *testing.T) {
	checkNoGoroutineLeaks(t)
	shared, cores := new(int), 0
	s := startServer(t, budgetOptions(t, Limits{MaxControllerWriteBytes: 128 << 10}), func(c *fakeCore) {
		if cores++; cores <= 2 {
			c.assoc = shared // the first two connections: one controller
		}
	})
	b := s.l.Budget()
	q1, _ := s.dial(t)
	q1.icreq(0)
	q1.connect(1, 31, 0)
	q2, core2 := s.dial(t)
	q2.icreq(0)
	q2.connect(2, 31, 0)
	other, _ := s.dial(t)
	other.icreq(0)
	other.connect(1, 31, 0)
	w1 := rwCmd(q1, nvme.IOWrite, 0, 256, nvme.SGLTransportDataBlock) // 128 KiB
	q1.sendCapsule(&w1, nil)
	q1.expectR2T(w1.CID())
	w2 := rwCmd(q2, nvme.IOWrite, 0, 256, nvme.SGLTransportDataBlock)
	q2.sendCapsule(&w2, nil)
	waitFor(t, func() bool { return b.Stats().WritesWaiting == 1 })
	w3 := rwCmd(other, nvme.IOWrite, 0, 256, nvme.SGLTransportDataBlock)
	other.sendCapsule(&w3, nil)
	other.expectR2T(w3.CID())
	q2.c.Close()
	waitFor(t, func() bool { return core2.released.Load() == 1 && core2.refs.Load() == 0 })
	if core2.aborted.Load() != 1 || b.Stats().WritesWaiting != 0 {
		t.Fatalf("the waiting write: %d aborted, %d waiting", core2.aborted.Load(), b.Stats().WritesWaiting)
	}
}

// A read that finds the read budget full waits for a buffer before it
// executes (its connection reads nothing meanwhile), and runs once an
// earlier one's buffer is back.
func TestReadBudgetWaits(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, budgetOptions(t, Limits{MaxReadBytes: 128 << 10}), nil)
	b := s.l.Budget()
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the server's cleanup, which waits for the held read
	core.hold.Store(&hold)
	// The Connect's buffer goes back once its slot is freed, after its
	// response: until then the first read would wait too.
	waitFor(t, func() bool { return b.Stats().ReadBytes == 0 })
	before := b.Stats().ReadWaits
	r1 := rwCmd(h, nvme.IORead, 0, 256, nvme.SGLTransportDataBlock)
	r2 := rwCmd(h, nvme.IORead, 256, 256, nvme.SGLTransportDataBlock)
	h.write(append(h.capsule(&r1, nil), h.capsule(&r2, nil)...))
	waitFor(t, func() bool { return b.Stats().ReadWaits == before+1 })
	if n := core.executed.Load(); n != 2 { // the Connect and the first read
		t.Fatalf("%d executed while the second read waits for its buffer, want 2", n)
	}
	release()
	for _, c := range []nvme.Command{r1, r2} {
		if data, _ := h.readData(c.CID()); len(data) != 128<<10 {
			t.Fatalf("read: %d bytes", len(data))
		}
		h.expectResp(c.CID())
	}
}

// The transport's broken invariants go through pkg/invariant, contained to
// the one command: a core that accepts a transfer larger than the queue's
// buffers fails the command with Internal Error (through the core, so
// what Init took is released); a completion of a request that is not the
// queue's closes the connection.
func TestTransportInvariants(t *testing.T) {
	opts := testOptions()
	opts.EnsureDefaults()
	conn := newMemConn(nil)
	var core *fakeCore
	q := newQueue(conn, newCoreSource(func(c *fakeCore) { core = c; c.oversize = true }).factory, &opts, nil)
	q.start()
	s, err := q.acquireSlot()
	if err != nil {
		t.Fatal(err)
	}
	h := &testHost{}
	s.req.Cmd = rwCmd(h, nvme.IORead, 0, 8, nvme.SGLTransportDataBlock)
	invarianttest.Expect(t, "transfer of", func() { q.startCommand(s) })
	if !invariant.Enabled && (core.aborted.Load() != 1 || s.req.Cpl.Status != nvme.StatusInternalError) {
		t.Fatalf("the command: %d aborted, status %v", core.aborted.Load(), s.req.Cpl.Status)
	}
	invarianttest.Expect(t, "does not belong", func() { q.QueueResponse(&target.Request{Slot: 5}) })
	if !invariant.Enabled && !conn.isClosed() {
		t.Fatal("connection left open")
	}
}
