package target

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/nvme"
)

// This file is the test harness: an in-memory backend, a fake transport
// queue that implements QueueOps and gives each Request a buffer, and a
// host side that builds commands the way the Linux host does.

const (
	testSubNQN  = "nqn.2024-01.io.basalt:vol"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:host-a"
	testHostB   = "nqn.2014-08.org.nvmexpress:uuid:host-b"
	waitLimit   = 10 * time.Second
)

// memBackend is a Backend over a byte slice, with counters and optional
// fault injection and blocking.
type memBackend struct {
	bs   int
	mu   sync.Mutex
	data []byte
	// err, when set, is returned by every call.
	err atomic.Pointer[error]
	// gate, when set, makes every call wait until it is closed (or ctx ends).
	gate                              atomic.Pointer[chan struct{}]
	active, maxActive                 atomic.Int64
	writes, fuaWrites, flushes, trims atomic.Int64
	zeroes, reads                     atomic.Int64
	trimmed                           []([2]int64)
	closed                            atomic.Bool
}

func newMemBackend(size int64, bs int) *memBackend {
	return &memBackend{bs: bs, data: make([]byte, size)}
}

func (m *memBackend) Size() int64    { return int64(len(m.data)) }
func (m *memBackend) BlockSize() int { return m.bs }
func (m *memBackend) Close() error   { m.closed.Store(true); return nil }

func (m *memBackend) enter(ctx context.Context) error {
	n := m.active.Add(1)
	for {
		old := m.maxActive.Load()
		if n <= old || m.maxActive.CompareAndSwap(old, n) {
			break
		}
	}
	if g := m.gate.Load(); g != nil {
		select {
		case <-*g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if e := m.err.Load(); e != nil {
		return *e
	}
	return nil
}

func (m *memBackend) leave() { m.active.Add(-1) }

func (m *memBackend) check(off, n int64) error {
	if off < 0 || n < 0 || off+n > int64(len(m.data)) {
		return fmt.Errorf("mem: [%d,+%d): %w", off, n, backend.ErrOutOfRange)
	}
	return nil
}

func (m *memBackend) ReadAt(ctx context.Context, p []byte, off int64) error {
	defer m.leave()
	if err := m.enter(ctx); err != nil {
		return err
	}
	if err := m.check(off, int64(len(p))); err != nil {
		return err
	}
	m.reads.Add(1)
	m.mu.Lock()
	copy(p, m.data[off:])
	m.mu.Unlock()
	return nil
}

func (m *memBackend) WriteAt(ctx context.Context, p []byte, off int64, flags backend.WriteFlags) error {
	defer m.leave()
	if err := m.enter(ctx); err != nil {
		return err
	}
	if err := m.check(off, int64(len(p))); err != nil {
		return err
	}
	m.writes.Add(1)
	if flags&backend.WriteFUA != 0 {
		m.fuaWrites.Add(1)
	}
	m.mu.Lock()
	copy(m.data[off:], p)
	m.mu.Unlock()
	return nil
}

func (m *memBackend) Flush(ctx context.Context) error {
	defer m.leave()
	if err := m.enter(ctx); err != nil {
		return err
	}
	m.flushes.Add(1)
	return nil
}

func (m *memBackend) Trim(ctx context.Context, off, n int64) error {
	defer m.leave()
	if err := m.enter(ctx); err != nil {
		return err
	}
	if err := m.check(off, n); err != nil {
		return err
	}
	m.trims.Add(1)
	m.mu.Lock()
	clear(m.data[off : off+n])
	m.trimmed = append(m.trimmed, [2]int64{off, n})
	m.mu.Unlock()
	return nil
}

func (m *memBackend) WriteZeroes(ctx context.Context, off, n int64) error {
	defer m.leave()
	if err := m.enter(ctx); err != nil {
		return err
	}
	if err := m.check(off, n); err != nil {
		return err
	}
	m.zeroes.Add(1)
	m.mu.Lock()
	clear(m.data[off : off+n])
	m.mu.Unlock()
	return nil
}

func (m *memBackend) setErr(err error) {
	if err == nil {
		m.err.Store(nil)
	} else {
		m.err.Store(&err)
	}
}

// block makes backend calls wait until the returned function is called.
func (m *memBackend) block() (release func()) {
	g := make(chan struct{})
	m.gate.Store(&g)
	return func() { m.gate.Store(nil); close(g) }
}

// fakeQueue is a transport queue: preallocated request slots, completions
// delivered on a channel, and a per-slot completion count so that tests can
// assert "exactly once".
type fakeQueue struct {
	sq        *SQ
	slots     []Request
	free      chan int
	done      chan *Request
	completed []atomic.Int32
	closed    chan struct{}
	closeOnce sync.Once
	reason    atomic.Pointer[error]
}

const fakeSlots = 256

func newFakeQueue(t *Target, port *Port) *fakeQueue {
	q := &fakeQueue{
		slots: make([]Request, fakeSlots), free: make(chan int, fakeSlots),
		done: make(chan *Request, fakeSlots), completed: make([]atomic.Int32, fakeSlots),
		closed: make(chan struct{}),
	}
	for i := range q.slots {
		q.slots[i].Slot = i
		q.free <- i
	}
	q.sq = t.NewSQ(q, port)
	return q
}

func (q *fakeQueue) QueueResponse(r *Request) {
	q.completed[r.Slot].Add(1)
	q.done <- r
}

func (q *fakeQueue) Close(reason error) {
	q.reason.CompareAndSwap(nil, &reason)
	q.closeOnce.Do(func() { close(q.closed) })
}

func (q *fakeQueue) isClosed() bool {
	select {
	case <-q.closed:
		return true
	default:
		return false
	}
}

func (q *fakeQueue) closeReason() error {
	if p := q.reason.Load(); p != nil {
		return *p
	}
	return nil
}

// slot takes a free slot with a buffer of the queue's transfer size.
func (q *fakeQueue) slot(tb testing.TB) *Request {
	select {
	case i := <-q.free:
		r := &q.slots[i]
		if need := max(q.sq.MaxTransferSize(), AdminMaxTransfer); cap(r.Data) < need {
			r.Data = make([]byte, need)
		}
		q.completed[i].Store(0)
		return r
	case <-time.After(waitLimit):
		tb.Fatalf("no free slot")
		return nil
	}
}

// start submits cmd (with data for a host-to-controller transfer) and
// returns the request; ok reports whether Init accepted it.
func (q *fakeQueue) start(tb testing.TB, cmd nvme.Command, data []byte) (r *Request, ok bool) {
	tb.Helper()
	r = q.slot(tb)
	r.Cmd = cmd
	if !q.sq.Init(r) {
		return r, false
	}
	if r.Dir == DirH2C {
		if len(data) < int(r.TransferLen) {
			tb.Fatalf("test sent %d bytes, command needs %d", len(data), r.TransferLen)
		}
		copy(r.Data[:r.TransferLen], data)
	}
	q.sq.Execute(r)
	return r, true
}

// wait returns the completion of r and a copy of its C2H data, and checks
// that it completed exactly once.
func (q *fakeQueue) wait(tb testing.TB, r *Request) (nvme.Completion, []byte) {
	tb.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case got := <-q.done:
			if got != r {
				// Another request finished first; put it back in order.
				defer func(g *Request) { q.done <- g }(got)
				continue
			}
			cpl := r.Cpl
			data := append([]byte(nil), r.Data[:r.DataLen]...)
			if n := q.completed[r.Slot].Load(); n != 1 {
				tb.Fatalf("request completed %d times", n)
			}
			if r.Dir != DirC2H && r.DataLen != 0 {
				tb.Fatalf("DataLen %d for a non-C2H command", r.DataLen)
			}
			q.free <- r.Slot
			return cpl, data
		case <-deadline:
			tb.Fatalf("command %#x (cid %d) did not complete", r.Cmd.Opcode(), r.Cmd.CID())
		}
	}
}

// do runs one command to completion.
func (q *fakeQueue) do(tb testing.TB, cmd nvme.Command, data []byte) (nvme.Completion, []byte) {
	tb.Helper()
	r, _ := q.start(tb, cmd, data)
	return q.wait(tb, r)
}

// mustDo runs a command that must succeed.
func (q *fakeQueue) mustDo(tb testing.TB, cmd nvme.Command, data []byte) (nvme.Completion, []byte) {
	tb.Helper()
	cpl, out := q.do(tb, cmd, data)
	if !cpl.Status.Success() {
		tb.Fatalf("opcode %#x fctype %#x: %v", cmd.Opcode(), cmd.FCType(), cpl.Status)
	}
	return cpl, out
}

// ---- command builders (the Linux host's encodings) ----

var cidCounter atomic.Uint32

// newCmd returns an SQE with a fresh CID, PSDT = SGL and a null transport SGL.
func newCmd(op nvme.Opcode) nvme.Command {
	var c nvme.Command
	c.SetOpcode(op)
	c.SetFlags(nvme.PSDTSGL)
	c.SetCID(uint16(cidCounter.Add(1)))
	c.SetSGL(0, 0, nvme.SGLTransportDataBlock)
	return c
}

func connectCmd(qid, sqsize uint16, kato uint32, cattr uint8) nvme.Command {
	c := newCmd(nvme.OpcodeFabrics)
	c.EncodeConnect(nvme.ConnectCmd{QID: qid, SQSIZE: sqsize, KATO: kato, CATTR: cattr})
	c.SetSGL(0, nvme.ConnectDataSize, nvme.SGLDataBlockOffset)
	return c
}

var testHostID = [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}

func connectData(cntlid uint16, subnqn, hostnqn string) []byte {
	b := make([]byte, nvme.ConnectDataSize)
	d := nvme.ConnectData{HostID: testHostID, CNTLID: cntlid, SubNQN: subnqn, HostNQN: hostnqn}
	d.Encode(b)
	return b
}

func propGetCmd(ofst uint32, size8 bool) nvme.Command {
	c := newCmd(nvme.OpcodeFabrics)
	c.SetFCType(nvme.FCTypePropertyGet)
	if size8 {
		c[nvme.PropOffsetATTRIB] = nvme.PropSize8
	}
	binary.LittleEndian.PutUint32(c[nvme.PropOffsetOFST:], ofst)
	return c
}

func propSetCmd(ofst uint32, v uint64) nvme.Command {
	c := newCmd(nvme.OpcodeFabrics)
	c.SetFCType(nvme.FCTypePropertySet)
	binary.LittleEndian.PutUint32(c[nvme.PropOffsetOFST:], ofst)
	binary.LittleEndian.PutUint64(c[nvme.PropOffsetVALUE:], v)
	return c
}

func identifyCmd(cns uint8, nsid uint32, csi uint8) nvme.Command {
	c := newCmd(nvme.AdminIdentify)
	c.SetNSID(nsid)
	c.SetCDW(10, uint32(cns))
	c.SetCDW(11, uint32(csi)<<24)
	c.SetSGL(0, nvme.IdentifySize, nvme.SGLTransportDataBlock)
	return c
}

func getLogCmd(lid, lsp uint8, rae bool, nsid uint32, length uint32, off uint64) nvme.Command {
	c := newCmd(nvme.AdminGetLogPage)
	c.SetNSID(nsid)
	c.EncodeGetLogPage(nvme.GetLogPageCmd{LID: lid, LSP: lsp, RAE: rae, Length: length, Offset: off})
	c.SetSGL(0, length, nvme.SGLTransportDataBlock)
	return c
}

func setFeatCmd(fid uint8, d11 uint32) nvme.Command {
	c := newCmd(nvme.AdminSetFeatures)
	c.SetCDW(10, uint32(fid))
	c.SetCDW(11, d11)
	return c
}

func getFeatCmd(fid uint8, sel uint32, d11 uint32) nvme.Command {
	c := newCmd(nvme.AdminGetFeatures)
	c.SetCDW(10, uint32(fid)|sel<<8)
	c.SetCDW(11, d11)
	return c
}

func rwCmd(op nvme.Opcode, nsid uint32, slba uint64, nlb uint16, bs int) nvme.Command {
	c := newCmd(op)
	c.SetNSID(nsid)
	c.SetSLBA(slba)
	c.SetCDW(12, uint32(nlb))
	c.SetSGL(0, uint32(int(nlb)+1)*uint32(bs), nvme.SGLTransportDataBlock)
	return c
}

// ---- host side ----

// testEnv is a target with one subsystem (NSID 1 and 2 on memory
// backends), two ports and a manual clock.
type testEnv struct {
	tb    testing.TB
	tgt   *Target
	clk   *clock.Manual
	sub   *Subsystem
	ports []*Port
	be    map[uint32]*memBackend
}

func newEnv(tb testing.TB, mutate ...func(*Config, *SubsystemConfig)) *testEnv {
	tb.Helper()
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := Config{Clock: clk, CNTLIDMin: 0x1001, CNTLIDMax: 0x1FFF}
	env := &testEnv{tb: tb, clk: clk, be: map[uint32]*memBackend{}}
	env.be[1] = newMemBackend(1<<20, 512)
	env.be[2] = newMemBackend(2<<20, 4096)
	sc := SubsystemConfig{
		NQN: testSubNQN, Hosts: []string{testHostNQN},
		Namespaces: []NamespaceConfig{
			{NSID: 1, Backend: env.be[1], NGUID: [16]byte{1, 1}, UUID: [16]byte{0xA, 1}},
			{NSID: 2, Backend: env.be[2], NGUID: [16]byte{2, 2}, UUID: [16]byte{0xA, 2}},
		},
	}
	for _, m := range mutate {
		m(&cfg, &sc)
	}
	tgt, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	env.tgt = tgt
	tb.Cleanup(func() { tgt.Close() })
	for i, addr := range []string{"192.0.2.1", "192.0.2.2"} {
		p, err := tgt.AddPort(PortConfig{ID: uint16(i + 1), TRADDR: addr, TRSVCID: "4420"})
		if err != nil {
			tb.Fatal(err)
		}
		env.ports = append(env.ports, p)
	}
	if env.sub, err = tgt.AddSubsystem(sc); err != nil {
		tb.Fatal(err)
	}
	return env
}

// with returns env reporting failures to tb (for fuzz and sub-tests).
func (env *testEnv) with(tb testing.TB) *testEnv {
	c := *env
	c.tb = tb
	return &c
}

// assoc is one host association: the admin queue and its I/O queues.
type assoc struct {
	env    *testEnv
	admin  *fakeQueue
	io     []*fakeQueue
	cntlid uint16
	port   *Port
}

// connectAdmin opens the admin queue and enables the controller in the Linux
// order: Connect, CC with EN=0, CC with EN=1, then CSTS.
func (env *testEnv) connectAdmin(subnqn, hostnqn string, port *Port, kato uint32) *assoc {
	tb := env.tb
	tb.Helper()
	a := &assoc{env: env, port: port, admin: newFakeQueue(env.tgt, port)}
	cpl, _ := a.admin.mustDo(tb, connectCmd(0, 31, kato, 0), connectData(nvme.CNTLIDDynamic, subnqn, hostnqn))
	a.cntlid = uint16(cpl.DW0)
	a.admin.mustDo(tb, propSetCmd(nvme.PropCC, 0x00460000), nil)
	a.admin.mustDo(tb, propSetCmd(nvme.PropCC, 0x00460001), nil)
	cpl, _ = a.admin.mustDo(tb, propGetCmd(nvme.PropCSTS, false), nil)
	if cpl.DW0&nvme.CSTSReady == 0 {
		tb.Fatalf("CSTS %#x: not ready", cpl.DW0)
	}
	return a
}

// connectIO adds I/O queues 1..n with SQSIZE sqsize.
func (a *assoc) connectIO(n int, sqsize uint16) {
	tb := a.env.tb
	tb.Helper()
	a.admin.mustDo(tb, setFeatCmd(nvme.FeatNumberOfQueues, uint32(n-1)|uint32(n-1)<<16), nil)
	for i := 1; i <= n; i++ {
		q := newFakeQueue(a.env.tgt, a.port)
		q.mustDo(tb, connectCmd(uint16(i), sqsize, 0, 0), connectData(a.cntlid, testSubNQN, testHostNQN))
		a.io = append(a.io, q)
	}
}

// standard connects host A to the test subsystem through port 1 with two
// I/O queues.
func (env *testEnv) standard() *assoc {
	a := env.connectAdmin(testSubNQN, testHostNQN, env.ports[0], 5000)
	a.connectIO(2, 127)
	return a
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// expectStatus fails unless cpl has status want (code and DNR).
func expectStatus(tb testing.TB, what string, cpl nvme.Completion, want nvme.Status) {
	tb.Helper()
	if cpl.Status != want {
		tb.Fatalf("%s: status %v, want %v", what, cpl.Status, want)
	}
}

// waitClosed waits until q's connection is closed by the core.
func waitClosed(tb testing.TB, q *fakeQueue) {
	tb.Helper()
	select {
	case <-q.closed:
	case <-time.After(waitLimit):
		tb.Fatalf("queue %d not closed", q.sq.QID())
	}
}
