package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"basalt/pkg/api"
)

// cutoffBound is the bound README states for a volume delete and for a
// node's clean stop with hosts in the middle of writes.
const cutoffBound = 10 * time.Second

// TestKernelHostCutOffMidWrite has a Linux host write 1 MiB O_DIRECT blocks
// (each through R2T) through a proxy, freezes the host's data in flight so
// that the node holds writes waiting for their H2C data, and then cuts the
// connection. The volume is then deleted and the node stopped: the node
// must drop the volume and stop cleanly (exit 0), each within cutoffBound.
// Before teardown completed requests waiting for data, their namespace
// references leaked and both waited for ever.
func TestKernelHostCutOffMidWrite(t *testing.T) {
	Setup(t)
	kc := startKCluster(t, 1)
	nd := kc.nodes[0]
	v := kc.createVolume(api.CreateVolumeRequest{Name: "cut", Size: 128 << 20, RF: 1, Hosts: []string{hostNQN}})
	px := startCutProxy(t, "127.0.0.1:"+strconv.Itoa(nd.nvmePort))

	vars := map[string]string{"ADDR": "10.0.2.2", "PORT": strconv.Itoa(px.port()), "SUBNQN": v.NQN, "HOSTNQN": hostNQN}
	script := GuestScript(vars, []string{"cutoff.sh"}, "cut_path() { mark cut; }\ncutoff_flow\n")
	var deleted, stopped time.Duration
	stopCode := -1
	onMark := func(name string) {
		if name != "cut" {
			t.Errorf("unexpected guest mark %q", name)
			return
		}
		px.freeze() // the host's data stops; the node's R2Ts wait for it
		time.Sleep(time.Second)
		px.cut()
		t.Logf("cut the host's connections (%d bytes host→node frozen in the proxy)", px.held())
		deleted = kc.deleteAndWaitGone(nd, "cut")
		stopCode, stopped = kc.terminate(nd)
	}
	r := Boot(t, BootOptions{Script: script, Timeout: 4 * time.Minute, OnMark: onMark})
	RequireOK(t, r)
	t.Logf("FIGURE volume delete with a host cut off mid-write: gone in %v; node stop: exit %d in %v",
		deleted.Round(time.Millisecond), stopCode, stopped.Round(time.Millisecond))
	if deleted <= 0 || deleted > cutoffBound {
		t.Errorf("the volume was not gone from the node within %v (took %v)", cutoffBound, deleted)
	}
	if stopCode != 0 || stopped > cutoffBound {
		t.Errorf("the node's stop: exit %d after %v; want a clean stop (0) within %v", stopCode, stopped, cutoffBound)
	}
}

// deleteAndWaitGone deletes the volume and returns how long until nd
// neither serves it nor is still taking it down (0 if it is after twice
// cutoffBound).
func (kc *kcluster) deleteAndWaitGone(nd *knode, name string) time.Duration {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*cutoffBound)
	defer cancel()
	if err := kc.client(nd).DeleteVolume(ctx, name); err != nil {
		kc.t.Errorf("volume delete %s: %v", name, err)
		return 0
	}
	for ctx.Err() == nil {
		lv, err := kc.client(nd).Local(ctx)
		if err == nil && !servesVolume(lv, name) && !slices.Contains(lv.Removing, name) {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	kc.t.Errorf("node%d still serves %s %v after the delete", nd.id, name, 2*cutoffBound)
	return 0
}

func servesVolume(lv api.LocalView, name string) bool {
	for _, v := range lv.Volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}

// terminate sends nd one SIGTERM and returns its exit code and how long it
// took to exit (-1 if it had not after 3×cutoffBound; it is then killed).
func (kc *kcluster) terminate(nd *knode) (int, time.Duration) {
	nd.mu.Lock()
	cmd, exited := nd.cmd, nd.exited
	nd.mu.Unlock()
	start := time.Now()
	if cmd == nil || cmd.Process.Signal(syscall.SIGTERM) != nil {
		kc.t.Errorf("node%d is not running", nd.id)
		return -1, 0
	}
	select {
	case <-exited:
		nd.mu.Lock()
		nd.cmd = nil
		nd.mu.Unlock()
		return cmd.ProcessState.ExitCode(), time.Since(start)
	case <-time.After(3 * cutoffBound):
		kc.kill(nd)
		return -1, time.Since(start)
	}
}

// cutProxy forwards TCP connections to one address; freeze stops the bytes
// from the clients (the host's commands and data) while the node's side
// keeps flowing, cut closes every connection and refuses new ones.
type cutProxy struct {
	t  *testing.T
	ln net.Listener
	to string

	mu     sync.Mutex
	conns  []net.Conn
	frozen bool
	unsent int // bytes from clients held back while frozen
}

func startCutProxy(t *testing.T, to string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, ln: ln, to: to}
	go p.accept()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c)
		go func() { _, _ = io.Copy(c, up) }()
	}
}

// pipe copies the client's bytes to the node unless frozen.
func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			frozen := p.frozen
			if frozen {
				p.unsent += n
			}
			p.mu.Unlock()
			if !frozen {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			return
		}
	}
}

func (p *cutProxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

func (p *cutProxy) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unsent
}

// cut closes the listener and every connection at once (RST where the
// kernel can: SO_LINGER 0).
func (p *cutProxy) cut() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	p.conns = nil
}
