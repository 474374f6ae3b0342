package psktls

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"hash"
)

// Hash is the hash function a PSK is associated with (RFC 8446 §4.2.11);
// it selects the cipher suite.
type Hash uint8

// The hashes of the two cipher suites.
const (
	SHA256 Hash = 1 // TLS_AES_128_GCM_SHA256
	SHA384 Hash = 2 // TLS_AES_256_GCM_SHA384
)

// Cipher suite code points (RFC 8446 §B.4).
const (
	suiteAES128GCMSHA256 uint16 = 0x1301
	suiteAES256GCMSHA384 uint16 = 0x1302
)

// suite is one TLS 1.3 cipher suite: its AEAD key length and hash.
type suite struct {
	id     uint16
	keyLen int
	hash   crypto.Hash
}

func (h Hash) suite() (*suite, bool) {
	switch h {
	case SHA256:
		return &suite{id: suiteAES128GCMSHA256, keyLen: 16, hash: crypto.SHA256}, true
	case SHA384:
		return &suite{id: suiteAES256GCMSHA384, keyLen: 32, hash: crypto.SHA384}, true
	}
	return nil, false
}

// String names the hash.
func (h Hash) String() string {
	switch h {
	case SHA256:
		return "SHA-256"
	case SHA384:
		return "SHA-384"
	}
	return fmt.Sprintf("Hash(%d)", uint8(h))
}

func (s *suite) newHash() func() hash.Hash {
	if s.hash == crypto.SHA384 {
		return sha512.New384
	}
	return sha256.New
}

func (s *suite) size() int { return s.hash.Size() }

// sum is Transcript-Hash over the concatenated handshake messages.
func (s *suite) sum(msgs ...[]byte) []byte {
	h := s.newHash()()
	for _, m := range msgs {
		h.Write(m)
	}
	return h.Sum(nil)
}

// extract is HKDF-Extract(salt, ikm); a nil ikm is a string of zeros of
// the hash's length (RFC 8446 §7.1).
func (s *suite) extract(ikm, salt []byte) []byte {
	if ikm == nil {
		ikm = make([]byte, s.size())
	}
	prk, err := hkdf.Extract(s.newHash(), ikm, salt)
	if err != nil {
		panic("psktls: HKDF-Extract: " + err.Error()) // only for a FIPS-refused key length
	}
	return prk
}

// expandLabel is HKDF-Expand-Label(secret, label, context, length)
// (RFC 8446 §7.1):
//
//	struct {
//	    uint16 length = Length;
//	    opaque label<7..255> = "tls13 " + Label;
//	    opaque context<0..255> = Context;
//	} HkdfLabel;
func (s *suite) expandLabel(secret []byte, label string, context []byte, length int) []byte {
	info := make([]byte, 0, 2+1+6+len(label)+1+len(context))
	info = binary.BigEndian.AppendUint16(info, uint16(length))
	info = append(info, byte(6+len(label)))
	info = append(info, "tls13 "...)
	info = append(info, label...)
	info = append(info, byte(len(context)))
	info = append(info, context...)
	out, err := hkdf.Expand(s.newHash(), secret, string(info), length)
	if err != nil {
		panic("psktls: HKDF-Expand: " + err.Error()) // length is at most 48
	}
	return out
}

// deriveSecret is Derive-Secret(secret, label, messages) given the
// transcript hash of the messages.
func (s *suite) deriveSecret(secret []byte, label string, transcriptHash []byte) []byte {
	return s.expandLabel(secret, label, transcriptHash, s.size())
}

// finishedMAC is the verify_data of a Finished message (or a binder) keyed
// from baseKey over transcriptHash (RFC 8446 §4.4.4).
func (s *suite) finishedMAC(baseKey, transcriptHash []byte) []byte {
	key := s.expandLabel(baseKey, "finished", nil, s.size())
	m := hmac.New(s.newHash(), key)
	m.Write(transcriptHash)
	return m.Sum(nil)
}

// trafficAEAD builds the record protection of a traffic secret: the
// AES-GCM key and the 12-byte IV (RFC 8446 §7.3).
func (s *suite) trafficAEAD(secret []byte) (cipher.AEAD, []byte) {
	key := s.expandLabel(secret, "key", nil, s.keyLen)
	iv := s.expandLabel(secret, "iv", nil, nonceSize)
	block, err := aes.NewCipher(key)
	if err != nil {
		panic("psktls: AES key: " + err.Error()) // keyLen is 16 or 32
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("psktls: GCM: " + err.Error())
	}
	return aead, iv
}

// nextTrafficSecret is application_traffic_secret_N+1 (RFC 8446 §7.2).
func (s *suite) nextTrafficSecret(secret []byte) []byte {
	return s.expandLabel(secret, "traffic upd", nil, s.size())
}

// keySchedule holds the secrets of RFC 8446 §7.1 for one handshake.
type keySchedule struct {
	s      *suite
	early  []byte
	hs     []byte
	master []byte
}

// newKeySchedule starts the schedule from the PSK.
func newKeySchedule(s *suite, psk []byte) *keySchedule {
	return &keySchedule{s: s, early: s.extract(psk, nil)}
}

// binderKey is the key of the PSK binders ("ext binder": external PSKs).
func (k *keySchedule) binderKey() []byte {
	return k.s.deriveSecret(k.early, "ext binder", k.s.sum())
}

// handshakeSecret mixes in the (EC)DHE shared secret (nil for psk_ke).
func (k *keySchedule) handshakeSecret(shared []byte) {
	derived := k.s.deriveSecret(k.early, "derived", k.s.sum())
	k.hs = k.s.extract(shared, derived)
	derived = k.s.deriveSecret(k.hs, "derived", k.s.sum())
	k.master = k.s.extract(nil, derived)
}
