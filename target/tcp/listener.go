package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"basalt/target"
)

// Accept back-off bounds (net/http server.go: 5 ms doubling to 1 s).
const (
	acceptDelayMin = 5 * time.Millisecond
	acceptDelayMax = time.Second
)

// Listener accepts NVMe/TCP connections for one target port. Each
// connection carries one NVMe queue (admin or I/O) and gets its own core
// submission queue from Target.NewSQ. Connections beyond the Budget's
// limits are closed as soon as they are accepted; the handshake deadlines
// of all connections are kept by one watchdog goroutine.
type Listener struct {
	ln      net.Listener
	opts    Options
	newCore coreFactory
	wd      *watchdog

	inShutdown atomic.Bool
	done       chan struct{} // closed when shutting down; stops accept back-off
	doneOnce   sync.Once
	tls        *tlsPort // nil: the port offers no TLS
	mu         struct {
		sync.Mutex
		conns map[*queue]struct{}
		// pending are connections in their TLS handshake (or waiting
		// for their first byte), before they have a queue.
		pending map[net.Conn]struct{}
	}
	conns sync.WaitGroup // one per connection goroutine
	wdRun sync.WaitGroup // the watchdog goroutine (Serve starts it)
}

// Listen opens a TCP listener on addr for port of t. It does not accept
// connections until Serve is called.
func Listen(t *target.Target, port *target.Port, addr string, opts Options) (*Listener, error) {
	if t == nil || port == nil {
		return nil, fmt.Errorf("%w: nil target or port", ErrInvalidOptions)
	}
	l, err := listen(addr, func(ops target.QueueOps) queueCore { return t.NewSQ(ops, port) }, opts)
	if err != nil {
		return nil, err
	}
	if mode := port.Config().TLS; mode != target.TLSNone {
		l.tls = newTLSPort(mode, targetPSKs(t))
	}
	return l, nil
}

func listen(addr string, newCore coreFactory, opts Options) (*Listener, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: while listening on %s: %w", addr, err)
	}
	return newListener(ln, newCore, opts), nil
}

// newListener wraps an open net.Listener; opts must be validated.
func newListener(ln net.Listener, newCore coreFactory, opts Options) *Listener {
	l := &Listener{ln: ln, opts: opts, newCore: newCore, done: make(chan struct{})}
	l.wd = newWatchdog(opts.Clock, l.done)
	l.mu.conns = make(map[*queue]struct{})
	l.mu.pending = make(map[net.Conn]struct{})
	return l
}

// Budget returns the Budget the Listener counts its connections and
// buffers in (Options.Budget), for its Stats.
func (l *Listener) Budget() *Budget { return l.opts.Budget }

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Serve accepts connections until Shutdown or Close. Temporary accept errors
// (such as running out of file descriptors) are logged and retried with a
// back-off from 5 ms to 1 s. Serve always returns a non-nil error and closes
// the listener; after Shutdown or Close the error is ErrServerClosed.
func (l *Listener) Serve() error {
	defer l.ln.Close()
	l.wdRun.Add(1)
	go func() {
		defer l.wdRun.Done()
		l.wd.run()
	}()
	var delay time.Duration
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if l.inShutdown.Load() {
				return ErrServerClosed
			}
			var temp interface{ Temporary() bool }
			if !errors.As(err, &temp) || !temp.Temporary() {
				return fmt.Errorf("tcp: while accepting: %w", err)
			}
			delay = min(max(2*delay, acceptDelayMin), acceptDelayMax)
			l.opts.Logger.Warn("nvme/tcp: accept error; retrying", "err", err, "delay", delay)
			if !l.sleep(delay) {
				return ErrServerClosed
			}
			continue
		}
		delay = 0
		l.serveConn(conn)
	}
}

// sleep waits d on the Listener's clock; it returns false if the listener
// shuts down first.
func (l *Listener) sleep(d time.Duration) bool {
	t := l.opts.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-l.done:
		return false
	}
}

// serveConn admits a new connection within the Budget's limits, starts its
// goroutine with its ICReq deadline, and tracks it. A connection over a
// limit is closed at once: nothing has been read from it, and NVMe/TCP has
// no PDU that could refuse it before its ICReq.
func (l *Listener) serveConn(conn net.Conn) {
	b := l.opts.Budget
	host := hostOf(conn)
	if reason := b.admit(host); reason != admitted {
		l.logRefused(conn, reason)
		conn.Close()
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true) // PDUs are latency-bound; the sender batches itself
	}
	if l.tls != nil {
		l.serveSecure(conn, host)
		return
	}
	l.startQueue(conn, target.SecureChannel{}, host)
}

// startQueue gives an admitted connection its queue and goroutine.
func (l *Listener) startQueue(conn net.Conn, sc target.SecureChannel, host netip.Addr) {
	b := l.opts.Budget
	q := newSecureQueue(conn, sc, l.newCore, &l.opts, l.wd)
	l.mu.Lock()
	if l.inShutdown.Load() {
		l.mu.Unlock()
		q.core.Release()
		conn.Close()
		b.leave(host)
		return
	}
	l.mu.conns[q] = struct{}{}
	l.conns.Add(1)
	l.mu.Unlock()
	l.wd.arm(q, phaseICReq, l.opts.ICReqTimeout)
	go func() {
		defer l.conns.Done()
		q.serve()
		l.mu.Lock()
		delete(l.mu.conns, q)
		l.mu.Unlock()
		b.leave(host)
	}()
}

// logRefused logs the first refusal and every 1000th after it (a flood of
// connections must not flood the log; Stats counts them all).
func (l *Listener) logRefused(conn net.Conn, reason rejectReason) {
	s := l.opts.Budget.Stats()
	n, limit, what := s.RejectedNodeLimit, l.opts.Budget.limits.MaxConnections, "connections on the node"
	if reason == rejectedHostLimit {
		n, limit, what = s.RejectedHostLimit, l.opts.Budget.limits.MaxConnectionsPerHost, "connections from the host"
	}
	if n%1000 == 1 {
		l.opts.Logger.Warn("nvme/tcp: connection refused: too many "+what, "remote", conn.RemoteAddr().String(),
			"limit", limit, "refused", n)
	}
}

// Shutdown stops accepting, stops reading from every connection and waits
// for the commands already received to complete and their responses to be
// written; then the connections close. If ctx ends first, the remaining
// connections are closed at once and ctx's error is returned.
func (l *Listener) Shutdown(ctx context.Context) error {
	l.beginShutdown()
	l.mu.Lock()
	for q := range l.mu.conns {
		q.shutdownRead()
	}
	for c := range l.mu.pending {
		c.Close() // nothing was received from it yet
	}
	l.mu.Unlock()
	finished := make(chan struct{})
	go func() {
		l.conns.Wait()
		close(finished)
	}()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		l.closeConns()
		return ctx.Err()
	}
}

// Close stops accepting and closes every connection at once. It does not
// wait for the connection goroutines; commands in flight complete into
// closed queues and their responses are dropped.
func (l *Listener) Close() error {
	l.beginShutdown()
	l.closeConns()
	return nil
}

// Wait blocks until every connection goroutine has ended, and after
// Shutdown or Close the watchdog's too.
func (l *Listener) Wait() {
	l.conns.Wait()
	if l.inShutdown.Load() {
		l.wdRun.Wait()
	}
}

func (l *Listener) beginShutdown() {
	l.inShutdown.Store(true)
	l.doneOnce.Do(func() { close(l.done) })
	l.ln.Close()
}

func (l *Listener) closeConns() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for q := range l.mu.conns {
		q.forceClose(ErrServerClosed)
	}
	for c := range l.mu.pending {
		c.Close()
	}
}
