package psktls

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// seedHello is a well-formed ClientHello from the test client.
func seedHello() []byte {
	tc := newTestClient(nil, "id256", key32, SHA256)
	tc.s, _ = SHA256.suite()
	msg, _ := tc.clientHello()
	return msg
}

func FuzzClientHello(f *testing.F) {
	f.Add(seedHello())
	f.Add([]byte{msgClientHello, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		ch, err := parseClientHello(msg)
		if err != nil {
			return
		}
		if len(ch.identities) != len(ch.binders) {
			t.Fatalf("%d identities, %d binders", len(ch.identities), len(ch.binders))
		}
		if len(ch.identities) > 0 && (ch.bindersAt <= 4 || ch.bindersAt >= len(msg)) {
			t.Fatalf("binders at %d of %d", ch.bindersAt, len(msg))
		}
	})
}

// pipeConn is a net.Conn that reads from a fixed input and discards what
// is written.
type pipeConn struct {
	r io.Reader
	net.Conn
}

func (p pipeConn) Read(b []byte) (int, error)         { return p.r.Read(b) }
func (p pipeConn) Write(b []byte) (int, error)        { return len(b), nil }
func (p pipeConn) Close() error                       { return nil }
func (p pipeConn) SetDeadline(time.Time) error        { return nil }
func (p pipeConn) SetReadDeadline(t time.Time) error  { return nil }
func (p pipeConn) SetWriteDeadline(t time.Time) error { return nil }

// FuzzRecords drives a server from arbitrary input: record framing,
// handshake reassembly and ClientHello processing must fail cleanly.
func FuzzRecords(f *testing.F) {
	f.Add(sealRecord(nil, &halfConn{}, typeHandshake, seedHello()))
	f.Add([]byte{typeHandshake, 3, 1, 0, 4, msgClientHello, 0, 0, 0})
	f.Add([]byte{typeApplicationData, 3, 3, 0x41, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		c := Server(pipeConn{r: bytes.NewReader(in)}, &Config{PSKs: testLookup})
		if err := c.Handshake(); err == nil {
			t.Fatal("handshake succeeded on fuzzed input without a key exchange")
		}
	})
}

// FuzzProtectedRecord opens arbitrary protected records with a known key:
// tag failures, padding and type handling must never panic.
func FuzzProtectedRecord(f *testing.F) {
	s, _ := SHA256.suite()
	secret := bytes.Repeat([]byte{7}, 32)
	var w halfConn
	w.setKey(s, secret)
	f.Add(sealRecord(nil, &w, typeApplicationData, []byte("data")))
	f.Add(sealRecord(nil, &w, typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 1}))
	f.Fuzz(func(t *testing.T, in []byte) {
		var r halfConn
		r.setKey(s, secret)
		buf := make([]byte, recordHeaderLen+maxCiphertext)
		typ, frag, err := readRecord(bytes.NewReader(in), &r, buf)
		if err == nil && (len(frag) > maxPlaintext || typ == 0) {
			t.Fatalf("type %d, %d bytes", typ, len(frag))
		}
	})
}
