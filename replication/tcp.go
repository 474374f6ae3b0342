package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/clock"
)

// TCPConfig configures a TCPTransport.
type TCPConfig struct {
	NodeID NodeID
	Listen string            // "host:port"; port 0 picks one (Addr tells which)
	Peers  map[NodeID]string // initial peer addresses; SetPeer changes them
	Clock  clock.Clock       // default clock.Real(); deadlines and back-off
	Logger *slog.Logger      // default slog.Default()
	// QueueSize bounds the messages queued for one peer. Default 4096.
	QueueSize int
	// TLS secures every connection with mutual TLS (tls.go). nil: plain
	// TCP, which authenticates nobody.
	TLS *TLSConfig
}

// TCP transport timings.
const (
	dialTimeout      = 2 * time.Second
	writeTimeout     = 10 * time.Second
	handshakeTimeout = 10 * time.Second // the TLS handshake and the stream's, together
	snapshotIdle     = 60 * time.Second // longest silence inside a snapshot stream
	snapshotResult   = 30 * time.Minute // longest wait for a restore
	backoffMin       = 20 * time.Millisecond
	backoffMax       = time.Second
	writeBufferSize  = 256 << 10 // a snapshot stream's buffered writer
	writeBatchSize   = 1 << 20   // message frames per vectored write, in bytes (one frame at least)
	readBufferSize   = 256 << 10
)

// TCPTransport multiplexes every group's Raft messages over one outbound TCP
// connection per peer (and the peer's one inbound connection), in
// length-prefixed frames (doc.go, "Transport wire format"). Each peer has a
// bounded send queue drained by one writer goroutine, which batches what is
// queued into one vectored write that sends the entries' payloads from where
// Raft holds them; when the queue is full, or the peer cannot be reached,
// messages are dropped and reported unreachable, and Raft retries. The
// writer reconnects with exponential back-off. Snapshots travel on a
// connection of their own, so that a long stream never delays heartbeats.
type TCPTransport struct {
	self      NodeID
	ln        net.Listener
	clock     clock.Clock
	log       *slog.Logger
	queueSize int
	tls       *TLSConfig // nil: plain TCP
	ctx       context.Context
	cancel    context.CancelFunc

	handler Handler
	mu      struct {
		sync.Mutex
		addrs  map[NodeID]string
		peers  map[NodeID]*tcpPeer
		conns  map[net.Conn]struct{}
		closed bool
	}
	wg sync.WaitGroup
}

var _ Transport = (*TCPTransport)(nil)

// NewTCPTransport binds the listener; Start begins accepting.
func NewTCPTransport(cfg TCPConfig) (*TCPTransport, error) {
	if cfg.NodeID == 0 {
		return nil, fmt.Errorf("%w: TCP transport without a node ID", ErrConfig)
	}
	if cfg.TLS != nil {
		if err := cfg.TLS.validate(); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("replication: while listening on %q: %w", cfg.Listen, err)
	}
	t := &TCPTransport{self: cfg.NodeID, ln: ln, clock: cfg.Clock, log: cfg.Logger, queueSize: cfg.QueueSize, tls: cfg.TLS}
	if t.clock == nil {
		t.clock = clock.Real()
	}
	if t.log == nil {
		t.log = slog.Default()
	}
	if t.queueSize <= 0 {
		t.queueSize = 4096
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.mu.addrs = make(map[NodeID]string, len(cfg.Peers))
	for id, addr := range cfg.Peers {
		t.mu.addrs[id] = addr
	}
	t.mu.peers = make(map[NodeID]*tcpPeer)
	t.mu.conns = make(map[net.Conn]struct{})
	return t, nil
}

// Start implements Transport.
func (t *TCPTransport) Start(h Handler) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return ErrClosed
	}
	if t.handler != nil {
		return nil
	}
	t.handler = h
	t.wg.Add(1)
	go t.acceptLoop()
	return nil
}

// Addr implements Transport.
func (t *TCPTransport) Addr() net.Addr { return t.ln.Addr() }

// SetPeer implements Transport. A peer whose address changes reconnects.
func (t *TCPTransport) SetPeer(id NodeID, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.addrs[id] = addr
	if p := t.mu.peers[id]; p != nil {
		p.redial()
	}
}

func (t *TCPTransport) addr(id NodeID) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.addrs[id]
}

// Send implements Transport.
func (t *TCPTransport) Send(group GroupID, msgs []raftpb.Message) {
	for i := range msgs {
		to := NodeID(msgs[i].To)
		p := t.peer(to)
		if p == nil {
			t.handler.ReportUnreachable(to, group)
			continue
		}
		select {
		case p.queue <- outbound{group: group, msg: msgs[i]}:
		default:
			t.handler.ReportUnreachable(to, group)
		}
	}
}

// peer returns the sender for id, starting it on first use; nil for an
// unknown peer or a closed transport.
func (t *TCPTransport) peer(id NodeID) *tcpPeer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.mu.peers[id]; p != nil {
		return p
	}
	if t.mu.closed || t.mu.addrs[id] == "" || id == t.self {
		return nil
	}
	p := &tcpPeer{t: t, id: id, queue: make(chan outbound, t.queueSize), redialCh: make(chan struct{}, 1)}
	t.mu.peers[id] = p
	t.wg.Add(1)
	go p.run()
	return p
}

// Close implements Transport.
func (t *TCPTransport) Close() error {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	t.mu.closed = true
	for c := range t.mu.conns {
		_ = c.Close()
	}
	t.mu.Unlock()
	t.cancel()
	err := t.ln.Close()
	t.wg.Wait()
	return err
}

// track registers a connection so that Close can close it; it reports false
// (and closes c) once the transport is closed.
func (t *TCPTransport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		_ = c.Close()
		return false
	}
	t.mu.conns[c] = struct{}{}
	return true
}

// retrack replaces a tracked connection by the one wrapping it (TLS); nil
// (and both closed) once the transport is closed.
func (t *TCPTransport) retrack(raw, c net.Conn) net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.mu.conns, raw)
	if t.mu.closed {
		_ = raw.Close()
		return nil
	}
	t.mu.conns[c] = struct{}{}
	return c
}

func (t *TCPTransport) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.mu.conns, c)
	t.mu.Unlock()
	_ = c.Close()
}

// dial connects to peer id, authenticates it (TLS) and sends the handshake
// for a stream of kind. A TLS handshake that fails otherwise than by the
// network is reported to the Handler (a peer that is not who it should be).
func (t *TCPTransport) dial(id NodeID, kind uint8) (net.Conn, error) {
	addr := t.addr(id)
	if addr == "" {
		return nil, fmt.Errorf("replication: no address for %v", id)
	}
	d := net.Dialer{Timeout: dialTimeout}
	raw, err := d.DialContext(t.ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !t.track(raw) {
		return nil, ErrClosed
	}
	_ = raw.SetDeadline(t.clock.Now().Add(handshakeTimeout))
	c := raw
	if t.tls != nil {
		tc, err := t.dialTLS(raw, id)
		if err != nil {
			t.untrack(raw)
			if errors.Is(err, errPeerAuth) {
				t.handler.ReportRejected(RejectAuth, id, fmt.Errorf("%w: %w", ErrRejected, err))
			}
			return nil, err
		}
		c = t.retrack(raw, tc)
		if c == nil {
			return nil, ErrClosed
		}
	}
	if _, err := c.Write(handshake{kind: kind, from: t.self, to: id}.encode()); err != nil {
		t.untrack(c)
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// sleep waits d on the transport's clock; false if the transport closed.
func (t *TCPTransport) sleep(d time.Duration, interrupt <-chan struct{}) bool {
	timer := t.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return true
	case <-interrupt:
		return true
	case <-t.ctx.Done():
		return false
	}
}

// acceptLoop accepts inbound connections, backing off on temporary errors
// (as net/http's Serve does).
func (t *TCPTransport) acceptLoop() {
	defer t.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("raft transport: accept failed", "err", err, "retry_in", backoff)
			if !t.sleep(backoff, nil) {
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		if !t.track(c) {
			return
		}
		t.wg.Add(1)
		go t.serveConn(c)
	}
}

// serveConn authenticates the peer (TLS), reads the handshake and serves
// the stream it announces. A peer that does not authenticate, a handshake
// or frame the transport refuses is reported to the Handler (which counts
// and logs it) and ends the connection, as does a message the Host refuses
// (inConn.Refuse). The TLS and stream handshakes together must complete
// within handshakeTimeout; each runs on its connection's goroutine, never
// on the accept loop's.
func (t *TCPTransport) serveConn(raw net.Conn) {
	defer t.wg.Done()
	defer t.untrack(raw)
	_ = raw.SetDeadline(t.clock.Now().Add(handshakeTimeout))
	c := raw
	if t.tls != nil {
		tc, err := t.acceptTLS(raw)
		if err != nil {
			if errors.Is(err, errPeerAuth) {
				t.handler.ReportRejected(RejectAuth, 0, fmt.Errorf("%w: %w", ErrRejected, err))
			}
			return
		}
		c = tc
	}
	buf := make([]byte, handshakeSize)
	if _, err := io.ReadFull(c, buf); err != nil {
		return
	}
	h, err := decodeHandshake(buf)
	if err != nil {
		t.handler.ReportRejected(RejectFrame, 0, fmt.Errorf("%w: handshake from %v: %w", ErrRejected, c.RemoteAddr(), err))
		return
	}
	if h.to != t.self {
		t.handler.ReportRejected(RejectDestination, h.from,
			fmt.Errorf("%w: connection from %v for %v reached %v", ErrRejected, c.RemoteAddr(), h.to, t.self))
		return
	}
	if err := t.verifyClaim(c, h.from); err != nil {
		t.handler.ReportRejected(RejectAuth, h.from, fmt.Errorf("%w: %w", ErrRejected, err))
		return
	}
	_ = c.SetDeadline(time.Time{})
	r := bufio.NewReaderSize(c, readBufferSize)
	src := &inConn{c: c}
	switch h.kind {
	case streamMessages:
		err = t.readMessages(r, h.from, src)
	case streamSnapshot:
		err = t.receiveSnapshot(c, r, h.from)
	}
	switch reason, ok := transportRejection(err); {
	case ok:
		t.handler.ReportRejected(reason, h.from, fmt.Errorf("%w: from %v: %w", ErrRejected, c.RemoteAddr(), err))
	case err != nil && !src.refused.Load() && t.ctx.Err() == nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
		t.log.Warn("raft transport: inbound stream ended", "from", h.from, "err", err)
	}
}

// Errors of an inbound stream that the transport reports as refusals.
var (
	errWrongSender      = errors.New("replication: message from another node than the connection's")
	errWrongDestination = errors.New("replication: message for another node")
)

// transportRejection classifies an inbound stream's error: a frame that
// does not decode, or a message that is not from the connection's node or
// not for this one.
func transportRejection(err error) (RejectReason, bool) {
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, errWrongSender):
		return RejectSender, true
	case errors.Is(err, errWrongDestination):
		return RejectDestination, true
	case errors.Is(err, errFrame):
		return RejectFrame, true
	}
	return 0, false
}

// readMessages delivers the messages of an inbound stream until it fails. A
// malformed frame, a message whose From is not the node the handshake named
// or whose To is not this node, ends the connection; so does a message the
// Host refuses (src). The sender reconnects.
func (t *TCPTransport) readMessages(r io.Reader, from NodeID, src *inConn) error {
	fr := frameReader{r: r}
	for {
		h, m, err := fr.nextMessage()
		if err != nil {
			return err
		}
		switch {
		case NodeID(m.From) != from:
			return fmt.Errorf("%w: %v from %v on %v's stream", errWrongSender, m.Type, NodeID(m.From), from)
		case NodeID(m.To) != t.self:
			return fmt.Errorf("%w: %v for %v on a stream to %v", errWrongDestination, m.Type, NodeID(m.To), t.self)
		}
		t.handler.HandleMessage(h.group, m, src)
		if src.refused.Load() {
			return net.ErrClosed
		}
	}
}

// inConn is an inbound message stream as the Handler sees it (Source).
type inConn struct {
	c       net.Conn
	refused atomic.Bool
}

// Refuse implements Source: it closes the connection, which ends its
// reader.
func (s *inConn) Refuse() {
	if !s.refused.Swap(true) {
		_ = s.c.Close()
	}
}
