package psktls

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// PSK is a key the server may use for an identity, with its hash.
type PSK struct {
	Key  []byte
	Hash Hash
}

// Config configures a server. PSKs is required.
type Config struct {
	// PSKs returns the keys the identity may stand for; none means the
	// identity is unknown. When it returns several, the client's binder
	// decides which one the client holds. It is called during the
	// handshake, from the goroutine that runs it.
	PSKs func(identity []byte) []PSK
	// Rand is the source of the server's random and key shares; default
	// crypto/rand.Reader.
	Rand io.Reader
}

// Errors the Conn returns. Handshake failures wrap ErrHandshake; the
// peer's alerts are *PeerAlertError.
var (
	ErrHandshake = errors.New("psktls: handshake failed")
	ErrClosed    = errors.New("psktls: connection closed")
)

// maxEmptyRecords bounds the records a Read consumes without returning
// data (empty application data, KeyUpdate), as crypto/tls does.
const maxEmptyRecords = 16

// writeBatch is how many full records one write to the socket carries.
const writeBatch = 4

// recordSpace is the room one sealed full record takes in the write buffer.
const recordSpace = recordHeaderLen + maxPlaintext + 1 + tagSize

// Conn is the server side of a TLS 1.3 PSK connection. It implements
// net.Conn; Read and Write may be called concurrently with each other,
// each from one goroutine at a time. The handshake runs on the first
// Read or Write, or on Handshake; bound it with a deadline on the Conn.
type Conn struct {
	conn net.Conn
	cfg  *Config

	hsMu     sync.Mutex
	hsDone   atomic.Bool
	hsErr    error
	identity string
	suite    *suite
	group    uint16 // 0: psk_ke

	readMu  sync.Mutex
	in      halfConn
	rbuf    []byte
	pending []byte // application data opened but not yet returned
	hsBuf   []byte // handshake bytes not yet forming a whole message
	readErr error

	writeMu  sync.Mutex
	out      halfConn
	wbuf     []byte
	writeErr error
}

// Server returns a Conn that runs the server side of TLS over conn.
func Server(conn net.Conn, cfg *Config) *Conn {
	return &Conn{conn: conn, cfg: cfg}
}

// Identity returns the PSK identity the client authenticated with (empty
// before the handshake completed).
func (c *Conn) Identity() string {
	if !c.hsDone.Load() {
		return ""
	}
	return c.identity
}

// CipherSuite returns the negotiated cipher suite's code point (0 before
// the handshake completed).
func (c *Conn) CipherSuite() uint16 {
	if !c.hsDone.Load() {
		return 0
	}
	return c.suite.id
}

// Group returns the named group of the (EC)DHE exchange, 0 for psk_ke or
// before the handshake completed.
func (c *Conn) Group() uint16 {
	if !c.hsDone.Load() {
		return 0
	}
	return c.group
}

// Handshake runs the server handshake if it has not run yet and returns
// its result. On failure the client has been sent an alert where one
// applies; the caller closes the Conn.
func (c *Conn) Handshake() error {
	c.hsMu.Lock()
	defer c.hsMu.Unlock()
	if c.hsDone.Load() || c.hsErr != nil {
		return c.hsErr
	}
	c.readMu.Lock()
	c.writeMu.Lock()
	err := c.serverHandshake()
	c.writeMu.Unlock()
	c.readMu.Unlock()
	if err != nil {
		c.hsErr = fmt.Errorf("%w: %w", ErrHandshake, err)
		return c.hsErr
	}
	c.hsDone.Store(true)
	return nil
}

func (c *Conn) rand() io.Reader {
	if c.cfg.Rand != nil {
		return c.cfg.Rand
	}
	return rand.Reader
}

// fail records err, sends its alert if it carries one, and returns it.
// Called with writeMu held.
func (c *Conn) failLocked(err error) error {
	var ae *alertError
	if errors.As(err, &ae) && c.writeErr == nil {
		c.wbuf = sealRecord(c.wbuf[:0], &c.out, typeAlert, []byte{alertLevelFatal, ae.alert})
		c.conn.Write(c.wbuf) // best effort: the connection ends either way
	}
	if c.writeErr == nil {
		c.writeErr = err
	}
	return err
}

// Read reads application data.
func (c *Conn) Read(p []byte) (int, error) {
	if err := c.Handshake(); err != nil {
		return 0, err
	}
	c.readMu.Lock()
	defer c.readMu.Unlock()
	for empty := 0; len(c.pending) == 0; empty++ {
		if empty > maxEmptyRecords {
			c.readErr = &alertError{alertUnexpectedMessage, "too many records without data"}
		}
		if c.readErr != nil {
			return 0, c.readErr
		}
		if len(p) == 0 {
			return 0, nil
		}
		if err := c.readOne(); err != nil {
			c.readErr = err
			var ae *alertError
			if errors.As(err, &ae) {
				c.writeMu.Lock()
				c.failLocked(err)
				c.writeMu.Unlock()
			}
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// readOne reads and handles one record after the handshake.
func (c *Conn) readOne() error {
	typ, frag, err := readRecord(c.conn, &c.in, c.rbuf)
	if err != nil {
		return err
	}
	switch typ {
	case typeApplicationData:
		if len(c.hsBuf) != 0 {
			return &alertError{alertUnexpectedMessage, "application data inside a handshake message"}
		}
		c.pending = frag
		return nil
	case typeAlert:
		return alertRecord(frag)
	case typeHandshake:
		return c.postHandshake(frag)
	}
	return &alertError{alertUnexpectedMessage, fmt.Sprintf("record type %d after the handshake", typ)}
}

// alertRecord interprets an alert record's content.
func alertRecord(frag []byte) error {
	if len(frag) != 2 {
		return &alertError{alertDecodeError, "alert record of wrong length"}
	}
	if frag[1] == alertCloseNotify {
		return io.EOF
	}
	return &PeerAlertError{Alert: frag[1]}
}

// postHandshake handles handshake messages after the handshake: only
// KeyUpdate is allowed from a client (the server sends no tickets and
// requests no certificate).
func (c *Conn) postHandshake(frag []byte) error {
	if len(c.hsBuf)+len(frag) > 4+maxHandshakeMsg {
		return &alertError{alertUnexpectedMessage, "post-handshake message too large"}
	}
	c.hsBuf = append(c.hsBuf, frag...)
	for len(c.hsBuf) >= 4 {
		n := int(c.hsBuf[1])<<16 | int(c.hsBuf[2])<<8 | int(c.hsBuf[3])
		if n > maxHandshakeMsg {
			return &alertError{alertDecodeError, "post-handshake message too large"}
		}
		if len(c.hsBuf) < 4+n {
			return nil
		}
		msg := c.hsBuf[:4+n]
		if msg[0] != msgKeyUpdate {
			return &alertError{alertUnexpectedMessage, fmt.Sprintf("post-handshake message type %d", msg[0])}
		}
		if n != 1 || msg[4] > 1 {
			return &alertError{alertDecodeError, "malformed KeyUpdate"}
		}
		if len(c.hsBuf) != 4+n {
			// RFC 8446 §5.1: a key change ends the record.
			return &alertError{alertUnexpectedMessage, "data after KeyUpdate in its record"}
		}
		c.hsBuf = c.hsBuf[:0]
		c.in.setKey(c.suite, c.suite.nextTrafficSecret(c.in.secret))
		if msg[4] == 1 { // update_requested
			c.writeMu.Lock()
			err := c.sendKeyUpdateLocked()
			c.writeMu.Unlock()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// sendKeyUpdateLocked sends KeyUpdate(update_not_requested) and moves the
// write side to the next traffic secret. Called with writeMu held.
func (c *Conn) sendKeyUpdateLocked() error {
	if c.writeErr != nil {
		return c.writeErr
	}
	c.wbuf = sealRecord(c.wbuf[:0], &c.out, typeHandshake, handshakeMsg(msgKeyUpdate, []byte{0}))
	if _, err := c.conn.Write(c.wbuf); err != nil {
		c.writeErr = err
		return err
	}
	c.out.setKey(c.suite, c.suite.nextTrafficSecret(c.out.secret))
	return nil
}

// Write writes application data.
func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.WriteBuffers([][]byte{b})
	return int(n), err
}

// WriteBuffers writes the concatenation of bufs as application data,
// packing it into full records and several records into each write to
// the socket: the counterpart of net.Buffers' writev for a plain
// connection.
func (c *Conn) WriteBuffers(bufs [][]byte) (int64, error) {
	if err := c.Handshake(); err != nil {
		return 0, err
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.writeErr != nil {
		return 0, c.writeErr
	}
	if c.wbuf == nil || cap(c.wbuf) < writeBatch*recordSpace {
		c.wbuf = make([]byte, 0, writeBatch*recordSpace)
	}
	var n int64
	rec := -1 // offset of the open record's content in wbuf
	for _, b := range bufs {
		for len(b) > 0 {
			if rec < 0 {
				if len(c.wbuf)+recordSpace > cap(c.wbuf) {
					if err := c.flushLocked(); err != nil {
						return n, err
					}
				}
				if err := c.maybeRekeyLocked(); err != nil {
					return n, err
				}
				c.wbuf = append(c.wbuf, make([]byte, recordHeaderLen)...)
				rec = len(c.wbuf)
			}
			k := min(maxPlaintext-(len(c.wbuf)-rec), len(b))
			c.wbuf = append(c.wbuf, b[:k]...)
			b = b[k:]
			n += int64(k)
			if len(c.wbuf)-rec == maxPlaintext {
				c.sealLocked(rec)
				rec = -1
			}
		}
	}
	if rec >= 0 {
		c.sealLocked(rec)
	}
	return n, c.flushLocked()
}

// maybeRekeyLocked moves to the next write key before the record limit,
// flushing what was sealed under the current one first.
func (c *Conn) maybeRekeyLocked() error {
	if c.out.seq < recordLimit {
		return nil
	}
	if err := c.flushLocked(); err != nil {
		return err
	}
	return c.sendKeyUpdateLocked()
}

// sealLocked seals, in place, the application data record whose content
// starts at wbuf[rec] and runs to the end of wbuf.
func (c *Conn) sealLocked(rec int) {
	c.wbuf = append(c.wbuf, typeApplicationData)
	n := len(c.wbuf) - rec + tagSize
	hdr := c.wbuf[rec-recordHeaderLen : rec]
	hdr[0], hdr[1], hdr[2], hdr[3], hdr[4] = typeApplicationData, 3, 3, byte(n>>8), byte(n)
	sealed := c.out.aead.Seal(c.wbuf[rec:rec], c.out.nonce(), c.wbuf[rec:], hdr)
	c.out.seq++
	c.wbuf = c.wbuf[:rec+len(sealed)]
}

func (c *Conn) flushLocked() error {
	if len(c.wbuf) == 0 {
		return nil
	}
	_, err := c.conn.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	if err != nil {
		c.writeErr = err
	}
	return err
}

// CloseWrite sends close_notify and shuts down the writing side of the
// underlying connection where it can.
func (c *Conn) CloseWrite() error {
	c.writeMu.Lock()
	if c.hsDone.Load() && c.writeErr == nil {
		c.wbuf = sealRecord(c.wbuf[:0], &c.out, typeAlert, []byte{alertLevelWarning, alertCloseNotify})
		c.conn.Write(c.wbuf)
		c.writeErr = ErrClosed
	}
	c.writeMu.Unlock()
	if cw, ok := c.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// CloseRead shuts down the reading side of the underlying connection
// where it can.
func (c *Conn) CloseRead() error {
	if cr, ok := c.conn.(interface{ CloseRead() error }); ok {
		return cr.CloseRead()
	}
	return errors.New("psktls: underlying connection has no CloseRead")
}

// Close closes the underlying connection at once. It sends no
// close_notify (CloseWrite does): it must not block behind a Write.
func (c *Conn) Close() error { return c.conn.Close() }

// LocalAddr, RemoteAddr and the deadlines are the underlying
// connection's.
func (c *Conn) LocalAddr() net.Addr                { return c.conn.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr               { return c.conn.RemoteAddr() }
func (c *Conn) SetDeadline(t time.Time) error      { return c.conn.SetDeadline(t) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

// NetConn returns the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.conn }
