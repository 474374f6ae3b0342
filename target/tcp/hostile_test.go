package tcp

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/nvme"
	"basalt/target"
)

// The hostile clients of issue 14 (finding 6): 2,000 idle TCP connections,
// 500 that stop after their ICReq, and 100 that each hold as many R2Ts as
// the target grants them and never send the data. The memory the Go
// runtime holds for them (heap and goroutine stacks, after a GC, both ends
// of every loopback connection counted) stays under a bound computed from
// the limits, and another host's writes and reads carry on meanwhile.
//
// The bound, per connection (measured under -race on the fake core, then
// rounded up about 1.5×): an idle one holds no buffer, slot or goroutine
// but its receiver (idleConnCost); after an ICReq it has its 16 KiB read
// buffer, 32 slots, the CID set, the send arena and the sender goroutine
// (icreqConnCost); an I/O queue of depth 128 has its ReadBufferSize read
// buffer and 129 slots (ioConnCost). The R2Ts' data buffers are what the
// write budget lets them hold: 100 × MaxControllerWriteBytes here (the
// node's MaxWriteBytes bounds it in any case).
const (
	hostileIdle       = 2000
	hostileAfterICReq = 500
	hostileR2T        = 100
	idleConnCost      = 16 << 10
	icreqConnCost     = 96 << 10
	ioConnCost        = DefaultReadBufferSize + 192<<10
	hostileCtrlBudget = 512 << 10
	// normalHostCost: the other host's connection, its fake core's 4 MiB
	// disk and its buffers, and the runtime's slack.
	normalHostCost = 16 << 20
)

func TestHostileClientsBoundedMemory(t *testing.T) {
	raiseFDLimit(t, 2*(hostileIdle+hostileAfterICReq+hostileR2T+1)+256)
	limits := Limits{MaxWriteBytes: 64 << 20, MaxControllerWriteBytes: hostileCtrlBudget}
	opts := budgetOptions(t, limits)
	opts.Clock = clock.NewManual(time.Unix(0, 0)) // no timeout ends a hostile connection
	l, err := listen("127.0.0.1:0", func(ops target.QueueOps) queueCore {
		c := newFakeCore()
		c.ops = ops
		c.mts = 128 << 10
		return c
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve() }()
	var clients []net.Conn
	defer func() {
		l.Close()
		for _, c := range clients {
			c.Close()
		}
		l.Wait()
		<-served
	}()
	addr, b := l.Addr().String(), l.Budget()
	base := memInUse()

	// 2,000 idle connections, from four addresses (MaxConnectionsPerHost).
	for i := range hostileIdle {
		clients = append(clients, dialFrom(t, fmt.Sprintf("127.0.1.%d", 1+i%4), addr))
	}
	waitFor(t, func() bool { return b.Stats().Connections == hostileIdle })
	idle := memInUse()
	// 500 that stop after the ICReq.
	for range hostileAfterICReq {
		c := dialFrom(t, "127.0.2.1", addr)
		clients = append(clients, c)
		rawICReq(t, c)
	}
	waitFor(t, func() bool { return b.Stats().ReadBufferBytes == hostileAfterICReq*handshakeReadBufferSize })
	icreq := memInUse()
	// 100 that connect an I/O queue of depth 128, send 128 writes of
	// 128 KiB each and never send their data.
	var wg sync.WaitGroup
	errs := make(chan error, hostileR2T)
	for range hostileR2T {
		c := dialFrom(t, "127.0.3.1", addr)
		clients = append(clients, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- holdR2Ts(c, hostileCtrlBudget/(128<<10))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	const granted = hostileR2T * hostileCtrlBudget
	waitFor(t, func() bool {
		s := b.Stats()
		return s.WriteBytes == granted && s.WritesWaiting == hostileR2T*(128-hostileCtrlBudget/(128<<10))
	})
	t.Logf("with the hostile clients: %+v", b.Stats())
	held := memInUse()

	// Meanwhile another host writes and reads.
	normal := newTestHost(t, dialFrom(t, "127.0.4.1", addr))
	normal.icreq(0)
	normal.connect(1, 31, 0)
	for i := range 16 {
		data := pattern(128<<10, byte(i))
		normal.writeR2T(uint64(i)*256, data, 32<<10)
		if !bytes.Equal(normal.read(uint64(i)*256, 256), data) {
			t.Fatalf("the other host's write %d read back differs", i)
		}
	}
	during := memInUse()

	t.Logf("per idle connection %d B, after ICReq %d B, I/O queue holding R2Ts %d B (%d B of data buffers); heap+stacks %s -> %s",
		(idle-base)/hostileIdle, (icreq-idle)/hostileAfterICReq, (held-icreq)/hostileR2T, granted/hostileR2T,
		mibs(base), mibs(during))
	bound := uint64(hostileIdle*idleConnCost + hostileAfterICReq*icreqConnCost +
		hostileR2T*ioConnCost + granted + normalHostCost)
	if grew := during - min(during, base); grew > bound {
		t.Fatalf("memory grew by %s with hostile clients, bound %s", mibs(grew), mibs(bound))
	}
}

// memInUse returns the heap and goroutine stacks in use after a GC.
func memInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

func mibs(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// raiseFDLimit raises the soft limit on open files to need, or skips the
// test if the hard limit is lower.
func raiseFDLimit(t *testing.T, need uint64) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if r.Cur >= need {
		return
	}
	if r.Max < need {
		t.Skipf("%d file descriptors needed, the hard limit is %d (raise ulimit -Hn)", need, r.Max)
	}
	r.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Skipf("setrlimit to %d: %v", need, err)
	}
}

// rawICReq sends an ICReq and reads the ICResp without a host's buffers.
func rawICReq(t *testing.T, c net.Conn) {
	t.Helper()
	var b [nvme.ICReqSize]byte
	nvme.ICReq{}.Encode(b[:])
	if _, err := c.Write(b[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, b[:]); err != nil || nvme.DecodeCommonHeader(b[:]).Type != nvme.PDUICResp {
		t.Fatalf("ICResp: %v", err)
	}
}

// holdR2Ts connects an I/O queue of depth 128 on c, sends 128 writes of
// 128 KiB that ask for R2Ts, and checks that the first want R2Ts arrive.
func holdR2Ts(c net.Conn, want int) error {
	h := &testHost{}
	var buf bytes.Buffer
	var icreq [nvme.ICReqSize]byte
	nvme.ICReq{}.Encode(icreq[:])
	buf.Write(icreq[:])
	connect := h.cmd(nvme.OpcodeFabrics, nvme.ConnectDataSize, nvme.SGLDataBlockOffset)
	connect.EncodeConnect(nvme.ConnectCmd{QID: 1, SQSIZE: 127})
	buf.Write(h.capsule(&connect, make([]byte, nvme.ConnectDataSize)))
	if _, err := c.Write(buf.Bytes()); err != nil {
		return err
	}
	resp := make([]byte, nvme.ICReqSize+nvme.CapsuleRespHLEN)
	if _, err := io.ReadFull(c, resp); err != nil {
		return fmt.Errorf("ICResp and Connect response: %w", err)
	}
	buf.Reset()
	for i := range 128 { // within the fake core's 4 MiB disk
		w := rwCmd(h, nvme.IOWrite, uint64(i%16)*256, 256, nvme.SGLTransportDataBlock)
		buf.Write(h.capsule(&w, nil))
	}
	if _, err := c.Write(buf.Bytes()); err != nil {
		return err
	}
	r2ts := make([]byte, want*nvme.DataHLEN)
	if _, err := io.ReadFull(c, r2ts); err != nil {
		return fmt.Errorf("R2Ts: %w", err)
	}
	for i := range want {
		if tp := nvme.DecodeCommonHeader(r2ts[i*nvme.DataHLEN:]).Type; tp != nvme.PDUR2T {
			return fmt.Errorf("PDU %d: %v, want R2T", i, tp)
		}
	}
	return nil
}
