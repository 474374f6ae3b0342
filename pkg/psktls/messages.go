package psktls

import (
	"encoding/binary"
	"fmt"
)

// Handshake message types (RFC 8446 §4).
const (
	msgClientHello         uint8 = 1
	msgServerHello         uint8 = 2
	msgNewSessionTicket    uint8 = 4
	msgEndOfEarlyData      uint8 = 5
	msgEncryptedExtensions uint8 = 8
	msgFinished            uint8 = 20
	msgKeyUpdate           uint8 = 24
	msgMessageHash         uint8 = 254
)

// Extension types (RFC 8446 §4.2).
const (
	extSupportedGroups     uint16 = 10
	extPreSharedKey        uint16 = 41
	extEarlyData           uint16 = 42
	extSupportedVersions   uint16 = 43
	extCookie              uint16 = 44
	extPSKKeyExchangeModes uint16 = 45
	extKeyShare            uint16 = 51
)

// Protocol constants.
const (
	versionTLS13 uint16 = 0x0304
	pskModeKE    uint8  = 0 // psk_ke
	pskModeDHEKE uint8  = 1 // psk_dhe_ke
	// maxHandshakeMsg bounds one handshake message: a ClientHello is a
	// few hundred bytes (an NVMe PSK identity is under 600).
	maxHandshakeMsg = 1 << 15
)

// reader consumes a handshake message with bounds checks; every method
// returns false once the input is short.
type reader []byte

func (r *reader) u8() (uint8, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v, true
}

func (r *reader) u16() (uint16, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := binary.BigEndian.Uint16(*r)
	*r = (*r)[2:]
	return v, true
}

func (r *reader) bytes(n int) ([]byte, bool) {
	if n < 0 || len(*r) < n {
		return nil, false
	}
	v := (*r)[:n:n]
	*r = (*r)[n:]
	return v, true
}

// vec8 and vec16 read a vector with a 1- or 2-byte length prefix.
func (r *reader) vec8() (reader, bool) {
	n, ok := r.u8()
	if !ok {
		return nil, false
	}
	b, ok := r.bytes(int(n))
	return reader(b), ok
}

func (r *reader) vec16() (reader, bool) {
	n, ok := r.u16()
	if !ok {
		return nil, false
	}
	b, ok := r.bytes(int(n))
	return reader(b), ok
}

// keyShare is one KeyShareEntry.
type keyShare struct {
	group uint16
	data  []byte
}

// pskIdentity is one PskIdentity of the pre_shared_key extension.
type pskIdentity struct {
	identity []byte
	age      uint32
}

// clientHello is a parsed ClientHello (RFC 8446 §4.1.2):
//
//	uint16 legacy_version = 0x0303;
//	Random random;                                  (32 bytes)
//	opaque legacy_session_id<0..32>;
//	CipherSuite cipher_suites<2..2^16-2>;
//	opaque legacy_compression_methods<1..2^8-1>;    (exactly {0})
//	Extension extensions<8..2^16-1>;
//
// Slices alias raw, the whole message with its 4-byte header.
type clientHello struct {
	raw         []byte
	sessionID   []byte
	suites      []uint16
	versions    []uint16
	groups      []uint16
	shares      []keyShare
	hasShares   bool
	pskModes    []uint8
	identities  []pskIdentity
	binders     [][]byte
	bindersAt   int // offset in raw of the binders vector: the end of the truncated ClientHello
	earlyData   bool
	cookie      bool
	hasVersions bool
}

func decodeErr(what string) error {
	return &alertError{alertDecodeError, "malformed ClientHello: " + what}
}

// parseClientHello parses msg, a whole handshake message of type
// ClientHello. Lengths are checked against what encloses them; an
// extension that appears twice, a pre_shared_key that is not last, or a
// compression method other than null are illegal_parameter.
func parseClientHello(msg []byte) (*clientHello, error) {
	if len(msg) < 4 || msg[0] != msgClientHello || int(msg[1])<<16|int(msg[2])<<8|int(msg[3]) != len(msg)-4 {
		return nil, decodeErr("header")
	}
	ch := &clientHello{raw: msg}
	r := reader(msg[4:])
	if _, ok := r.u16(); !ok {
		return nil, decodeErr("legacy_version")
	}
	if _, ok := r.bytes(32); !ok {
		return nil, decodeErr("random")
	}
	sid, ok := r.vec8()
	if !ok || len(sid) > 32 {
		return nil, decodeErr("legacy_session_id")
	}
	ch.sessionID = sid
	suites, ok := r.vec16()
	if !ok || len(suites) < 2 || len(suites)%2 != 0 {
		return nil, decodeErr("cipher_suites")
	}
	for len(suites) > 0 {
		s, _ := suites.u16()
		ch.suites = append(ch.suites, s)
	}
	comp, ok := r.vec8()
	if !ok || len(comp) < 1 {
		return nil, decodeErr("legacy_compression_methods")
	}
	if len(comp) != 1 || comp[0] != 0 {
		return nil, &alertError{alertIllegalParameter, "compression methods other than null"}
	}
	if len(r) == 0 {
		return nil, &alertError{alertMissingExtension, "ClientHello without extensions"}
	}
	exts, ok := r.vec16()
	if !ok || len(r) != 0 {
		return nil, decodeErr("extensions length")
	}
	return ch, ch.parseExtensions(exts)
}

// parseExtensions parses the extensions vector.
func (ch *clientHello) parseExtensions(exts reader) error {
	seen := make(map[uint16]bool)
	for len(exts) > 0 {
		typ, ok := exts.u16()
		if !ok {
			return decodeErr("extension type")
		}
		data, ok := exts.vec16()
		if !ok {
			return decodeErr(fmt.Sprintf("extension %d length", typ))
		}
		if seen[typ] {
			return &alertError{alertIllegalParameter, fmt.Sprintf("extension %d twice", typ)}
		}
		seen[typ] = true
		if typ == extPreSharedKey && len(exts) != 0 {
			return &alertError{alertIllegalParameter, "pre_shared_key is not the last extension"}
		}
		if err := ch.parseExtension(typ, data); err != nil {
			return err
		}
	}
	return nil
}

// parseExtension parses one extension's data.
func (ch *clientHello) parseExtension(typ uint16, data reader) error {
	var ok bool
	switch typ {
	case extSupportedVersions:
		ch.hasVersions = true
		ch.versions, ok = u16List(&data, data.vec8)
	case extSupportedGroups:
		ch.groups, ok = u16List(&data, data.vec16)
	case extKeyShare:
		ch.hasShares = true
		ok = ch.parseKeyShares(data)
	case extPSKKeyExchangeModes:
		var modes reader
		modes, ok = data.vec8()
		ok = ok && len(modes) > 0 && len(data) == 0
		ch.pskModes = modes
	case extPreSharedKey:
		ok = ch.parsePreSharedKey(data)
	case extEarlyData:
		ch.earlyData, ok = true, len(data) == 0
	case extCookie:
		ch.cookie, ok = true, true
	default:
		return nil // unknown extensions are ignored (RFC 8446 §4.2)
	}
	if !ok {
		return decodeErr(fmt.Sprintf("extension %d", typ))
	}
	return nil
}

// u16List reads a vector of uint16 with vec (vec8 or vec16 of data); the
// vector must fill data and be non-empty and even.
func u16List(data *reader, vec func() (reader, bool)) ([]uint16, bool) {
	l, ok := vec()
	if !ok || len(*data) != 0 || len(l) < 2 || len(l)%2 != 0 {
		return nil, false
	}
	out := make([]uint16, 0, len(l)/2)
	for len(l) > 0 {
		v, _ := l.u16()
		out = append(out, v)
	}
	return out, true
}

// parseKeyShares reads KeyShareClientHello: client_shares<0..2^16-1>.
func (ch *clientHello) parseKeyShares(data reader) bool {
	l, ok := data.vec16()
	if !ok || len(data) != 0 {
		return false
	}
	for len(l) > 0 {
		g, ok := l.u16()
		if !ok {
			return false
		}
		kx, ok := l.vec16()
		if !ok || len(kx) == 0 {
			return false
		}
		for _, s := range ch.shares {
			if s.group == g {
				return false // RFC 8446 §4.2.8: one share per group
			}
		}
		ch.shares = append(ch.shares, keyShare{g, kx})
	}
	return true
}

// parsePreSharedKey reads OfferedPsks (RFC 8446 §4.2.11):
//
//	PskIdentity identities<7..2^16-1>;  (identity<1..2^16-1>, uint32 age)
//	PskBinderEntry binders<33..2^16-1>; (opaque binder<32..255>)
//
// data aliases ch.raw, so its remaining length gives the binders' offset.
func (ch *clientHello) parsePreSharedKey(data reader) bool {
	ids, ok := data.vec16()
	if !ok || len(ids) < 7 {
		return false
	}
	for len(ids) > 0 {
		id, ok := ids.vec16()
		if !ok || len(id) == 0 {
			return false
		}
		age, ok := ids.bytes(4)
		if !ok {
			return false
		}
		ch.identities = append(ch.identities, pskIdentity{id, binary.BigEndian.Uint32(age)})
	}
	ch.bindersAt = len(ch.raw) - len(data)
	binders, ok := data.vec16()
	if !ok || len(data) != 0 || len(binders) < 33 {
		return false
	}
	for len(binders) > 0 {
		b, ok := binders.vec8()
		if !ok || len(b) < 32 {
			return false
		}
		ch.binders = append(ch.binders, b)
	}
	return len(ch.binders) == len(ch.identities)
}

// handshakeMsg frames body as a handshake message of type typ.
func handshakeMsg(typ uint8, body []byte) []byte {
	out := make([]byte, 4, 4+len(body))
	out[0], out[1], out[2], out[3] = typ, byte(len(body)>>16), byte(len(body)>>8), byte(len(body))
	return append(out, body...)
}

// helloRetryRandom is the ServerHello.random of a HelloRetryRequest
// (RFC 8446 §4.1.3): SHA-256 of "HelloRetryRequest".
var helloRetryRandom = []byte{
	0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91,
	0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
}

// serverHello encodes a ServerHello (or, with random = helloRetryRandom,
// a HelloRetryRequest) with the given extensions, each already framed.
func serverHello(random, sessionID []byte, suiteID uint16, exts ...[]byte) []byte {
	b := make([]byte, 0, 128)
	b = append(b, 3, 3)
	b = append(b, random...)
	b = append(b, byte(len(sessionID)))
	b = append(b, sessionID...)
	b = binary.BigEndian.AppendUint16(b, suiteID)
	b = append(b, 0) // legacy_compression_method
	n := 0
	for _, e := range exts {
		n += len(e)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	for _, e := range exts {
		b = append(b, e...)
	}
	return handshakeMsg(msgServerHello, b)
}

// extension frames one extension.
func extension(typ uint16, data []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

func u16Bytes(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
