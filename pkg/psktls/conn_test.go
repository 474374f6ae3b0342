package psktls

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

var (
	key32 = bytes.Repeat([]byte{0x11}, 32)
	key48 = bytes.Repeat([]byte{0x22}, 48)
)

// testLookup knows "id256" (SHA-256) and "id384" (SHA-384), and "two",
// which stands for two keys of which the client holds the second.
func testLookup(id []byte) []PSK {
	switch string(id) {
	case "id256":
		return []PSK{{Key: key32, Hash: SHA256}}
	case "id384":
		return []PSK{{Key: key48, Hash: SHA384}}
	case "id384any": // a 48-byte key also bound with SHA-256 (GnuTLS < 3.8.11 binders)
		return []PSK{{Key: key48, Hash: SHA384}, {Key: key48, Hash: SHA256}}
	case "two":
		return []PSK{{Key: key48, Hash: SHA256}, {Key: key32, Hash: SHA256}}
	}
	return nil
}

// pair connects a raw client socket to a server Conn over loopback; the
// server's handshake result arrives on the channel.
func pair(t *testing.T) (net.Conn, *Conn, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	srv := Server(raw, &Config{PSKs: testLookup})
	srv.SetDeadline(time.Now().Add(10 * time.Second))
	cl.SetDeadline(time.Now().Add(10 * time.Second))
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	t.Cleanup(func() { cl.Close(); srv.Close() })
	return cl, srv, done
}

func TestHandshakeAndEcho(t *testing.T) {
	cases := []struct {
		name     string
		id       string
		key      []byte
		hash     Hash
		shares   []uint16
		groups   []uint16
		modes    []uint8
		suite    uint16
		group    uint16
		wantHRR  bool
		suitesCl []uint16
	}{
		{name: "sha256-x25519", id: "id256", key: key32, hash: SHA256, suite: suiteAES128GCMSHA256, group: groupX25519},
		{name: "sha384-x25519", id: "id384", key: key48, hash: SHA384, suite: suiteAES256GCMSHA384, group: groupX25519},
		{name: "p256", id: "id256", key: key32, hash: SHA256, shares: []uint16{groupSecp256r1}, suite: suiteAES128GCMSHA256, group: groupSecp256r1},
		{name: "p384", id: "id384", key: key48, hash: SHA384, shares: []uint16{groupSecp384r1}, groups: []uint16{groupSecp384r1}, suite: suiteAES256GCMSHA384, group: groupSecp384r1},
		{name: "hrr", id: "id256", key: key32, hash: SHA256, shares: []uint16{}, groups: []uint16{groupSecp256r1}, suite: suiteAES128GCMSHA256, group: groupSecp256r1, wantHRR: true},
		{name: "psk_ke", id: "id384", key: key48, hash: SHA384, modes: []uint8{pskModeKE}, suite: suiteAES256GCMSHA384},
		{name: "second-candidate", id: "two", key: key32, hash: SHA256, suite: suiteAES128GCMSHA256, group: groupX25519},
		{name: "sha384-key-sha384-binder", id: "id384any", key: key48, hash: SHA384, suite: suiteAES256GCMSHA384, group: groupX25519},
		{name: "sha384-key-sha256-binder", id: "id384any", key: key48, hash: SHA256, suite: suiteAES128GCMSHA256, group: groupX25519},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			cl, srv, done := pair(t)
			tc := newTestClient(cl, tt.id, tt.key, tt.hash)
			if tt.shares != nil {
				tc.shares = tt.shares
			}
			if tt.groups != nil {
				tc.groups = tt.groups
			}
			if tt.modes != nil {
				tc.modes = tt.modes
			}
			if err := tc.handshake(); err != nil {
				t.Fatalf("client handshake: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("server handshake: %v", err)
			}
			if tc.hrr != tt.wantHRR {
				t.Errorf("HelloRetryRequest sent = %v, want %v", tc.hrr, tt.wantHRR)
			}
			if srv.Identity() != tt.id || srv.CipherSuite() != tt.suite || srv.Group() != tt.group {
				t.Errorf("identity %q suite %#x group %#x, want %q %#x %#x",
					srv.Identity(), srv.CipherSuite(), srv.Group(), tt.id, tt.suite, tt.group)
			}
			echo(t, tc, srv)
		})
	}
}

// echo sends 100 KiB each way: client to server with Write, server to
// client with WriteBuffers of odd-sized pieces.
func echo(t *testing.T, tc *testClient, srv *Conn) {
	t.Helper()
	data := make([]byte, 100<<10)
	rand.Read(data)
	go tc.Write(data)
	got := make([]byte, len(data))
	if _, err := io.ReadFull(srv, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("server read: %v (equal %v)", err, bytes.Equal(got, data))
	}
	go srv.WriteBuffers([][]byte{data[:1], data[1:70000], data[70000:70001], data[70001:]})
	if _, err := io.ReadFull(tc, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("client read: %v (equal %v)", err, bytes.Equal(got, data))
	}
}

// wantAlert reads records from the raw client until an alert and checks it.
func wantAlert(t *testing.T, tc *testClient, alert uint8, done chan error) {
	t.Helper()
	var err error
	for {
		if _, err = tc.readMsg(); err != nil {
			break
		}
	}
	var pa *PeerAlertError
	if !errors.As(err, &pa) || pa.Alert != alert {
		t.Errorf("client got %v, want alert %s", err, alertName(alert))
	}
	if serr := <-done; !errors.Is(serr, ErrHandshake) {
		t.Errorf("server handshake: %v, want ErrHandshake", serr)
	}
}

func TestHandshakeRefusals(t *testing.T) {
	cases := []struct {
		name  string
		id    string
		key   []byte
		hash  Hash
		setup func(tc *testClient)
		alert uint8
	}{
		{name: "wrong-key", id: "id256", key: key48[:32], hash: SHA256, alert: alertDecryptError},
		{name: "unknown-identity", id: "nobody", key: key32, hash: SHA256, alert: alertUnknownPSKIdentity},
		{name: "suite-missing", id: "id384", key: key48, hash: SHA384, alert: alertHandshakeFailure,
			setup: func(tc *testClient) { tc.suites = []uint16{suiteAES128GCMSHA256} }},
		{name: "no-common-group", id: "id256", key: key32, hash: SHA256, alert: alertHandshakeFailure,
			setup: func(tc *testClient) { tc.shares, tc.groups = nil, []uint16{0x0100} }},
		{name: "no-psk-modes", id: "id256", key: key32, hash: SHA256, alert: alertMissingExtension,
			setup: func(tc *testClient) {
				tc.mutate = func(ch []byte) []byte { return replaceExt(ch, extPSKKeyExchangeModes, 0x7777) }
			}},
		{name: "no-tls13", id: "id256", key: key32, hash: SHA256, alert: alertProtocolVersion,
			setup: func(tc *testClient) {
				tc.mutate = func(ch []byte) []byte { return replaceExt(ch, extSupportedVersions, 0x7777) }
			}},
		{name: "bad-binder", id: "id256", key: key32, hash: SHA256, alert: alertDecryptError,
			setup: func(tc *testClient) { tc.corruptBinder = true }},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			cl, _, done := pair(t)
			tc := newTestClient(cl, tt.id, tt.key, tt.hash)
			if tt.setup != nil {
				tt.setup(tc)
			}
			tc.s, _ = tt.hash.suite()
			if err := tc.sendHello(); err != nil {
				t.Fatal(err)
			}
			wantAlert(t, tc, tt.alert, done)
		})
	}
}

// replaceExt renames the first extension of type typ to other: the
// ClientHello then lacks it.
func replaceExt(ch []byte, typ, other uint16) []byte {
	i := bytes.Index(ch[39:], binary.BigEndian.AppendUint16(nil, typ))
	binary.BigEndian.PutUint16(ch[39+i:], other)
	return ch
}

func TestMalformedRecordsRefused(t *testing.T) {
	cases := []struct {
		name  string
		input []byte
		alert uint8
	}{
		{"oversized-record", []byte{typeHandshake, 3, 1, 0x40, 0x01}, alertRecordOverflow},
		{"bad-record-type", []byte{99, 3, 3, 0, 1, 0}, alertUnexpectedMessage},
		{"huge-handshake-message", []byte{typeHandshake, 3, 1, 0, 4, msgClientHello, 0xff, 0xff, 0xff}, alertDecodeError},
		{"not-a-clienthello", []byte{typeHandshake, 3, 1, 0, 4, msgFinished, 0, 0, 0}, alertUnexpectedMessage},
		{"truncated-clienthello", []byte{typeHandshake, 3, 1, 0, 6, msgClientHello, 0, 0, 2, 3, 3}, alertDecodeError},
		{"early-ccs", []byte{typeChangeCipherSpec, 3, 3, 0, 1, 1}, alertUnexpectedMessage},
		{"app-data-before-hello", []byte{typeApplicationData, 3, 3, 0, 1, 1}, alertUnexpectedMessage},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			cl, _, done := pair(t)
			cl.Write(tt.input)
			tc := newTestClient(cl, "", nil, SHA256)
			wantAlert(t, tc, tt.alert, done)
		})
	}
}

// established returns a client and server past the handshake.
func established(t *testing.T) (*testClient, *Conn) {
	t.Helper()
	cl, srv, done := pair(t)
	tc := newTestClient(cl, "id256", key32, SHA256)
	if err := tc.handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return tc, srv
}

func TestKeyUpdateFromClient(t *testing.T) {
	tc, srv := established(t)
	if err := tc.keyUpdate(true); err != nil {
		t.Fatal(err)
	}
	tc.Write([]byte("after update"))
	buf := make([]byte, 64)
	n, err := srv.Read(buf)
	if err != nil || string(buf[:n]) != "after update" {
		t.Fatalf("server read %q, %v", buf[:n], err)
	}
	// The server answered update_requested with its own KeyUpdate: the
	// client reads the next data under the server's new key.
	go srv.Write([]byte("reply"))
	n, err = tc.Read(buf)
	if err != nil || string(buf[:n]) != "reply" {
		t.Fatalf("client read %q, %v", buf[:n], err)
	}
	before := tc.in.secret
	if bytes.Equal(before, srv.out.secret) == false {
		t.Fatal("client and server write secrets differ after KeyUpdate")
	}
}

func TestTamperedRecordRefused(t *testing.T) {
	tc, srv := established(t)
	rec := sealRecord(nil, &tc.out, typeApplicationData, []byte("hello"))
	rec[len(rec)-1] ^= 0x80
	tc.conn.Write(rec)
	_, err := srv.Read(make([]byte, 16))
	var ae *alertError
	if !errors.As(err, &ae) || ae.alert != alertBadRecordMAC {
		t.Fatalf("server read: %v, want bad_record_mac", err)
	}
	if _, err := tc.Read(make([]byte, 16)); !isAlert(err, alertBadRecordMAC) {
		t.Fatalf("client got %v, want bad_record_mac alert", err)
	}
}

func isAlert(err error, a uint8) bool {
	var pa *PeerAlertError
	return errors.As(err, &pa) && pa.Alert == a
}

func TestCloseNotify(t *testing.T) {
	tc, srv := established(t)
	tc.conn.Write(sealRecord(nil, &tc.out, typeAlert, []byte{alertLevelWarning, alertCloseNotify}))
	if _, err := srv.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("server read after close_notify: %v, want EOF", err)
	}
	if err := srv.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Read(make([]byte, 16)); err != io.EOF {
		t.Fatalf("client read after server CloseWrite: %v, want EOF", err)
	}
}

func TestEmptyRecordFloodRefused(t *testing.T) {
	tc, srv := established(t)
	var out []byte
	for range maxEmptyRecords + 2 {
		out = sealRecord(out, &tc.out, typeApplicationData, nil)
	}
	tc.conn.Write(out)
	if _, err := srv.Read(make([]byte, 16)); err == nil {
		t.Fatal("server accepted an endless run of empty records")
	}
}

func TestSecondClientHelloMustCarryRequestedShare(t *testing.T) {
	cl, _, done := pair(t)
	tc := newTestClient(cl, "id256", key32, SHA256)
	tc.shares, tc.groups = []uint16{}, []uint16{groupSecp256r1}
	tc.s, _ = SHA256.suite()
	tc.sendHello()
	msg, err := tc.readMsg()
	if err != nil || !bytes.Equal(msg[6:38], helloRetryRandom) {
		t.Fatalf("want a HelloRetryRequest, got %v", err)
	}
	tc.transcript = append(handshakeMsg(msgMessageHash, tc.s.sum(tc.transcript)), msg...)
	tc.shares = []uint16{groupX25519} // not the one asked for
	tc.sendHello()
	wantAlert(t, tc, alertIllegalParameter, done)
}
