package cluster_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"basalt/pkg/nvme"
	"basalt/pkg/nvme/host"
	"basalt/tests/ports"
)

// The hostile clients of issue 14 against a basaltd process. The limits
// are lowered so that the attack is quick; the timeouts are long, so that
// none ends a hostile connection while the test measures.
const (
	hostileIdle       = 2000 // TCP connections that never send a byte
	hostileAfterICReq = 500  // connections that stop after their ICReq
	hostileR2THosts   = 100  // controllers (admin + one I/O queue each) holding R2Ts
	hostileMaxWrite   = 64 << 20
	hostileCtrlWrite  = 512 << 10
	hostileMaxRead    = 64 << 20
	// hostileWriteSize is MDTS (target.DefaultMDTS: 128 KiB) and
	// hostileQueueDepth the deepest I/O queue the target allows (CAP.MQES
	// + 1): each hostile I/O queue sends that many writes of that size.
	hostileWriteSize  = 128 << 10
	hostileQueueDepth = 128
	// hostileHeldBack is what an R2T holder keeps of each write's data:
	// it sends the rest, so that the buffer the R2T granted is written,
	// and resident. (A buffer whose data never comes is never touched and
	// costs a process no resident memory: with the write limits at 1 TiB
	// and no data sent, 12,800 R2Ts for 1.6 GiB of buffers grew VmRSS by
	// 55 MiB, within the bound.)
	hostileHeldBack = 4 << 10
	// README's per-connection figures ("When things fail"): at most
	// 32 KiB for a connection until its Connect, 64 KiB for an admin
	// queue, 300 KiB for an I/O queue (its 256 KiB receive buffer and its
	// state), beyond the data buffers the limits bound.
	readmePreConnect = 32 << 10
	readmeAdminQueue = 64 << 10
	readmeIOQueue    = 300 << 10
	hostileNQN       = "nqn.2026-11.io.basalt:hostile"
	hostileNSSize    = 16 << 20
	hostileBlock     = 4096
)

// hostileConfig is the node's configuration: one subsystem with a memory
// namespace, any host allowed, no [cluster] section. Its limits are
// hostileMaxWrite, hostileCtrlWrite and hostileMaxRead, which the bound is
// computed from.
const hostileConfig = `[node]
name = "hostile"
data_dir = %q
[nvme]
listen = %q
advertise = %q
max_write_bytes = "64MiB"
max_controller_write_bytes = "512KiB"
max_read_bytes = "64MiB"
icreq_timeout = "5m"
connect_timeout = "5m"
h2c_data_timeout = "5m"
[log]
level = "info"
[[subsystem]]
nqn = %q
allow_any_host = true
  [[subsystem.namespace]]
  nsid = 1
  backend = "memory"
  size = "16MiB"
`

// TestHostileClientsBoundedRSS is issue 14's hostile-client check on a real
// node: one basaltd process gets 2,000 idle TCP connections, 500 that stop
// after a valid ICReq, and 100 controllers whose I/O queue (depth 128)
// sends 128 writes of 128 KiB and never completes one, so that each holds
// the R2Ts its controller's write budget allows (512 KiB / 128 KiB = 4) and
// the other 124 wait. To each R2T it sends all of the data but the last
// 4 KiB, so that the node has written every buffer it granted (see
// hostileHeldBack). Meanwhile a normal host writes and reads back its data.
// The node's resident memory (VmRSS, the largest of five samples over
// about a second) grows by no more than the bound README states:
//
//	max_write_bytes + max_read_bytes + 32 KiB × connections before Connect
//	  + 64 KiB × admin queues + 300 KiB × I/O queues
//	= 64 MiB + 64 MiB + 32 KiB × 2,500 + 64 KiB × 101 + 300 KiB × 101
//
// (101: the 100 hostile controllers and the normal host's), about 242 MiB.
// Afterwards every hostile connection is still open (no limit or timeout
// ended it, so its memory was held while measured) and no I/O queue got
// more R2Ts than its budget allows.
func TestHostileClientsBoundedRSS(t *testing.T) {
	needProcesses(t)
	conns := hostileIdle + hostileAfterICReq + 2*hostileR2THosts + 2
	raiseNoFile(t, uint64(conns)+512) // basaltd inherits it
	addr, pid := startHostileNode(t)
	baseline := vmRSS(t, pid)
	t.Logf("FIGURE baseline VmRSS %s", mib(baseline))

	var all []*rawConn
	t.Cleanup(func() {
		for _, c := range all {
			c.Close()
		}
	})
	idle := dialIdle(t, addr)
	all = append(all, idle...)
	// One ICReq first: the target accepts in order, so its ICResp says
	// that every idle connection has been accepted.
	afterICReq := dialAfterICReq(t, addr, 1)
	all = append(all, afterICReq...)
	withIdle := vmRSS(t, pid)
	more := dialAfterICReq(t, addr, hostileAfterICReq-1)
	all = append(all, more...)
	afterICReq = append(afterICReq, more...)
	withICReq := vmRSS(t, pid)
	admins, holders := holdR2Ts(t, addr)
	all = append(all, admins...)
	for _, h := range holders {
		all = append(all, h.q)
	}
	withR2T := vmRSS(t, pid)
	t.Logf("FIGURE VmRSS with the idle connections %s (%.1f KiB each), after ICReq %s (%.1f KiB each), "+
		"with the R2T holders %s (%.1f KiB per controller, %d KiB of it granted write buffers)",
		mib(withIdle), kibPer(withIdle-min(withIdle, baseline), hostileIdle),
		mib(withICReq), kibPer(withICReq-min(withICReq, withIdle), hostileAfterICReq-1),
		mib(withR2T), kibPer(withR2T-min(withR2T, withICReq), hostileR2THosts), hostileCtrlWrite>>10)

	peak, done := sampleDuringNormalIO(t, addr, pid)
	queues := hostileR2THosts + 1
	bound := uint64(hostileMaxWrite + hostileMaxRead + readmePreConnect*(hostileIdle+hostileAfterICReq) +
		(readmeAdminQueue+readmeIOQueue)*queues)
	grew := peak - min(peak, baseline)
	t.Logf("FIGURE peak VmRSS with the normal host's I/O %s (%d writes read back)", mib(peak), done)
	t.Logf("FIGURE growth %s for %d connections (%.1f KiB each), bound %s = %s + %s + %d × 32 KiB + %d × (64 + 300) KiB",
		mib(grew), conns, kibPer(grew, conns), mib(bound), mib(hostileMaxWrite), mib(hostileMaxRead),
		hostileIdle+hostileAfterICReq, queues)
	if grew > bound {
		t.Errorf("basaltd's VmRSS grew by %s with hostile clients, README's bound is %s", mib(grew), mib(bound))
	}
	checkStillHeld(t, idle, afterICReq, admins)
	checkR2TsHeld(t, holders)
}

// startHostileNode starts basaltd with hostileConfig and returns its NVMe
// address and PID once it serves.
func startHostileNode(t *testing.T) (string, int) {
	t.Helper()
	dir := t.TempDir()
	addr := ports.FreeAddr(t)
	cfg := filepath.Join(dir, "basaltd.toml")
	body := fmt.Sprintf(hostileConfig, dir, addr, addr, hostileNQN)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := exec.Command(basaltd, "--config", cfg)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
			t.Errorf("basaltd exited during the test: %v", cmd.ProcessState)
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("basaltd output (end):\n%s", tail(out.String(), 4000))
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(out.String(), "nvme connect-all") {
		select {
		case <-exited:
			t.Fatalf("basaltd exited: %v\n%s", cmd.ProcessState, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("basaltd not serving after 15 s:\n%s", out.String())
		}
	}
	return addr, cmd.Process.Pid
}

// dialIdle opens the idle connections, from four source addresses so that
// none reaches max_connections_per_host (default 1024).
func dialIdle(t *testing.T, addr string) []*rawConn {
	t.Helper()
	cs := make([]*rawConn, 0, hostileIdle)
	for i := range hostileIdle {
		c, err := dialRawFrom(fmt.Sprintf("127.0.1.%d", 1+i%4), addr)
		if err != nil {
			closeAll(cs)
			t.Fatalf("idle connection %d: %v", i, err)
		}
		cs = append(cs, c)
	}
	return cs
}

// dialAfterICReq opens n connections that send an ICReq, read the ICResp
// and stop.
func dialAfterICReq(t *testing.T, addr string, n int) []*rawConn {
	t.Helper()
	cs := make([]*rawConn, n)
	err := parallel(16, n, func(i int) error {
		c, err := dialRawFrom("127.0.2.1", addr)
		if err != nil {
			return err
		}
		cs[i] = c
		return c.icreq()
	})
	if err != nil {
		closeAll(cs)
		t.Fatalf("connections stopping after ICReq: %v", err)
	}
	return cs
}

// r2tHolder is a hostile controller's I/O queue and what it was sent.
type r2tHolder struct {
	q *rawConn
	// answered counts the R2Ts answered; granted is closed when they
	// reach the number the controller's budget allows; stopped receives
	// why the queue stopped reading (the connection ended, or a PDU that
	// is not an R2T came).
	answered atomic.Int32
	granted  chan struct{}
	stopped  chan error
}

// holdR2Ts creates the hostile controllers: each an admin queue (ICReq,
// Connect, CC.EN) and one I/O queue of depth hostileQueueDepth that sends
// as many writes and answers every R2T it gets with all of the write's
// data but the last hostileHeldBack bytes. It returns once each has
// answered the R2Ts its controller budget allows.
func holdR2Ts(t *testing.T, addr string) (admins []*rawConn, holders []*r2tHolder) {
	t.Helper()
	admins, holders = make([]*rawConn, hostileR2THosts), make([]*r2tHolder, hostileR2THosts)
	partial := bytes.Repeat([]byte{0x5a}, hostileWriteSize-hostileHeldBack)
	const want = hostileCtrlWrite / hostileWriteSize
	err := parallel(16, hostileR2THosts, func(i int) error {
		nqn := fmt.Sprintf("nqn.2026-11.io.basalt:hostile-host-%d", i)
		a, err := dialRawFrom("127.0.3.1", addr)
		if err != nil {
			return err
		}
		admins[i] = a
		if err := a.icreq(); err != nil {
			return err
		}
		cntlid, err := a.connect(0, 31, nvme.CNTLIDDynamic, hostileNQN, nqn)
		if err != nil {
			return err
		}
		if err := a.enable(); err != nil {
			return err
		}
		q, err := dialRawFrom("127.0.3.1", addr)
		if err != nil {
			return err
		}
		h := &r2tHolder{q: q, granted: make(chan struct{}), stopped: make(chan error, 1)}
		holders[i] = h
		if err := q.icreq(); err != nil {
			return err
		}
		if _, err := q.connect(1, hostileQueueDepth-1, cntlid, hostileNQN, nqn); err != nil {
			return err
		}
		w := q.writes(hostileQueueDepth, 1, hostileWriteSize/hostileBlock, hostileBlock, hostileNSSize/hostileBlock)
		if _, err := q.c.Write(w); err != nil {
			return err
		}
		go func() {
			h.stopped <- q.answerR2Ts(hostileWriteSize, partial, func() {
				if h.answered.Add(1) == want {
					close(h.granted)
				}
			})
		}()
		select {
		case <-h.granted:
			return nil
		case err := <-h.stopped:
			return fmt.Errorf("I/O queue: %w", err)
		case <-time.After(rawReadTimeout):
			return fmt.Errorf("%d R2Ts after %v, want %d", h.answered.Load(), rawReadTimeout, want)
		}
	})
	if err != nil {
		closeAll(admins)
		for _, h := range holders {
			if h != nil {
				h.q.Close()
			}
		}
		t.Fatalf("controllers holding R2Ts: %v", err)
	}
	return admins, holders
}

// sampleDuringNormalIO runs a normal host's writes and reads (128 KiB,
// through R2T, each read back and compared) while it samples the node's
// VmRSS five times over about a second. It returns the largest sample and
// the number of writes read back.
func sampleDuringNormalIO(t *testing.T, addr string, pid int) (uint64, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := host.Dial(ctx, addr, host.Options{SubNQN: hostileNQN, HostNQN: hostNQN, KATO: 2 * time.Second,
		QueueDepth: 32, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("the normal host's Dial: %v", err)
	}
	defer c.Close()
	stop := make(chan struct{})
	result := make(chan error, 1)
	var done int
	go func() {
		got := make([]byte, hostileWriteSize)
		for i := 0; ; i++ {
			select {
			case <-stop:
				result <- nil
				return
			default:
			}
			lba := uint64(i%64) * hostileWriteSize / hostileBlock
			data := bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xa5, 0x5a}, hostileWriteSize/4)
			if err := c.Write(ctx, 1, lba, data, false); err != nil {
				result <- fmt.Errorf("write %d: %w", i, err)
				return
			}
			if err := c.Read(ctx, 1, lba, got); err != nil {
				result <- fmt.Errorf("read %d: %w", i, err)
				return
			}
			if !bytes.Equal(got, data) {
				result <- fmt.Errorf("write %d at LBA %d reads back different data", i, lba)
				return
			}
			done = i + 1
		}
	}()
	var peak uint64
	for range 5 {
		time.Sleep(200 * time.Millisecond)
		peak = max(peak, vmRSS(t, pid))
	}
	close(stop)
	if err := <-result; err != nil {
		t.Fatalf("the normal host's I/O beside the hostile clients: %v", err)
	}
	if done == 0 {
		t.Fatal("the normal host completed no write and read in a second")
	}
	return peak, done
}

// checkStillHeld checks that every connection is still open and has got
// nothing more than it read.
func checkStillHeld(t *testing.T, idle, afterICReq, admins []*rawConn) {
	t.Helper()
	for _, g := range []struct {
		name string
		cs   []*rawConn
	}{{"idle", idle}, {"after ICReq", afterICReq}, {"admin", admins}} {
		var mu sync.Mutex
		var bad int
		var first error
		var wg sync.WaitGroup
		for _, c := range g.cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.quiet(300 * time.Millisecond); err != nil {
					mu.Lock()
					bad++
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if bad > 0 {
			t.Errorf("%d of %d %s connections not held quietly: first: %v", bad, len(g.cs), g.name, first)
		}
	}
}

// checkR2TsHeld checks that every hostile I/O queue is still open and got
// no more R2Ts than its controller's write budget allows (checkStillHeld's
// wait gave a late one time to come).
func checkR2TsHeld(t *testing.T, holders []*r2tHolder) {
	t.Helper()
	const want = hostileCtrlWrite / hostileWriteSize
	var over, stopped int
	var first error
	for _, h := range holders {
		if h.answered.Load() != want {
			over++
		}
		select {
		case err := <-h.stopped:
			stopped++
			first = cmp.Or(first, err)
		default:
		}
	}
	if over > 0 {
		t.Errorf("%d of %d I/O queues got more R2Ts than the %d their controller's budget allows", over, len(holders), want)
	}
	if stopped > 0 {
		t.Errorf("%d of %d I/O queues holding R2Ts ended: first: %v", stopped, len(holders), first)
	}
}

// parallel runs f(0..n-1) on up to workers goroutines and returns the
// first error.
func parallel(workers, n int, f func(i int) error) error {
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- fmt.Errorf("%d: %w", i, err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

func closeAll(cs []*rawConn) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

// vmRSS returns the resident set size of process pid (VmRSS in
// /proc/PID/status).
func vmRSS(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading basaltd's status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

func kibPer(n uint64, per int) float64 { return float64(n) / float64(per) / 1024 }

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// raiseNoFile raises the soft limit on open files to need (children
// inherit it), or skips the test if the hard limit is lower.
func raiseNoFile(t *testing.T, need uint64) {
	t.Helper()
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if r.Cur >= need {
		return
	}
	if r.Max < need {
		t.Skipf("%d file descriptors needed by the test and by basaltd, the hard limit is %d (raise ulimit -Hn)",
			need, r.Max)
	}
	r.Cur = r.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Skipf("setrlimit to %d: %v", r.Max, err)
	}
}
