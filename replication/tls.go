package replication

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
)

// TLSConfig secures the TCP transport with mutual TLS (doc.go, "Peer
// authentication"). The transport knows nothing of certificates' contents:
// the configurations verify chains, and VerifyPeer says whether the peer a
// verified chain names is the node it claims to be.
type TLSConfig struct {
	// Server is the configuration of accepted connections. It must require
	// and verify a client certificate (tls.RequireAndVerifyClientCert):
	// NewTCPTransport refuses one that does not.
	Server *tls.Config
	// Client is the configuration of dialed connections, presenting this
	// node's certificate and verifying the server's chain.
	Client *tls.Config
	// VerifyPeer checks a completed handshake: that its verified peer is
	// node claimed, of this cluster. On an accepted connection claimed is
	// the sender the stream's handshake names (every message on the stream
	// must then be from it); on a dialed one, the node dialed. An error
	// refuses the connection before anything it carries reaches the
	// Handler. Required.
	VerifyPeer func(cs tls.ConnectionState, claimed NodeID) error
}

// validate checks what NewTCPTransport needs of a TLS configuration.
func (c *TLSConfig) validate() error {
	switch {
	case c.Server == nil || c.Client == nil || c.VerifyPeer == nil:
		return fmt.Errorf("%w: TLS needs a server and a client configuration and VerifyPeer", ErrConfig)
	case c.Server.ClientAuth != tls.RequireAndVerifyClientCert:
		return fmt.Errorf("%w: the TLS server configuration does not require verified client certificates", ErrConfig)
	}
	return nil
}

// errPeerAuth wraps every refusal of a peer that did not authenticate.
var errPeerAuth = errors.New("replication: peer not authenticated")

// tlsWriteBuffer is the buffer between a TLS message stream's batches and
// the connection: a batch's pieces (frame heads, payloads) coalesce into
// records of up to 16 KiB instead of one record and one write each.
const tlsWriteBuffer = 64 << 10

// acceptTLS runs the server side of a TLS handshake on c, within the
// deadline already set on c. It returns io.EOF, which is not reported, for
// a peer that closed before a refusal (a port probe) or a transport
// closing; any other failure, a handshake that timed out included, wraps
// errPeerAuth.
func (t *TCPTransport) acceptTLS(c net.Conn) (*tls.Conn, error) {
	tc := tls.Server(c, t.tls.Server)
	if err := tc.HandshakeContext(t.ctx); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || t.ctx.Err() != nil {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("%w: TLS handshake from %v: %w", errPeerAuth, c.RemoteAddr(), err)
	}
	return tc, nil
}

// dialTLS runs the client side of a TLS handshake on c, within the deadline
// already set on c, and checks the server is node id.
func (t *TCPTransport) dialTLS(c net.Conn, id NodeID) (*tls.Conn, error) {
	tc := tls.Client(c, t.tls.Client)
	if err := tc.HandshakeContext(t.ctx); err != nil {
		if isNetworkError(err) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: TLS handshake with %v at %v: %w", errPeerAuth, id, c.RemoteAddr(), err)
	}
	if err := t.tls.VerifyPeer(tc.ConnectionState(), id); err != nil {
		return nil, fmt.Errorf("%w: %v at %v: %w", errPeerAuth, id, c.RemoteAddr(), err)
	}
	return tc, nil
}

// verifyClaim checks the peer of an accepted TLS connection is the sender
// its stream handshake names; nil on a plain connection.
func (t *TCPTransport) verifyClaim(c net.Conn, from NodeID) error {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil
	}
	if err := t.tls.VerifyPeer(tc.ConnectionState(), from); err != nil {
		return fmt.Errorf("%w: connection from %v claiming %v: %w", errPeerAuth, c.RemoteAddr(), from, err)
	}
	return nil
}

// isNetworkError reports an error of the network (the peer went away, a
// timeout, the transport closed) rather than a TLS refusal: a dial that
// fails so is retried like any unreachable peer, and not reported.
func isNetworkError(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.As(err, &ne)
}

// batchWriter is what a message stream's batches go to: the connection
// itself for plain TCP (one writev a batch), a buffer over it for TLS,
// which flush writes out.
type batchWriter struct {
	w  io.Writer
	bw *bufio.Writer
}

func newBatchWriter(c net.Conn) batchWriter {
	if _, ok := c.(*tls.Conn); ok {
		bw := bufio.NewWriterSize(c, tlsWriteBuffer)
		return batchWriter{w: bw, bw: bw}
	}
	return batchWriter{w: c}
}

// flush writes out what the buffer holds (nothing to do for plain TCP).
func (b batchWriter) flush() error {
	if b.bw == nil {
		return nil
	}
	return b.bw.Flush()
}
