// Package nvmekey reads, checks and generates the textual representations
// of the secrets an NVMe host and a target share: the DH-HMAC-CHAP secret
// that `nvme gen-dhchap-key` prints (NVMe Base 2.0 §8.13.5.8) and the TLS
// PSK interchange format that `nvme gen-tls-key` prints (NVMe/TCP 1.0
// §3.6.1.5). Both have the same shape:
//
//	"DHHC-1:" | "NVMeTLSkey-1:"   prefix (case sensitive)
//	hh                            two decimal digits, then ':'
//	base64(key || crc)            RFC 4648 standard alphabet, padded, then ':'
//
//	key   32, 48 or 64 bytes: the secret itself
//	crc   4 bytes: CRC-32 (IEEE 802.3, the one of zlib) of key, little endian
//
// For DH-HMAC-CHAP, hh names the hash that transforms the secret before
// use: 00 none, 01 SHA-256, 02 SHA-384, 03 SHA-512; any key length goes
// with any hh, as the Linux host accepts. For a TLS PSK, hh names the hash
// of the PSK's HMAC: 01 SHA-256 with a 32-byte key, 02 SHA-384 with a
// 48-byte key, as nvme-cli and libnvme accept them.
//
// This package is the one parser and encoder of both texts. Without
// options a parse accepts exactly the canonical text Encode writes (what
// the API and the configuration check host secrets against); a caller
// that must take what its peers write widens it with Options (pkg/dhchap:
// no final ':'; pkg/nvme: hh 00 for a TLS PSK) and keeps its own typed
// result.
//
// Errors never contain any part of the text they refuse: it is a secret.
package nvmekey

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// The prefixes of the two representations.
const (
	DHCHAPPrefix = "DHHC-1:"
	TLSPSKPrefix = "NVMeTLSkey-1:"
)

// Transform identifiers (hh).
const (
	TransformNone   byte = 0
	TransformSHA256 byte = 1
	TransformSHA384 byte = 2
	TransformSHA512 byte = 3
)

// ErrMalformed is the class of every refusal.
var ErrMalformed = errors.New("malformed")

// Key is a parsed secret.
type Key struct {
	// Transform is hh.
	Transform byte
	// Secret is the key without its CRC.
	Secret []byte
}

// An Option widens what a parse accepts beyond the canonical text that
// Encode writes, for a caller that must take what its peers write. Without
// options a parse accepts exactly the canonical text.
type Option func(*rules)

type rules struct {
	finalColonOptional bool // the final ':' may be missing
	newlines           bool // CR and LF inside the base64 are skipped
	nonzeroPadBits     bool // the bits after the key in the last base64 digit need not be 0
	tlsHashNone        bool // a TLS PSK may have hh 00, with a 32- or 48-byte key
}

// FinalColonOptional accepts the text without its final ':', as the Linux
// host's DH-HMAC-CHAP secret parser (nvme_auth_extract_key) does.
func FinalColonOptional() Option { return func(r *rules) { r.finalColonOptional = true } }

// SkipNewlines accepts CR and LF anywhere inside the base64, and skips
// them, as Go's base64 decoder does.
func SkipNewlines() Option { return func(r *rules) { r.newlines = true } }

// NonzeroPadBits accepts base64 whose last digit before the padding
// carries nonzero bits beyond the key (non-canonical base64, which the
// text then does not re-encode to).
func NonzeroPadBits() Option { return func(r *rules) { r.nonzeroPadBits = true } }

// TLSHashNone lets ParseTLSPSK accept hh 00 (NVMe/TCP: no hash, the
// configured PSK is the retained PSK) with a 32- or 48-byte key. It has no
// effect on ParseDHCHAP.
func TLSHashNone() Option { return func(r *rules) { r.tlsHashNone = true } }

func newRules(opts []Option) rules {
	var r rules
	for _, o := range opts {
		o(&r)
	}
	return r
}

// ParseDHCHAP parses a DH-HMAC-CHAP secret ("DHHC-1:01:...:").
func ParseDHCHAP(s string, opts ...Option) (Key, error) {
	k, err := parse(s, DHCHAPPrefix, newRules(opts))
	if err != nil {
		return k, fmt.Errorf("%w DH-HMAC-CHAP secret: %w (want DHHC-1:hh:base64: as nvme gen-dhchap-key prints it)",
			ErrMalformed, err)
	}
	if k.Transform > TransformSHA512 {
		return Key{}, fmt.Errorf("%w DH-HMAC-CHAP secret: hash identifier %02d: want 00 (none), 01 (SHA-256), "+
			"02 (SHA-384) or 03 (SHA-512)", ErrMalformed, k.Transform)
	}
	return k, nil
}

// ParseTLSPSK parses a TLS PSK in the interchange format
// ("NVMeTLSkey-1:01:...:").
func ParseTLSPSK(s string, opts ...Option) (Key, error) {
	r := newRules(opts)
	k, err := parse(s, TLSPSKPrefix, r)
	if err != nil {
		return k, fmt.Errorf("%w TLS PSK: %w (want NVMeTLSkey-1:hh:base64: as nvme gen-tls-key prints it)",
			ErrMalformed, err)
	}
	n := len(k.Secret)
	switch {
	case k.Transform == TransformSHA256 && n == 32, k.Transform == TransformSHA384 && n == 48,
		r.tlsHashNone && k.Transform == TransformNone && (n == 32 || n == 48):
		return k, nil
	case r.tlsHashNone && k.Transform == TransformNone:
		return Key{}, fmt.Errorf("%w TLS PSK: a %d-byte key with hash identifier 00: want 32 or 48 bytes",
			ErrMalformed, n)
	case k.Transform != TransformSHA256 && k.Transform != TransformSHA384:
		want := "01 (SHA-256) or 02 (SHA-384)"
		if r.tlsHashNone {
			want = "00 (none), " + want
		}
		return Key{}, fmt.Errorf("%w TLS PSK: hash identifier %02d: want %s", ErrMalformed, k.Transform, want)
	}
	return Key{}, fmt.Errorf("%w TLS PSK: a %d-byte key with hash identifier %02d: want 32 bytes with 01, 48 with 02",
		ErrMalformed, n, k.Transform)
}

// parse checks the common shape; its errors name what is wrong, never
// what the text holds.
func parse(s, prefix string, r rules) (Key, error) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return Key{}, fmt.Errorf("it does not start with %q", prefix)
	}
	if len(rest) < 3 || rest[2] != ':' || !isDigit(rest[0]) || !isDigit(rest[1]) {
		return Key{}, errors.New("no two-digit hash identifier after the prefix")
	}
	hh := (rest[0]-'0')*10 + rest[1] - '0'
	b64, ok := strings.CutSuffix(rest[3:], ":")
	if !ok && !r.finalColonOptional {
		return Key{}, errors.New("it does not end with ':'")
	}
	raw, err := decodeBase64(b64, r)
	if err != nil {
		return Key{}, err
	}
	n := len(raw) - crc32.Size
	switch n {
	case 32, 48, 64:
	default:
		return Key{}, fmt.Errorf("a %d-byte key: want 32, 48 or 64 bytes", max(0, n))
	}
	key, crc := raw[:n:n], raw[n:]
	if binary.LittleEndian.Uint32(crc) != crc32.ChecksumIEEE(key) {
		return Key{}, errors.New("its CRC-32 does not match the key (a typo, or a truncated copy)")
	}
	return Key{Transform: hh, Secret: key}, nil
}

// decodeBase64 decodes padded standard base64, strictly unless r says
// otherwise.
func decodeBase64(b64 string, r rules) ([]byte, error) {
	enc := base64.StdEncoding.Strict()
	if r.nonzeroPadBits {
		enc = base64.StdEncoding
	}
	// The decoder skips newlines, even when strict.
	raw, err := enc.DecodeString(b64)
	if err != nil || (!r.newlines && strings.ContainsAny(b64, "\r\n")) {
		return nil, errors.New("the key is not valid padded base64")
	}
	return raw, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// Encode returns the representation of key under prefix with hash
// identifier hh.
func Encode(prefix string, hh byte, key []byte) string {
	raw := binary.LittleEndian.AppendUint32(append([]byte(nil), key...), crc32.ChecksumIEEE(key))
	return fmt.Sprintf("%s%02d:%s:", prefix, hh, base64.StdEncoding.EncodeToString(raw))
}

// GenerateDHCHAP returns a fresh DH-HMAC-CHAP secret: 32 random bytes with
// the SHA-256 transform (hh 01), what `nvme gen-dhchap-key --hmac=1`
// prints.
func GenerateDHCHAP() (string, error) { return generate(DHCHAPPrefix, TransformSHA256, 32) }

// GenerateTLSPSK returns a fresh configured TLS PSK: 32 random bytes for
// HMAC SHA-256 (hh 01), what `nvme gen-tls-key --hmac=1` prints.
func GenerateTLSPSK() (string, error) { return generate(TLSPSKPrefix, TransformSHA256, 32) }

func generate(prefix string, hh byte, n int) (string, error) {
	key := make([]byte, n)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("nvmekey: no randomness: %w", err)
	}
	return Encode(prefix, hh, key), nil
}
