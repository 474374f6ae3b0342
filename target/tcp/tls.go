package tcp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"basalt/pkg/nvme"
	"basalt/pkg/psktls"
	"basalt/target"
)

// The NVMe/TCP secure channel (NVMe/TCP 1.1 §3.6.1): a TLS 1.3 handshake
// with a PSK before the ICReq. A port in mode optional tells TLS from
// plain NVMe/TCP by the first byte (0x16, a TLS handshake record, against
// the ICReq's PDU type 0x00), peeked without consuming it, so a plain
// connection keeps its *net.TCPConn and its writev.

// DefaultTLSHandshakeTimeout bounds a connection's TLS handshake, and in
// mode optional the wait for its first byte.
const DefaultTLSHandshakeTimeout = 10 * time.Second

// tlsRecordHandshake is the first byte of a TLS ClientHello record.
const tlsRecordHandshake = 0x16

// ErrTLSRequired: a plain connection reached a port that requires TLS.
var ErrTLSRequired = errors.New("tcp: the port requires TLS")

// tlsPort is a port's secure channel configuration.
type tlsPort struct {
	mode target.TLSMode
	cfg  *psktls.Config
}

func newTLSPort(mode target.TLSMode, psks func(identity []byte) []psktls.PSK) *tlsPort {
	return &tlsPort{mode: mode, cfg: &psktls.Config{PSKs: psks}}
}

// hostSecrets is what the PSK lookup needs of the target.
type hostSecrets interface {
	HostSecrets(subNQN, hostNQN string) []target.HostSecrets
}

// targetPSKs looks an NVMe PSK identity up: the host and subsystem it
// names, that host's configured PSKs there, and of the TLS PSKs they
// derive those offered under exactly this identity. A SHA-384 PSK is also
// offered with SHA-256: tlshd built on GnuTLS before 3.8.11 binds every
// PSK with HMAC-SHA256 and then negotiates TLS_AES_128_GCM_SHA256.
func targetPSKs(t hostSecrets) func(identity []byte) []psktls.PSK {
	return func(identity []byte) []psktls.PSK {
		id, err := nvme.ParsePSKIdentity(string(identity))
		if err != nil {
			return nil
		}
		var out []psktls.PSK
		for _, sec := range t.HostSecrets(id.SubNQN, id.HostNQN) {
			c, err := nvme.ParseTLSPSK(sec.TLSPSK)
			if err != nil {
				continue // empty or malformed; validated where it is configured
			}
			for _, p := range c.TLSPSKs(id.HostNQN, id.SubNQN) {
				if p.Identity != string(identity) {
					continue
				}
				out = append(out, psktls.PSK{Key: p.Key, Hash: psktls.Hash(p.Hash)})
				if p.Hash == nvme.TLSPSKHashSHA384 {
					out = append(out, psktls.PSK{Key: p.Key, Hash: psktls.SHA256})
				}
			}
		}
		return out
	}
}

// serveSecure runs the secure channel step of an admitted connection on
// its own goroutine, then starts its queue. The connection is tracked so
// that Shutdown and Close end it.
func (l *Listener) serveSecure(conn net.Conn, host netip.Addr) {
	l.mu.Lock()
	if l.inShutdown.Load() {
		l.mu.Unlock()
		conn.Close()
		l.opts.Budget.leave(host)
		return
	}
	l.mu.pending[conn] = struct{}{}
	l.conns.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.conns.Done()
		c, sc, err := l.secure(conn)
		l.mu.Lock()
		delete(l.mu.pending, conn)
		l.mu.Unlock()
		if err != nil {
			l.opts.Logger.Info("nvme/tcp: connection refused before ICReq", "remote", conn.RemoteAddr().String(), "err", err)
			conn.Close()
			l.opts.Budget.leave(host)
			return
		}
		l.startQueue(c, sc, host)
	}()
}

// secure decides between TLS and plain NVMe/TCP and runs the handshake,
// all within the handshake timeout, and within the ICReq timeout too (no
// ICReq can come before this step ends) (on the Listener's clock: when it
// fires first, the connection is closed and the step fails).
func (l *Listener) secure(conn net.Conn) (net.Conn, target.SecureChannel, error) {
	timer := l.opts.Clock.NewTimer(min(l.opts.TLSHandshakeTimeout, l.opts.ICReqTimeout))
	finished := make(chan struct{})
	defer func() {
		timer.Stop()
		close(finished)
	}()
	raw := conn
	go func() {
		select {
		case <-timer.C():
			raw.Close()
		case <-finished:
		}
	}()
	if l.tls.mode == target.TLSOptional {
		first, c, err := peekByte(conn)
		if err != nil {
			return nil, target.SecureChannel{}, fmt.Errorf("while waiting for the first byte: %w", err)
		}
		if first != tlsRecordHandshake {
			return c, target.SecureChannel{}, nil
		}
		conn = c
	}
	tc := psktls.Server(conn, l.tls.cfg)
	if err := tc.Handshake(); err != nil {
		if l.tls.mode == target.TLSRequired && errors.Is(err, psktls.ErrHandshake) {
			err = fmt.Errorf("%w: %w", ErrTLSRequired, err)
		}
		return nil, target.SecureChannel{}, err
	}
	id, err := nvme.ParsePSKIdentity(tc.Identity())
	if err != nil {
		return nil, target.SecureChannel{}, err // the lookup parsed it already
	}
	return tc, target.SecureChannel{TLS: true, HostNQN: id.HostNQN, SubNQN: id.SubNQN}, nil
}

// peekByte returns the connection's first byte without consuming it: with
// MSG_PEEK on a TCP socket (the connection is returned as it is), else by
// reading it into a prefix the returned connection replays.
func peekByte(conn net.Conn) (byte, net.Conn, error) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		var b [1]byte
		if _, err := conn.Read(b[:]); err != nil {
			return 0, nil, err
		}
		return b[0], &prefixConn{Conn: conn, prefix: b[:]}, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, nil, err
	}
	var b [1]byte
	var n int
	var perr error
	err = raw.Read(func(fd uintptr) bool {
		n, _, perr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK)
		return !errors.Is(perr, syscall.EAGAIN)
	})
	switch {
	case err != nil:
		return 0, nil, err
	case perr != nil:
		return 0, nil, perr
	case n == 0:
		return 0, nil, net.ErrClosed
	}
	return b[0], conn, nil
}

// prefixConn replays bytes already read before the connection's own.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// SecureChannel reports the queue's secure channel to the core
// (target.SecureQueue).
func (q *queue) SecureChannel() target.SecureChannel { return q.secure }

var _ target.SecureQueue = (*queue)(nil)

// buffersWriter is a connection that writes a gather list itself: a TLS
// connection packs it into full records (net.Buffers would write each
// piece as a record of its own).
type buffersWriter interface {
	WriteBuffers([][]byte) (int64, error)
}

// writeBuffers writes iov to conn: writev on a TCP connection, whole
// records on a TLS one. It consumes iov as net.Buffers.WriteTo does.
func writeBuffers(conn net.Conn, iov *net.Buffers) (int64, error) {
	if bw, ok := conn.(buffersWriter); ok {
		n, err := bw.WriteBuffers(*iov)
		*iov = (*iov)[len(*iov):]
		return n, err
	}
	return iov.WriteTo(conn)
}
