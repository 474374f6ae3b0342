package host

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/nvme"
)

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dialFake connects to f with opts (SubNQN filled in) and closes the
// controller at the end of the test.
func dialFake(t testing.TB, f *fakeTarget, opts Options) *Controller {
	t.Helper()
	if opts.SubNQN == "" {
		opts.SubNQN = f.cfg.SubNQN
	}
	c, err := Dial(testContext(t), f.addr(), opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The exact order of what `nvme connect` sends.
func TestDialFollowsLinuxSequence(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{})
	c := dialFake(t, f, Options{})
	want := []string{
		"0:Connect sqsize=31 kato=5000 cntlid=0xffff",
		"0:PropGet 0x0/8",
		"0:PropSet 0x14=0x460000",
		"0:PropGet 0x0/8",
		"0:PropSet 0x14=0x460001",
		"0:PropGet 0x1c/4",
		"0:PropGet 0x8/4",
		"0:Identify cns=1 nsid=0",
		"0:GetLog lid=0x2 len=512 off=0 rae=false",
		"0:SetFeatures fid=0x7 cdw11=0x0",
		"1:Connect sqsize=127 kato=0 cntlid=0x1",
		"0:Identify cns=6 nsid=0",
		"0:Identify cns=2 nsid=0",
		"0:Identify cns=3 nsid=1",
		"0:Identify cns=0 nsid=1",
	}
	got := f.traceSnapshot()
	if !slices.Equal(got, want) {
		t.Errorf("connect sequence:\n got %q\nwant %q", got, want)
	}
	if c.CNTLID() != 1 || c.IOQueueCount() != 1 || c.QueueDepth() != 128 || c.InlineDataSize() != 4096 {
		t.Errorf("CNTLID %d queues %d depth %d inline %d", c.CNTLID(), c.IOQueueCount(), c.QueueDepth(), c.InlineDataSize())
	}
	ns, ok := c.Namespace(1)
	if !ok || ns.BlockSize != 4096 || ns.Blocks != f.cfg.Blocks || !ns.IDs.HasNGUID || string(ns.IDs.NGUID[:]) != "0123456789abcdef" {
		t.Errorf("namespace 1 = %+v, %v", ns, ok)
	}
	f.checkClean(t)
}

// NVMe/TCP 1.0 §3.6.2.3 and Linux nvme_tcp_init_connection: the ICResp
// fields the host insists on.
func TestDialRejectsICResp(t *testing.T) {
	tests := []struct {
		name   string
		digest bool
		edit   func(*nvme.ICResp)
		want   string
	}{
		{"PFV 1", false, func(r *nvme.ICResp) { r.PFV = 1 }, "PFV 1"},
		{"CPDA 1", false, func(r *nvme.ICResp) { r.CPDA = 1 }, "CPDA 1"},
		{"header digest not echoed", true, func(r *nvme.ICResp) { r.DGST = nvme.DigestData }, "header digest"},
		{"data digest not echoed", true, func(r *nvme.ICResp) { r.DGST = nvme.DigestHeader }, "data digest"},
		{"digest enabled unasked", false, func(r *nvme.ICResp) { r.DGST = nvme.DigestHeader }, "header digest"},
		{"MAXH2CDATA below 4096", false, func(r *nvme.ICResp) { r.MAXH2CDATA = 4092 }, "MAXH2CDATA 4092"},
		{"MAXH2CDATA not a multiple of 4", false, func(r *nvme.ICResp) { r.MAXH2CDATA = 8190 }, "MAXH2CDATA 8190"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTarget(t, fakeConfig{ICResp: tt.edit})
			_, err := Dial(testContext(t), f.addr(), Options{SubNQN: f.cfg.SubNQN, HeaderDigest: tt.digest, DataDigest: tt.digest})
			if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Dial error = %v, want ErrIncompatible mentioning %q", err, tt.want)
			}
		})
	}
}

// Linux nvme_init_identify / nvme_check_ctrl_fabric_info / nvme_tcp_setup_ctrl.
func TestDialRejectsIdentifyController(t *testing.T) {
	tests := []struct {
		name string
		edit func(*nvme.IdentifyController)
		want string
	}{
		{"CNTLID mismatch", func(id *nvme.IdentifyController) { id.CNTLID++ }, "Mismatching cntlid"},
		{"KAS 0", func(id *nvme.IdentifyController) { id.KAS = 0 }, "keep-alive support is mandatory"},
		{"IOCCSZ 3", func(id *nvme.IdentifyController) { id.IOCCSZ = 3 }, "capsule supported size 3"},
		{"IORCSZ 0", func(id *nvme.IdentifyController) { id.IORCSZ = 0 }, "response capsule"},
		{"ICDOFF 1", func(id *nvme.IdentifyController) { id.ICDOFF = 1 }, "icdoff"},
		{"SGLS 0", func(id *nvme.IdentifyController) { id.SGLS = 0 }, "sgls"},
		{"MNAN 0 with ANA", func(id *nvme.IdentifyController) { id.CMIC, id.MNAN = 0x0B, 0 }, "MNAN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTarget(t, fakeConfig{Identify: tt.edit})
			_, err := Dial(testContext(t), f.addr(), Options{SubNQN: f.cfg.SubNQN})
			if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Dial error = %v, want ErrIncompatible mentioning %q", err, tt.want)
			}
		})
	}
}

// I/O SQSIZE = min(queue_size, CAP.MQES+1, MAXCMD) - 1, as the Linux host
// clamps it.
func TestDialClampsQueueDepth(t *testing.T) {
	tests := []struct {
		name          string
		mqes, maxcmd  uint16
		depth, wantSQ int
	}{
		{"default", 127, 128, 0, 127},
		{"MQES 15", 15, 128, 0, 15},
		{"MAXCMD 8", 127, 8, 0, 7},
		{"asked 16", 127, 128, 16, 15},
		{"MAXCMD 0 is a firmware bug", 127, 0, 32, 31},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTarget(t, fakeConfig{MQES: tt.mqes, Identify: func(id *nvme.IdentifyController) { id.MAXCMD = tt.maxcmd }})
			c := dialFake(t, f, Options{QueueDepth: tt.depth})
			if c.QueueDepth() != tt.wantSQ+1 {
				t.Errorf("QueueDepth() = %d, want %d", c.QueueDepth(), tt.wantSQ+1)
			}
			if tr := f.traceSnapshot(); !slices.ContainsFunc(tr, func(s string) bool {
				return strings.HasPrefix(s, "1:Connect sqsize="+itoa(tt.wantSQ)+" ")
			}) {
				t.Errorf("no I/O Connect with SQSIZE %d in %q", tt.wantSQ, tr)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// NVMe-oF 1.1 §3.3: a Connect rejected with Invalid Parameters reports where.
func TestDialReportsConnectInvalidParameter(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{})
	_, err := Dial(testContext(t), f.addr(), Options{SubNQN: "nqn.2026-01.io.basalt:other"})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Status.Code() != 0x182 || !strings.Contains(err.Error(), "Connect data byte 256") {
		t.Fatalf("Dial error = %v, want Connect status 0x182 at data byte 256", err)
	}
	if s, ok := StatusOf(err); !ok || !s.DNR() {
		t.Errorf("StatusOf = %v, %v; want a DNR status", s, ok)
	}
}

func TestOptionsValidateReportsEveryProblem(t *testing.T) {
	o := Options{IOQueues: -1, QueueDepth: 5000, KATO: time.Microsecond}
	o.EnsureDefaults()
	err := o.Validate()
	for _, want := range []string{"SubNQN", "IOQueues", "QueueDepth", "KATO"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
	if !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Validate() = %v, want ErrInvalidOptions", err)
	}
	if o.HostNQN == "" || !strings.HasPrefix(o.HostNQN, "nqn.2014-08.org.nvmexpress:uuid:") {
		t.Errorf("default HostNQN %q", o.HostNQN)
	}
}

// With ANA, the host reads the ANA log at connect, configures AENs, keeps one
// AER outstanding, and re-reads the log on an ANA change notice.
func TestANAChangeEventRereadsLog(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{ANA: true})
	c := dialFake(t, f, Options{})
	tr := f.traceSnapshot()
	for _, want := range []string{
		"0:GetLog lid=0xc len=52 off=0 rae=false",
		"0:SetFeatures fid=0xb cdw11=0x800",
		"0:AER",
	} {
		if !slices.Contains(tr, want) {
			t.Errorf("trace lacks %q: %q", want, tr)
		}
	}
	if st, ok := c.ANAState(1); !ok || st != nvme.ANAOptimized {
		t.Fatalf("ANAState(1) = %v, %v", st, ok)
	}
	f.mu.Lock()
	f.cfg.ANAState = nvme.ANAInaccessible
	f.mu.Unlock()
	if !f.postEvent(c.CNTLID(), nvme.AENANAChange) {
		t.Fatal("no AER outstanding")
	}
	ev, err := c.WaitAsyncEvent(testContext(t))
	if err != nil || ev.DW0 != nvme.AENANAChange || ev.Type() != 2 || ev.Info() != 3 || ev.LID() != 0x0C {
		t.Fatalf("WaitAsyncEvent = %+v, %v", ev, err)
	}
	if st, _ := c.ANAState(1); st != nvme.ANAInaccessible {
		t.Errorf("ANAState(1) after the event = %v, want inaccessible", st)
	}
	waitFor(t, "a new AER", func() bool { return f.postEvent(c.CNTLID(), nvme.AENNSAttrChanged) })
	if ev, err := c.WaitAsyncEvent(testContext(t)); err != nil || ev.DW0 != nvme.AENNSAttrChanged {
		t.Fatalf("second event = %+v, %v", ev, err)
	}
	if !slices.Contains(f.traceSnapshot(), "0:GetLog lid=0x4 len=4096 off=0 rae=false") {
		t.Error("the Changed Namespace List was not read after a namespace notice")
	}
	f.checkClean(t)
}

// waitFor polls cond for up to 10 s (for effects of another goroutine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestWaitAsyncEventWithoutOAES(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{})
	c := dialFake(t, f, Options{})
	if _, err := c.WaitAsyncEvent(testContext(t)); !errors.Is(err, ErrNoAsyncEvents) {
		t.Fatalf("WaitAsyncEvent = %v, want ErrNoAsyncEvents", err)
	}
}

// Keep Alive every KATO/2 on the injected clock, as the Linux host sends it.
func TestKeepAliveEveryHalfKATO(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newFakeTarget(t, fakeConfig{})
	c := dialFake(t, f, Options{KATO: 10 * time.Second, Clock: clk})
	keepAlives := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.ctrls[c.CNTLID()].keepAlives
	}
	for i := 1; i <= 3; i++ {
		clk.BlockUntil(1) // the keep-alive ticker
		clk.Advance(5 * time.Second)
		waitFor(t, "a keep alive", func() bool { return keepAlives() == i })
	}
	if !strings.Contains(strings.Join(f.traceSnapshot(), "\n"), "0:Connect sqsize=31 kato=10000 ") {
		t.Error("admin Connect did not carry KATO 10000")
	}
}

func TestKeepAliveDisabled(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{})
	dialFake(t, f, Options{KATO: KeepAliveDisabled})
	if tr := f.traceSnapshot(); tr[0] != "0:Connect sqsize=31 kato=0 cntlid=0xffff" {
		t.Errorf("admin Connect = %q", tr[0])
	}
}

// Disconnect = CC.SHN 01b with EN kept, then wait SHST 10b, as
// `nvme disconnect` does.
func TestShutdownNotifiesController(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{})
	c := dialFake(t, f, Options{})
	if err := c.Shutdown(testContext(t)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	tr := f.traceSnapshot()
	tail := tr[len(tr)-3:]
	want := []string{"0:PropGet 0x14/4", "0:PropSet 0x14=0x464001", "0:PropGet 0x1c/4"}
	if !slices.Equal(tail, want) {
		t.Errorf("shutdown sequence %q, want %q", tail, want)
	}
	if err := c.Read(testContext(t), 1, 0, make([]byte, 4096)); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Shutdown = %v, want ErrClosed", err)
	}
}

// Close ends every goroutine the Controller started (receive, writer,
// keep-alive, events), also with commands in flight.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{ANA: true, OnIO: func(*fakeConn, *nvme.Command, []byte) bool { return true }})
	before := runtime.NumGoroutine()
	c, err := Dial(testContext(t), f.addr(), Options{SubNQN: f.cfg.SubNQN, IOQueues: 3})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error)
	go func() { errs <- c.Read(context.Background(), 1, 0, make([]byte, 4096)) }()
	waitFor(t, "the read to reach the target", func() bool {
		return slices.Contains(f.traceSnapshot(), "1:Read") || slices.Contains(f.traceSnapshot(), "2:Read") ||
			slices.Contains(f.traceSnapshot(), "3:Read")
	})
	c.Close()
	if err := <-errs; !errors.Is(err, ErrClosed) || !errors.Is(err, ErrConnectionLost) {
		t.Errorf("Read in flight during Close = %v", err)
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}
