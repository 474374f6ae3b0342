package psktls

import (
	"bytes"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
)

// testClient is a TLS 1.3 external-PSK client for the tests: enough to
// drive the server through every path, and to build malformed input.
type testClient struct {
	conn     net.Conn
	identity []byte
	psk      []byte
	hash     Hash
	suites   []uint16
	groups   []uint16 // supported_groups
	shares   []uint16 // groups to send a key share for
	modes    []uint8
	// mutate, when set, may change the ClientHello body (after the
	// binder placeholder is in) before the binder is computed.
	mutate func(ch []byte) []byte
	// corruptBinder flips a bit of the binder once it is computed.
	corruptBinder bool

	s          *suite
	in, out    halfConn
	rbuf       []byte
	transcript []byte
	keys       map[uint16]*ecdh.PrivateKey
	hrr        bool
	pending    []byte
}

func newTestClient(conn net.Conn, identity string, psk []byte, h Hash) *testClient {
	return &testClient{
		conn: conn, identity: []byte(identity), psk: psk, hash: h,
		suites: []uint16{suiteAES128GCMSHA256, suiteAES256GCMSHA384},
		groups: []uint16{groupX25519, groupSecp256r1}, shares: []uint16{groupX25519},
		modes: []uint8{pskModeDHEKE}, rbuf: make([]byte, recordHeaderLen+maxCiphertext),
		keys: make(map[uint16]*ecdh.PrivateKey),
	}
}

func vec16(b []byte) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...) }
func vec8(b []byte) []byte  { return append([]byte{byte(len(b))}, b...) }

// clientHello builds a ClientHello with a zero binder and returns it with
// the offset of its binders vector.
func (tc *testClient) clientHello() ([]byte, int) {
	var exts []byte
	var vers []byte
	vers = binary.BigEndian.AppendUint16(vers, versionTLS13)
	exts = append(exts, extension(extSupportedVersions, vec8(vers))...)
	var groups []byte
	for _, g := range tc.groups {
		groups = binary.BigEndian.AppendUint16(groups, g)
	}
	exts = append(exts, extension(extSupportedGroups, vec16(groups))...)
	var shares []byte
	for _, g := range tc.shares {
		k := tc.keys[g]
		if k == nil {
			k, _ = curveOf(g).GenerateKey(rand.Reader)
			tc.keys[g] = k
		}
		shares = binary.BigEndian.AppendUint16(shares, g)
		shares = append(shares, vec16(k.PublicKey().Bytes())...)
	}
	exts = append(exts, extension(extKeyShare, vec16(shares))...)
	exts = append(exts, extension(extPSKKeyExchangeModes, vec8(tc.modes))...)
	ids := append(vec16(tc.identity), 0, 0, 0, 0)
	binders := vec8(make([]byte, tc.s.size()))
	pskExt := append(vec16(ids), vec16(binders)...)
	exts = append(exts, extension(extPreSharedKey, pskExt)...)

	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...)
	body = append(body, vec8([]byte("session-id-32-bytes-long-padding"))...)
	var suites []byte
	for _, s := range tc.suites {
		suites = binary.BigEndian.AppendUint16(suites, s)
	}
	body = append(body, vec16(suites)...)
	body = append(body, 1, 0)
	body = append(body, vec16(exts)...)
	msg := handshakeMsg(msgClientHello, body)
	return msg, len(msg) - len(binders) - 2
}

// sendHello sends a ClientHello with a correct binder (unless mutate
// breaks it).
func (tc *testClient) sendHello() error {
	msg, at := tc.clientHello()
	if tc.mutate != nil {
		msg = tc.mutate(msg)
	}
	if at+2+tc.s.size()+1 == len(msg) {
		ks := newKeySchedule(tc.s, tc.psk)
		binder := tc.s.finishedMAC(ks.binderKey(), tc.s.sum(tc.transcript, msg[:at]))
		copy(msg[at+3:], binder)
		if tc.corruptBinder {
			msg[len(msg)-1] ^= 1
		}
	}
	tc.transcript = append(tc.transcript, msg...)
	_, err := tc.conn.Write(sealRecord(nil, &tc.out, typeHandshake, msg))
	return err
}

// readMsg reads one handshake message (whole in one record here: the
// server never splits them).
func (tc *testClient) readMsg() ([]byte, error) {
	for {
		typ, frag, err := readRecord(tc.conn, &tc.in, tc.rbuf)
		if err != nil {
			return nil, err
		}
		switch typ {
		case typeAlert:
			return nil, alertRecord(frag)
		case typeHandshake:
			return slices.Clone(frag), nil
		default:
			return nil, fmt.Errorf("client: record type %d during handshake", typ)
		}
	}
}

// handshake runs the client side to completion.
func (tc *testClient) handshake() error {
	s, ok := tc.hash.suite()
	if !ok {
		return errors.New("client: bad hash")
	}
	tc.s = s
	if err := tc.sendHello(); err != nil {
		return err
	}
	msg, err := tc.readMsg()
	if err != nil {
		return err
	}
	if bytes.Equal(msg[6:38], helloRetryRandom) {
		tc.hrr = true
		g, err := hrrGroup(msg)
		if err != nil {
			return err
		}
		ch1 := tc.transcript
		tc.transcript = append(handshakeMsg(msgMessageHash, tc.s.sum(ch1)), msg...)
		tc.shares = []uint16{g}
		if err := tc.sendHello(); err != nil {
			return err
		}
		if msg, err = tc.readMsg(); err != nil {
			return err
		}
	}
	return tc.afterServerHello(msg)
}

// hrrGroup returns the selected_group of a HelloRetryRequest.
func hrrGroup(msg []byte) (uint16, error) {
	i := bytes.Index(msg, []byte{0, byte(extKeyShare), 0, 2})
	if i < 0 {
		return 0, errors.New("client: HRR without key_share")
	}
	return binary.BigEndian.Uint16(msg[i+4:]), nil
}

func (tc *testClient) afterServerHello(sh []byte) error {
	s := tc.s
	var shared []byte
	if i := bytes.Index(sh, []byte{0, byte(extKeyShare)}); i >= 0 && i > 40 {
		g := binary.BigEndian.Uint16(sh[i+4:])
		n := int(binary.BigEndian.Uint16(sh[i+6:]))
		pub, err := curveOf(g).NewPublicKey(sh[i+8 : i+8+n])
		if err != nil {
			return err
		}
		if shared, err = tc.keys[g].ECDH(pub); err != nil {
			return err
		}
	}
	tc.transcript = append(tc.transcript, sh...)
	ks := newKeySchedule(s, tc.psk)
	ks.handshakeSecret(shared)
	th := s.sum(tc.transcript)
	cHS := s.deriveSecret(ks.hs, "c hs traffic", th)
	sHS := s.deriveSecret(ks.hs, "s hs traffic", th)
	tc.in.setKey(s, sHS)
	tc.out.setKey(s, cHS)
	ee, err := tc.readMsg()
	if err != nil {
		return err
	}
	// EE and Finished come in one record.
	if ee[0] != msgEncryptedExtensions {
		return fmt.Errorf("client: message %d, want EncryptedExtensions", ee[0])
	}
	eeLen := 4 + int(ee[3])
	fin := ee[eeLen:]
	tc.transcript = append(tc.transcript, ee[:eeLen]...)
	if !hmac.Equal(fin[4:], s.finishedMAC(sHS, s.sum(tc.transcript))) {
		return errors.New("client: server Finished does not verify")
	}
	tc.transcript = append(tc.transcript, fin...)
	th = s.sum(tc.transcript)
	cfin := handshakeMsg(msgFinished, s.finishedMAC(cHS, th))
	if _, err := tc.conn.Write(sealRecord(nil, &tc.out, typeHandshake, cfin)); err != nil {
		return err
	}
	tc.in.setKey(s, s.deriveSecret(ks.master, "s ap traffic", th))
	tc.out.setKey(s, s.deriveSecret(ks.master, "c ap traffic", th))
	return nil
}

func (tc *testClient) Write(b []byte) (int, error) {
	var out []byte
	for n := 0; n < len(b); n += maxPlaintext {
		out = sealRecord(out, &tc.out, typeApplicationData, b[n:min(n+maxPlaintext, len(b))])
	}
	_, err := tc.conn.Write(out)
	return len(b), err
}

func (tc *testClient) Read(p []byte) (int, error) {
	for len(tc.pending) == 0 {
		typ, frag, err := readRecord(tc.conn, &tc.in, tc.rbuf)
		if err != nil {
			return 0, err
		}
		switch typ {
		case typeApplicationData:
			tc.pending = frag
		case typeAlert:
			return 0, alertRecord(frag)
		case typeHandshake:
			if frag[0] != msgKeyUpdate {
				return 0, fmt.Errorf("client: post-handshake message %d", frag[0])
			}
			tc.in.setKey(tc.s, tc.s.nextTrafficSecret(tc.in.secret))
		}
	}
	n := copy(p, tc.pending)
	tc.pending = tc.pending[n:]
	return n, nil
}

// keyUpdate sends a KeyUpdate and moves the client's write key on.
func (tc *testClient) keyUpdate(request bool) error {
	var r byte
	if request {
		r = 1
	}
	_, err := tc.conn.Write(sealRecord(nil, &tc.out, typeHandshake, handshakeMsg(msgKeyUpdate, []byte{r})))
	tc.out.setKey(tc.s, tc.s.nextTrafficSecret(tc.out.secret))
	return err
}

var _ io.ReadWriter = (*testClient)(nil)
