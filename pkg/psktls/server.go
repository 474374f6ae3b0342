package psktls

import (
	"crypto/ecdh"
	"crypto/hmac"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// Named groups (RFC 8446 §4.2.7) in the server's order of preference.
const (
	groupX25519    uint16 = 0x001d
	groupSecp256r1 uint16 = 0x0017
	groupSecp384r1 uint16 = 0x0018
)

var serverGroups = []uint16{groupX25519, groupSecp256r1, groupSecp384r1}

func curveOf(g uint16) ecdh.Curve {
	switch g {
	case groupX25519:
		return ecdh.X25519()
	case groupSecp256r1:
		return ecdh.P256()
	case groupSecp384r1:
		return ecdh.P384()
	}
	return nil
}

// maxEarlyDataSkipped bounds the 0-RTT bytes skipped when a client sends
// early data the server does not accept (RFC 8446 §4.2.10).
const maxEarlyDataSkipped = 1 << 16

// handshakeState is one server handshake in progress.
type handshakeState struct {
	c          *Conn
	transcript []byte // the handshake messages so far
	ch         *clientHello
	hrrSent    bool
	hrrGroup   uint16
	suite      *suite
	psk        []byte
	selected   int    // index of the selected identity
	group      uint16 // 0: psk_ke
}

func handshakeFailure(format string, args ...any) error {
	return &alertError{alertHandshakeFailure, fmt.Sprintf(format, args...)}
}

// serverHandshake runs RFC 8446's server handshake for an external PSK.
// Called with readMu and writeMu held.
func (c *Conn) serverHandshake() error {
	if c.cfg == nil || c.cfg.PSKs == nil {
		return c.failLocked(&alertError{alertInternalError, "no PSK lookup configured"})
	}
	c.rbuf = make([]byte, recordHeaderLen+maxCiphertext)
	hs := &handshakeState{c: c}
	if err := hs.run(); err != nil {
		return c.failLocked(err)
	}
	c.hsBuf = nil
	return nil
}

func (hs *handshakeState) run() error {
	c := hs.c
	msg, err := c.readHandshakeMsg(false, false)
	if err != nil {
		return err
	}
	if err := hs.processClientHello(msg); err != nil {
		return err
	}
	if hs.hrrSent {
		msg, err = c.readHandshakeMsg(true, false)
		if err != nil {
			return err
		}
		if err := hs.processClientHello(msg); err != nil {
			return err
		}
	}
	return hs.finish()
}

// readHandshakeMsg reads one whole handshake message during the
// handshake; change_cipher_spec records are skipped once the first
// ClientHello is in (middlebox compatibility, RFC 8446 §5). The message
// must end its record: every message read here precedes a key change or
// the end of the handshake. With skipEarly, records that do not open
// are skipped, up to maxEarlyDataSkipped bytes, until one does: the
// client's 0-RTT data, under keys the server never derives.
func (c *Conn) readHandshakeMsg(afterFirstHello, skipEarly bool) ([]byte, error) {
	skipped := 0
	for {
		if len(c.hsBuf) >= 4 {
			n := int(c.hsBuf[1])<<16 | int(c.hsBuf[2])<<8 | int(c.hsBuf[3])
			if n > maxHandshakeMsg {
				return nil, &alertError{alertDecodeError, fmt.Sprintf("handshake message of %d bytes", n)}
			}
			if len(c.hsBuf) == 4+n {
				msg := c.hsBuf
				c.hsBuf = nil
				return msg, nil
			}
			if len(c.hsBuf) > 4+n {
				return nil, &alertError{alertUnexpectedMessage, "handshake message followed by more in its record"}
			}
		}
		typ, frag, err := readRecord(c.conn, &c.in, c.rbuf)
		if err == errBadRecordMAC && skipEarly {
			skipped += recordHeaderLen + (int(c.rbuf[3])<<8 | int(c.rbuf[4]))
			if skipped <= maxEarlyDataSkipped {
				continue
			}
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		skipEarly = false // once a record opens, early data is over
		switch typ {
		case typeHandshake:
			if len(c.hsBuf)+len(frag) > 4+maxHandshakeMsg {
				return nil, &alertError{alertDecodeError, "handshake message too large"}
			}
			c.hsBuf = append(c.hsBuf, frag...)
		case typeChangeCipherSpec:
			if !afterFirstHello || len(frag) != 1 || frag[0] != 1 {
				return nil, &alertError{alertUnexpectedMessage, "unexpected change_cipher_spec"}
			}
		case typeAlert:
			if err := alertRecord(frag); err != io.EOF {
				return nil, err
			}
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, &alertError{alertUnexpectedMessage, fmt.Sprintf("record type %d during the handshake", typ)}
		}
	}
}

// processClientHello checks a ClientHello (the first, or the second after
// a HelloRetryRequest), selects the PSK, the suite and the key exchange,
// and sends a HelloRetryRequest when a share is missing.
func (hs *handshakeState) processClientHello(msg []byte) error {
	if msg[0] != msgClientHello {
		return &alertError{alertUnexpectedMessage, fmt.Sprintf("handshake message type %d, expected ClientHello", msg[0])}
	}
	ch, err := parseClientHello(msg)
	if err != nil {
		return err
	}
	if !ch.hasVersions || !slices.Contains(ch.versions, versionTLS13) {
		return &alertError{alertProtocolVersion, "client does not offer TLS 1.3"}
	}
	if len(ch.identities) == 0 {
		return handshakeFailure("client offers no pre-shared key")
	}
	if ch.pskModes == nil {
		return &alertError{alertMissingExtension, "pre_shared_key without psk_key_exchange_modes"}
	}
	if hs.hrrSent && (ch.earlyData || !slices.Equal(ch.sessionID, hs.ch.sessionID)) {
		return &alertError{alertIllegalParameter, "second ClientHello changes what it may not"}
	}
	hs.ch = ch
	if err := hs.selectPSK(); err != nil {
		return err
	}
	return hs.selectKeyExchange()
}

// selectPSK finds the first offered identity and candidate key whose
// suite the client offers and whose binder verifies (each compared in
// constant time). After a HelloRetryRequest the suite is fixed.
func (hs *handshakeState) selectPSK() error {
	ch := hs.ch
	known, offered := false, false
	for i, id := range ch.identities {
		for _, cand := range hs.c.cfg.PSKs(id.identity) {
			s, ok := cand.Hash.suite()
			if !ok || len(cand.Key) == 0 {
				continue
			}
			known = true
			if !slices.Contains(ch.suites, s.id) || hs.hrrSent && s.id != hs.suite.id {
				continue
			}
			offered = true
			if hs.binderOK(s, cand.Key, i) {
				hs.suite, hs.psk, hs.selected = s, cand.Key, i
				hs.c.identity = string(id.identity)
				return nil
			}
		}
	}
	switch {
	case !known:
		return &alertError{alertUnknownPSKIdentity, "no offered PSK identity is known"}
	case !offered:
		return handshakeFailure("client offers no cipher suite for its PSK")
	}
	return &alertError{alertDecryptError, "PSK binder does not verify"}
}

// binderOK verifies the binder of identity i: an HMAC over the transcript
// up to the truncated ClientHello (RFC 8446 §4.2.11.2); before it, the
// transcript is empty or message_hash(ClientHello1) || HelloRetryRequest.
func (hs *handshakeState) binderOK(s *suite, psk []byte, i int) bool {
	ks := newKeySchedule(s, psk)
	th := s.sum(hs.transcript, hs.ch.raw[:hs.ch.bindersAt])
	return hmac.Equal(s.finishedMAC(ks.binderKey(), th), hs.ch.binders[i])
}

// selectKeyExchange picks psk_dhe_ke with a share of the client's or
// psk_ke; when the client offers a common group without a share it sends
// a HelloRetryRequest (once).
func (hs *handshakeState) selectKeyExchange() error {
	ch := hs.ch
	if slices.Contains(ch.pskModes, pskModeDHEKE) {
		for _, g := range serverGroups {
			for _, sh := range ch.shares {
				if sh.group == g && (!hs.hrrSent || g == hs.hrrGroup) {
					hs.group = g
					return nil
				}
			}
		}
		if hs.hrrSent {
			return &alertError{alertIllegalParameter, "second ClientHello has no share for the requested group"}
		}
		for _, g := range serverGroups {
			if slices.Contains(ch.groups, g) {
				return hs.sendHelloRetryRequest(g)
			}
		}
	}
	if slices.Contains(ch.pskModes, pskModeKE) {
		hs.group = 0
		return nil
	}
	return handshakeFailure("no common key exchange mode or group")
}

// sendHelloRetryRequest asks for a share of group g. The transcript
// restarts as message_hash(ClientHello1) || HelloRetryRequest (RFC 8446
// §4.4.1).
func (hs *handshakeState) sendHelloRetryRequest(g uint16) error {
	s := hs.suite
	hrr := serverHello(helloRetryRandom, hs.ch.sessionID, s.id,
		extension(extSupportedVersions, u16Bytes(versionTLS13)),
		extension(extKeyShare, u16Bytes(g)))
	hash := s.sum(hs.ch.raw)
	hs.transcript = append(handshakeMsg(msgMessageHash, hash), hrr...)
	hs.hrrSent, hs.hrrGroup = true, g
	c := hs.c
	c.wbuf = sealRecord(c.wbuf[:0], &c.out, typeHandshake, hrr)
	if _, err := c.conn.Write(c.wbuf); err != nil {
		return err
	}
	return nil
}

// finish sends ServerHello, EncryptedExtensions and Finished, reads the
// client's Finished and installs the application traffic keys.
func (hs *handshakeState) finish() error {
	c, s := hs.c, hs.suite
	var shared, serverShare []byte
	if hs.group != 0 {
		var err error
		if shared, serverShare, err = hs.ecdhe(); err != nil {
			return err
		}
	}
	random := make([]byte, 32)
	if _, err := io.ReadFull(c.rand(), random); err != nil {
		return &alertError{alertInternalError, "random: " + err.Error()}
	}
	exts := [][]byte{extension(extSupportedVersions, u16Bytes(versionTLS13))}
	if hs.group != 0 {
		ks := binary.BigEndian.AppendUint16(u16Bytes(hs.group), uint16(len(serverShare)))
		exts = append(exts, extension(extKeyShare, append(ks, serverShare...)))
	}
	exts = append(exts, extension(extPreSharedKey, u16Bytes(uint16(hs.selected))))
	sh := serverHello(random, hs.ch.sessionID, s.id, exts...)
	hs.transcript = append(append(hs.transcript, hs.ch.raw...), sh...)

	ks := newKeySchedule(s, hs.psk)
	ks.handshakeSecret(shared)
	th := s.sum(hs.transcript)
	cHS := s.deriveSecret(ks.hs, "c hs traffic", th)
	sHS := s.deriveSecret(ks.hs, "s hs traffic", th)

	c.wbuf = sealRecord(c.wbuf[:0], &c.out, typeHandshake, sh)
	c.out.setKey(s, sHS)
	ee := handshakeMsg(msgEncryptedExtensions, []byte{0, 0})
	hs.transcript = append(hs.transcript, ee...)
	fin := handshakeMsg(msgFinished, s.finishedMAC(sHS, s.sum(hs.transcript)))
	hs.transcript = append(hs.transcript, fin...)
	c.wbuf = sealRecord(c.wbuf, &c.out, typeHandshake, append(ee, fin...))
	if _, err := c.conn.Write(c.wbuf); err != nil {
		return err
	}
	th = s.sum(hs.transcript)
	cAP := s.deriveSecret(ks.master, "c ap traffic", th)
	sAP := s.deriveSecret(ks.master, "s ap traffic", th)
	c.out.setKey(s, sAP)

	c.in.setKey(s, cHS)
	msg, err := c.readHandshakeMsg(true, hs.ch.earlyData)
	if err != nil {
		return err
	}
	if msg[0] != msgFinished {
		return &alertError{alertUnexpectedMessage, fmt.Sprintf("handshake message type %d, expected Finished", msg[0])}
	}
	if !hmac.Equal(msg[4:], s.finishedMAC(cHS, th)) {
		return &alertError{alertDecryptError, "client Finished does not verify"}
	}
	c.in.setKey(s, cAP)
	c.suite, c.group = s, hs.group
	return nil
}

// ecdhe completes the (EC)DHE exchange with the client's share of
// hs.group; an invalid share is illegal_parameter (RFC 8446 §4.2.8.2).
func (hs *handshakeState) ecdhe() (shared, public []byte, err error) {
	curve := curveOf(hs.group)
	var peer []byte
	for _, sh := range hs.ch.shares {
		if sh.group == hs.group {
			peer = sh.data
		}
	}
	pub, err := curve.NewPublicKey(peer)
	if err != nil {
		return nil, nil, &alertError{alertIllegalParameter, "invalid key share"}
	}
	priv, err := curve.GenerateKey(hs.c.rand())
	if err != nil {
		return nil, nil, &alertError{alertInternalError, "key share: " + err.Error()}
	}
	shared, err = priv.ECDH(pub)
	if err != nil {
		return nil, nil, &alertError{alertIllegalParameter, "invalid key share"}
	}
	return shared, priv.PublicKey().Bytes(), nil
}
