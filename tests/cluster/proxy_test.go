package cluster_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is a fault-injecting TCP proxy: it forwards the connections it
// accepts to target until it is blocked; blocking cuts every connection it
// carries and refuses new ones (a network partition as TCP sees it when
// the peer's packets vanish and the connection is reset). Delay adds
// latency to every chunk forwarded. It counts the bytes it forwarded each
// way.
type proxy struct {
	ln     net.Listener
	target string

	// toTarget counts the bytes forwarded to target, fromTarget those
	// forwarded back to the connections' dialers.
	toTarget, fromTarget atomic.Int64

	mu      sync.Mutex
	blocked bool
	delay   time.Duration
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c)
		}()
	}
}

// track registers c unless the proxy is blocked.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *proxy) pipe(in net.Conn) {
	defer p.untrack(in)
	out, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	if !p.track(out) {
		out.Close()
		return
	}
	defer p.untrack(out)
	done := make(chan struct{}, 2)
	go func() { p.copy(out, in, &p.toTarget); done <- struct{}{} }()
	go func() { p.copy(in, out, &p.fromTarget); done <- struct{}{} }()
	<-done // one direction ended: end both
}

// copy forwards src to dst, adding what it wrote to count.
func (p *proxy) copy(dst, src net.Conn, count *atomic.Int64) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d, blocked := p.delay, p.blocked
			p.mu.Unlock()
			if blocked {
				return
			}
			if d > 0 {
				time.Sleep(d)
			}
			w, werr := dst.Write(buf[:n])
			count.Add(int64(w))
			if werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

// setBlocked cuts (true) or restores (false) the link.
func (p *proxy) setBlocked(b bool) {
	p.mu.Lock()
	p.blocked = b
	var cut []net.Conn
	if b {
		for c := range p.conns {
			cut = append(cut, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.Close()
	}
}

// setDelay adds d to every chunk forwarded.
func (p *proxy) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.ln.Close()
	p.setBlocked(true)
	p.wg.Wait()
}

func TestProxyForwardsAndPartitions(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p := newProxy(t, echo.Addr().String())
	roundTrip := func() error {
		c, err := net.DialTimeout("tcp", p.addr(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		if string(b) != "ping" {
			return errors.New("garbled")
		}
		return nil
	}
	if err := roundTrip(); err != nil {
		t.Fatalf("open link: %v", err)
	}
	// The counts are added just after each write: poll for them.
	for deadline := time.Now().Add(time.Second); p.toTarget.Load() != 4 || p.fromTarget.Load() != 4; {
		if time.Now().After(deadline) {
			t.Fatalf("counted %d bytes to the target and %d back, want 4 and 4", p.toTarget.Load(), p.fromTarget.Load())
		}
		time.Sleep(time.Millisecond)
	}
	// A connection open across the partition is cut.
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	p.setBlocked(true)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(b); err == nil {
		t.Error("a connection survived the partition")
	}
	if err := roundTrip(); err == nil {
		t.Error("a new connection crossed the partition")
	}
	p.setBlocked(false)
	if err := roundTrip(); err != nil {
		t.Fatalf("healed link: %v", err)
	}
	p.setDelay(50 * time.Millisecond)
	start := time.Now()
	if err := roundTrip(); err != nil || time.Since(start) < 100*time.Millisecond {
		t.Errorf("delayed link: %v after %v", err, time.Since(start))
	}
}
