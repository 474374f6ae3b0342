package nvme

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"strings"

	"basalt/pkg/nvmekey"
)

// TLS PSKs for the NVMe/TCP secure channel (NVMe/TCP Transport 1.1
// §3.6.1.3). A configured PSK is written in the PSK interchange format:
//
//	NVMeTLSkey-1:hh:<base64 of key || CRC-32(key), little-endian>:
//
// where hh is the hash that turns it into a retained PSK: 00 none (the
// configured PSK is the retained PSK), 01 SHA-256, 02 SHA-384; the key is
// 32 or 48 bytes (48 for 02). The retained PSK and the PSK identity give
// the TLS PSK the handshake uses. The identity names the host and the
// subsystem:
//
//	version 0:  NVMe0R<hh> <host NQN> <subsystem NQN>
//	version 1:  NVMe1R<hh> <host NQN> <subsystem NQN> <PSK digest>
//
// where hh is the hash of the cipher suite (01 TLS_AES_128_GCM_SHA256, 02
// TLS_AES_256_GCM_SHA384) and the digest is base64(HMAC(retained PSK,
// "<host NQN> <subsystem NQN> NVMe-over-Fabrics")).
//
// Two derivations are in use. libnvme before 1.16 (nvme-cli 2.13 and
// older, which insert the keys the Linux host's tlshd uses) builds the
// HKDF info without the HkdfLabel length bytes and with the length
// little-endian; libnvme 1.16 and later follow RFC 8446's
// HKDF-Expand-Label. Both give the same version-0 identity but different
// keys, and version-1 identities differ in their digest.

// TLSPSKHash is the hh of a configured PSK or a PSK identity.
type TLSPSKHash uint8

// PSK hash specifiers.
const (
	TLSPSKHashNone   TLSPSKHash = 0
	TLSPSKHashSHA256 TLSPSKHash = 1
	TLSPSKHashSHA384 TLSPSKHash = 2
)

// ErrTLSPSK is wrapped by every error about a configured PSK or identity.
var ErrTLSPSK = errors.New("nvme: invalid TLS PSK")

// ConfiguredPSK is a PSK parsed from the interchange format. Key is
// secret.
type ConfiguredPSK struct {
	Hash TLSPSKHash
	Key  []byte
}

// String hides the key.
func (c ConfiguredPSK) String() string {
	return fmt.Sprintf("ConfiguredPSK(hh=%02d, %d bytes)", c.Hash, len(c.Key))
}

// ParseTLSPSK parses s in the interchange format (with nvmekey, the one
// parser of it) and checks its CRC-32. Beyond what nvme-cli writes it
// takes hh 00 with a 32- or 48-byte key, CR and LF inside the base64, and
// nonzero bits after the key in its last digit. The error never contains
// the key.
func ParseTLSPSK(s string) (ConfiguredPSK, error) {
	k, err := nvmekey.ParseTLSPSK(s, nvmekey.TLSHashNone(), nvmekey.SkipNewlines(), nvmekey.NonzeroPadBits())
	if err != nil {
		return ConfiguredPSK{}, fmt.Errorf("%w: %w", ErrTLSPSK, err)
	}
	return ConfiguredPSK{Hash: TLSPSKHash(k.Transform), Key: k.Secret}, nil
}

// FormatTLSPSK writes key in the interchange format with hash specifier h.
func FormatTLSPSK(h TLSPSKHash, key []byte) string {
	return nvmekey.Encode(nvmekey.TLSPSKPrefix, byte(h), key)
}

// CipherHash is the hash of the cipher suite the PSK goes with: hh, or
// for hh 00 the key's length (32: SHA-256, 48: SHA-384).
func (c ConfiguredPSK) CipherHash() TLSPSKHash {
	if c.Hash != TLSPSKHashNone {
		return c.Hash
	}
	if len(c.Key) == 48 {
		return TLSPSKHashSHA384
	}
	return TLSPSKHashSHA256
}

func (h TLSPSKHash) newHash() func() hash.Hash {
	if h == TLSPSKHashSHA384 {
		return sha512.New384
	}
	return sha256.New
}

// expandInfo is the HKDF info for label and context: HkdfLabel (RFC 8446
// §7.1) or, with compat, libnvme's form before 1.16 (little-endian length,
// no length bytes before label and context).
func expandInfo(compat bool, length int, label, context string) string {
	var b []byte
	if compat {
		b = binary.LittleEndian.AppendUint16(b, uint16(length))
		return string(b) + "tls13 " + label + context
	}
	b = binary.BigEndian.AppendUint16(b, uint16(length))
	b = append(b, byte(6+len(label)))
	b = append(b, "tls13 "+label...)
	b = append(b, byte(len(context)))
	return string(b) + context
}

// hkdfLabel is HKDF-Extract(0, ikm) then HKDF-Expand with expandInfo.
func hkdfLabel(h TLSPSKHash, compat bool, ikm []byte, label, context string, length int) []byte {
	prk, err := hkdf.Extract(h.newHash(), ikm, nil)
	if err == nil {
		var out []byte
		if out, err = hkdf.Expand(h.newHash(), prk, expandInfo(compat, length, label, context), length); err == nil {
			return out
		}
	}
	panic("nvme: HKDF: " + err.Error()) // lengths are 32 or 48
}

// RetainedPSK derives the retained PSK for hostNQN: HKDF-Expand-Label(
// HKDF-Extract(0, configured), "HostNQN", hostNQN, len) for hh 01/02, the
// configured key itself for hh 00.
func (c ConfiguredPSK) RetainedPSK(hostNQN string, compat bool) []byte {
	if c.Hash == TLSPSKHashNone {
		return c.Key
	}
	return hkdfLabel(c.Hash, compat, c.Key, "HostNQN", hostNQN, len(c.Key))
}

// pskDigest is the version-1 identity's PSK digest.
func pskDigest(h TLSPSKHash, retained []byte, hostNQN, subNQN string) string {
	m := hmac.New(h.newHash(), retained)
	m.Write([]byte(hostNQN + " " + subNQN + " NVMe-over-Fabrics"))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TLSPSK is a TLS PSK with the identity it is offered under. Key is
// secret.
type TLSPSK struct {
	Identity string
	Hash     TLSPSKHash // of the cipher suite
	Key      []byte
}

// TLSPSKs derives the TLS PSKs a host may offer for c between hostNQN and
// subNQN: identity versions 0 and 1, each with libnvme's RFC 8446 and
// pre-1.16 derivations (for version 0 the two share the identity).
func (c ConfiguredPSK) TLSPSKs(hostNQN, subNQN string) []TLSPSK {
	h := c.CipherHash()
	out := make([]TLSPSK, 0, 4)
	for _, compat := range []bool{false, true} {
		retained := c.RetainedPSK(hostNQN, compat)
		id0 := fmt.Sprintf("NVMe0R%02d %s %s", h, hostNQN, subNQN)
		out = append(out, TLSPSK{id0, h, hkdfLabel(h, compat, retained, "nvme-tls-psk", id0, len(c.Key))})
		digest := pskDigest(h, retained, hostNQN, subNQN)
		id1 := fmt.Sprintf("NVMe1R%02d %s %s %s", h, hostNQN, subNQN, digest)
		out = append(out, TLSPSK{id1, h, hkdfLabel(h, compat, retained, "nvme-tls-psk", fmt.Sprintf("%02d %s", h, digest), len(c.Key))})
	}
	return out
}

// PSKIdentity is a parsed NVMe TLS PSK identity.
type PSKIdentity struct {
	Version uint8
	Hash    TLSPSKHash
	HostNQN string
	SubNQN  string
	Digest  string // version 1 only
}

// ParsePSKIdentity parses a retained-PSK identity ("NVMe0R01 host sub" or
// "NVMe1R02 host sub digest"). Generated PSKs (secure channel
// concatenation, "NVMe0G..") are refused: this target does not run
// DH-HMAC-CHAP's secure concatenation.
func ParsePSKIdentity(id string) (PSKIdentity, error) {
	f := strings.Split(id, " ")
	if len(f[0]) != 8 || !strings.HasPrefix(f[0], "NVMe") || f[0][5] != 'R' {
		return PSKIdentity{}, fmt.Errorf("%w: identity %.16q is not NVMe<v>R<hh>", ErrTLSPSK, id)
	}
	p := PSKIdentity{}
	switch f[0][4] {
	case '0':
		p.Version = 0
	case '1':
		p.Version = 1
	default:
		return PSKIdentity{}, fmt.Errorf("%w: identity version %q", ErrTLSPSK, f[0][4])
	}
	switch f[0][6:] {
	case "01":
		p.Hash = TLSPSKHashSHA256
	case "02":
		p.Hash = TLSPSKHashSHA384
	default:
		return PSKIdentity{}, fmt.Errorf("%w: identity hash %q", ErrTLSPSK, f[0][6:])
	}
	if len(f) != 3+int(p.Version) {
		return PSKIdentity{}, fmt.Errorf("%w: identity has %d fields", ErrTLSPSK, len(f))
	}
	p.HostNQN, p.SubNQN = f[1], f[2]
	if p.Version == 1 {
		p.Digest = f[3]
	}
	if p.HostNQN == "" || p.SubNQN == "" || len(p.HostNQN) > NQNMaxSize || len(p.SubNQN) > NQNMaxSize {
		return PSKIdentity{}, fmt.Errorf("%w: identity NQNs", ErrTLSPSK)
	}
	return p, nil
}
