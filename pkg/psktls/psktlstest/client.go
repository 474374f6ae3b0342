// Package psktlstest is a TLS 1.3 external-PSK client for tests of
// servers built on psktls: psk_dhe_ke with X25519, no HelloRetryRequest
// handling, no KeyUpdate sending. It is not hardened; use it only against
// servers under test.
package psktlstest

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"

	"basalt/pkg/psktls"
)

type suite struct {
	id     uint16
	keyLen int
	h      func() hash.Hash
}

func (s suite) size() int { return s.h().Size() }

func (s suite) sum(msgs ...[]byte) []byte {
	h := s.h()
	for _, m := range msgs {
		h.Write(m)
	}
	return h.Sum(nil)
}

func (s suite) extract(ikm, salt []byte) []byte {
	if ikm == nil {
		ikm = make([]byte, s.size())
	}
	prk, _ := hkdf.Extract(s.h, ikm, salt)
	return prk
}

func (s suite) label(secret []byte, label string, ctx []byte, n int) []byte {
	info := binary.BigEndian.AppendUint16(nil, uint16(n))
	info = append(info, byte(6+len(label)))
	info = append(info, "tls13 "+label...)
	info = append(info, byte(len(ctx)))
	info = append(info, ctx...)
	out, _ := hkdf.Expand(s.h, secret, string(info), n)
	return out
}

func (s suite) derive(secret []byte, label string, th []byte) []byte {
	return s.label(secret, label, th, s.size())
}

func (s suite) finished(base, th []byte) []byte {
	m := hmac.New(s.h, s.label(base, "finished", nil, s.size()))
	m.Write(th)
	return m.Sum(nil)
}

type half struct {
	aead cipher.AEAD
	iv   []byte
	seq  uint64
}

func (s suite) half(secret []byte) *half {
	b, _ := aes.NewCipher(s.label(secret, "key", nil, s.keyLen))
	g, _ := cipher.NewGCM(b)
	return &half{aead: g, iv: s.label(secret, "iv", nil, 12)}
}

func (h *half) nonce() []byte {
	n := bytes.Clone(h.iv)
	for i := range 8 {
		n[4+i] ^= byte(h.seq >> (56 - 8*i))
	}
	h.seq++
	return n
}

func (h *half) seal(typ byte, content []byte) []byte {
	if h == nil {
		return append([]byte{typ, 3, 3, byte(len(content) >> 8), byte(len(content))}, content...)
	}
	n := len(content) + 1 + 16
	hdr := []byte{23, 3, 3, byte(n >> 8), byte(n)}
	return h.aead.Seal(hdr, h.nonce(), append(bytes.Clone(content), typ), hdr)
}

// Conn is the client side of an established connection.
type Conn struct {
	net.Conn
	in, out *half
	pending []byte
	wbuf    []byte
	hdr     [5]byte
	rbuf    []byte
}

func (c *Conn) readRecord() (byte, []byte, error) {
	if _, err := io.ReadFull(c.Conn, c.hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint16(c.hdr[3:]))
	if n > 1<<14+256 {
		return 0, nil, errors.New("psktlstest: record too long")
	}
	frag := c.rbuf[:n]
	if _, err := io.ReadFull(c.Conn, frag); err != nil {
		return 0, nil, err
	}
	if c.in == nil {
		return c.hdr[0], frag, nil
	}
	p, err := c.in.aead.Open(frag[:0], c.in.nonce(), frag, c.hdr[:])
	if err != nil {
		return 0, nil, err
	}
	i := len(p) - 1
	for i > 0 && p[i] == 0 {
		i--
	}
	if i < 0 {
		return 0, nil, errors.New("psktlstest: empty inner plaintext")
	}
	return p[i], p[:i], nil
}

// Read reads application data.
func (c *Conn) Read(b []byte) (int, error) {
	for len(c.pending) == 0 {
		typ, frag, err := c.readRecord()
		if err != nil {
			return 0, err
		}
		switch typ {
		case 23:
			c.pending = frag
		case 21:
			if len(frag) == 2 && frag[1] == 0 {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("psktlstest: alert %v", frag)
		default:
			return 0, fmt.Errorf("psktlstest: record type %d", typ)
		}
	}
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write writes application data, sealing its records in place in one
// buffer and writing them at once.
func (c *Conn) Write(b []byte) (int, error) {
	out := c.wbuf[:0]
	for i := 0; i < len(b); i += 1 << 14 {
		chunk := b[i:min(i+1<<14, len(b))]
		start := len(out)
		n := len(chunk) + 1 + 16
		out = append(out, 23, 3, 3, byte(n>>8), byte(n))
		out = append(out, chunk...)
		out = append(out, 23)
		hdr := out[start : start+5]
		out = c.out.aead.Seal(out[:start+5], c.out.nonce(), out[start+5:], hdr)
	}
	c.wbuf = out
	_, err := c.Conn.Write(out)
	return len(b), err
}

func msg(typ byte, body []byte) []byte {
	return append([]byte{typ, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
}

func vec16(b []byte) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...) }

func ext(typ uint16, data []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, typ), vec16(data)...)
}

// Client runs a handshake over conn with the PSK and returns the
// established connection.
func Client(conn net.Conn, identity string, key []byte, h psktls.Hash) (*Conn, error) {
	s := suite{0x1301, 16, sha256.New}
	if h == psktls.SHA384 {
		s = suite{0x1302, 32, sha512.New384}
	}
	priv, _ := ecdh.X25519().GenerateKey(rand.Reader)
	var exts []byte
	exts = append(exts, ext(43, []byte{2, 3, 4})...)
	exts = append(exts, ext(10, vec16([]byte{0, 0x1d}))...)
	exts = append(exts, ext(51, vec16(append([]byte{0, 0x1d}, vec16(priv.PublicKey().Bytes())...)))...)
	exts = append(exts, ext(45, []byte{1, 1})...)
	binders := append([]byte{byte(s.size())}, make([]byte, s.size())...)
	exts = append(exts, ext(41, append(vec16(append(vec16([]byte(identity)), 0, 0, 0, 0)), vec16(binders)...))...)
	body := append([]byte{3, 3}, make([]byte, 33)...)
	body = append(body, 0, 2, byte(s.id>>8), byte(s.id), 1, 0)
	body = append(body, vec16(exts)...)
	ch := msg(1, body)
	early := s.extract(key, nil)
	bk := s.derive(early, "ext binder", s.sum())
	copy(ch[len(ch)-s.size():], s.finished(bk, s.sum(ch[:len(ch)-len(binders)-2])))
	c := &Conn{Conn: conn, rbuf: make([]byte, 1<<14+256)}
	if _, err := conn.Write((*half)(nil).seal(22, ch)); err != nil {
		return nil, err
	}
	typ, sh, err := c.readRecord()
	if err != nil {
		return nil, err
	}
	if typ != 22 || len(sh) < 40 || sh[0] != 2 {
		return nil, fmt.Errorf("psktlstest: no ServerHello (record type %d %x)", typ, sh)
	}
	sh = bytes.Clone(sh)
	i := bytes.Index(sh[40:], []byte{0, 51})
	if i < 0 {
		return nil, errors.New("psktlstest: ServerHello without key_share")
	}
	pub, err := ecdh.X25519().NewPublicKey(sh[40+i+8 : 40+i+8+32])
	if err != nil {
		return nil, err
	}
	shared, _ := priv.ECDH(pub)
	tr := append(ch, sh...)
	hs := s.extract(shared, s.derive(early, "derived", s.sum()))
	th := s.sum(tr)
	cHS, sHS := s.derive(hs, "c hs traffic", th), s.derive(hs, "s hs traffic", th)
	c.in, c.out = s.half(sHS), s.half(cHS)
	typ, rest, err := c.readRecord()
	if err != nil || typ != 22 {
		return nil, fmt.Errorf("psktlstest: no EncryptedExtensions/Finished: %v", err)
	}
	rest = bytes.Clone(rest)
	eeLen := 4 + int(rest[3])
	tr = append(tr, rest[:eeLen]...)
	if !hmac.Equal(rest[eeLen+4:], s.finished(sHS, s.sum(tr))) {
		return nil, errors.New("psktlstest: server Finished does not verify")
	}
	tr = append(tr, rest[eeLen:]...)
	th = s.sum(tr)
	if _, err := conn.Write(c.out.seal(22, msg(20, s.finished(cHS, th)))); err != nil {
		return nil, err
	}
	master := s.extract(nil, s.derive(hs, "derived", s.sum()))
	c.in, c.out = s.half(s.derive(master, "s ap traffic", th)), s.half(s.derive(master, "c ap traffic", th))
	return c, nil
}
