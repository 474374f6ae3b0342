package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"basalt/tests/ports"
)

// basaltd's namespace in these tests.
const (
	basaltdNSBytes   = 256 << 20
	basaltdBlockSize = 4096
	basaltdPortID    = 1
)

// TestKernelHostAgainstBasaltd is the acceptance test: a Debian 12 kernel
// host discovers, connects to, formats, mounts and disconnects from a
// subsystem served by basaltd (file-backed namespace), with a host that is
// not on the host list refused, and a clean kernel log.
func TestKernelHostAgainstBasaltd(t *testing.T) {
	Setup(t)
	d := newDaemon(t, backendFile)
	d.start()
	tg := d.target()
	script := GuestScript(tg.vars(), []string{"hostflow.sh"}, "host_flow\n")
	r := Boot(t, BootOptions{Script: script, Timeout: 4 * time.Minute})
	RequireOK(t, r)
	checkHostFlow(t, r.Console, tg)
	CheckDmesg(t, r.Console, tg.dmesgAllow())
	d.stop()
}

// TestKernelHostSurvivesTargetKill kills basaltd (SIGKILL) under a host's
// background writes and restarts it on the same port with the same
// file-backed namespace: the host must see the path fail without hanging,
// reconnect (reconnect_delay=1, ctrl_loss_tmo=30), finish the stalled writes,
// and read back what was written before the kill.
func TestKernelHostSurvivesTargetKill(t *testing.T) {
	for _, b := range []backendKind{backendFile, backendStore} {
		t.Run(string(b), func(t *testing.T) { testKernelHostSurvivesTargetKill(t, b) })
	}
}

// TestKernelHostAgainstStoreBackedBasaltd runs the acceptance flow against a
// namespace served by the log-structured store (three file drives, parity
// 1, write buffer in a mapped file): dd, mkfs.ext4, mount, checksums.
func TestKernelHostAgainstStoreBackedBasaltd(t *testing.T) {
	Setup(t)
	d := newDaemon(t, backendStore)
	d.start()
	tg := d.target()
	script := GuestScript(tg.vars(), []string{"hostflow.sh"}, "host_flow\n")
	r := Boot(t, BootOptions{Script: script, Timeout: 4 * time.Minute})
	RequireOK(t, r)
	checkHostFlow(t, r.Console, tg)
	CheckDmesg(t, r.Console, tg.dmesgAllow())
	d.stop()
}

func testKernelHostSurvivesTargetKill(t *testing.T, b backendKind) {
	Setup(t)
	d := newDaemon(t, b)
	d.start()
	tg := d.target()
	body := "target_kill() { mark kill-target; }\ntarget_restart() { mark restart-target; }\nfailover_flow\n"
	script := GuestScript(tg.vars(), []string{"failover.sh"}, body)
	var kills, restarts int
	onMark := func(name string) {
		switch name {
		case "kill-target":
			kills++
			d.kill()
		case "restart-target":
			restarts++
			d.start()
		default:
			t.Errorf("unexpected guest mark %q", name)
		}
	}
	r := Boot(t, BootOptions{Script: script, Timeout: 4 * time.Minute, OnMark: onMark})
	RequireOK(t, r)
	if kills != 1 || restarts != 1 {
		t.Errorf("guest asked for %d kills and %d restarts, want 1 and 1", kills, restarts)
	}
	checkFailover(t, r.Console)
	CheckDmesg(t, r.Console, tg.dmesgAllow())
	d.stop()
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// basaltdBinary builds basalt/cmd/basaltd once per test binary, or returns
// $BASALT_E2E_BASALTD (a prebuilt binary) when that is set.
func basaltdBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("BASALT_E2E_BASALTD"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "basalt-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "basaltd")
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("go toolchain not in PATH: %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", buildBin, "basalt/cmd/basaltd")
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build basalt/cmd/basaltd: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// daemon is a basaltd subprocess; start after kill reuses port and config.
type daemon struct {
	t       *testing.T
	bin     string
	cfg     string
	logPath string
	port    int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, valid after done is closed
}

// backendKind selects what serves the test namespace.
type backendKind string

const (
	backendFile  backendKind = "file"  // a file with O_DIRECT where possible
	backendStore backendKind = "store" // the log-structured store (pkg/store)
)

func newDaemon(t *testing.T, b backendKind) *daemon {
	t.Helper()
	dir := t.TempDir()
	d := &daemon{t: t, bin: basaltdBinary(t), cfg: filepath.Join(dir, "basaltd.toml"),
		logPath: filepath.Join(dir, "basaltd.log"), port: freePort(t)}
	cfg := fmt.Sprintf(`[node]
name = "node1"

[nvme]
listen = "127.0.0.1:%d"
advertise = "10.0.2.2:%d"
port_id = %d

[[subsystem]]
nqn = %q
allow_any_host = false
hosts = [%q]

  [[subsystem.namespace]]
  nsid = 1
  backend = %q
  path = %q
  size = "%dMiB"
  block_size = %d
`, d.port, d.port, basaltdPortID, subNQN, hostNQN, string(b), filepath.Join(dir, "ns1.img"),
		basaltdNSBytes>>20, basaltdBlockSize)
	if b == backendStore {
		cfg = fmt.Sprintf("[node]\ndata_dir = %q\n\n", dir) + strings.Replace(cfg, "[node]\n", "[node_]\n", 1)
		cfg = strings.Replace(cfg, "[node_]\nname = \"node1\"\n", "", 1)
		cfg += fmt.Sprintf(`
[store]
drives = [%q, %q, %q]
drive_size = "256MiB"
buffer = %q
buffer_size = "64MiB"
parity = 1
`, filepath.Join(dir, "drive0"), filepath.Join(dir, "drive1"), filepath.Join(dir, "drive2"), filepath.Join(dir, "wbuf"))
	}
	if err := os.WriteFile(d.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.kill()
		if t.Failed() {
			if b, err := os.ReadFile(d.logPath); err == nil {
				t.Logf("basaltd log (%s):\n%s", d.cfg, tail(string(b), 150))
			}
		}
	})
	return d
}

func (d *daemon) target() target {
	return target{addr: "10.0.2.2", port: d.port, nsBytes: basaltdNSBytes,
		blockSize: basaltdBlockSize, portID: basaltdPortID}
}

// start launches basaltd and waits until it accepts TCP connections. It may
// run on the console reader goroutine, so it reports with Errorf, not Fatal.
func (d *daemon) start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd != nil {
		d.t.Errorf("basaltd: start while running")
		return
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Errorf("basaltd: %v", err)
		return
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(d.bin, "--config", d.cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		d.t.Errorf("basaltd: start: %v", err)
		return
	}
	done := make(chan struct{})
	d.cmd, d.done = cmd, done
	go func() {
		err := cmd.Wait()
		d.mu.Lock()
		d.err = err
		d.mu.Unlock()
		close(done)
	}()
	if err := waitListening(d.port, done, 20*time.Second); err != nil {
		d.t.Errorf("basaltd: %v", err)
	}
}

func waitListening(port int, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before listening on %s", addr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s after %s: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone. No-op if stopped.
func (d *daemon) kill() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// stop sends SIGTERM and requires a clean exit (status 0) within 15 s.
func (d *daemon) stop() {
	d.t.Helper()
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		d.t.Errorf("basaltd: stop while not running")
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		d.t.Errorf("basaltd did not exit within 15 s of SIGTERM")
		d.kill()
		return
	}
	d.mu.Lock()
	d.cmd = nil
	err := d.err
	d.mu.Unlock()
	if err != nil {
		d.t.Errorf("basaltd exit after SIGTERM: %v (want status 0)", err)
	}
}

// freePort returns a loopback port free right now (package ports says why
// not port 0).
func freePort(t *testing.T) int {
	t.Helper()
	return ports.Free(t)
}
