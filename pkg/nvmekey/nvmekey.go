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

// ParseDHCHAP parses a DH-HMAC-CHAP secret ("DHHC-1:01:...:").
func ParseDHCHAP(s string) (Key, error) {
	k, err := parse(s, DHCHAPPrefix)
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
func ParseTLSPSK(s string) (Key, error) {
	k, err := parse(s, TLSPSKPrefix)
	if err != nil {
		return k, fmt.Errorf("%w TLS PSK: %w (want NVMeTLSkey-1:hh:base64: as nvme gen-tls-key prints it)",
			ErrMalformed, err)
	}
	switch {
	case k.Transform == TransformSHA256 && len(k.Secret) == 32, k.Transform == TransformSHA384 && len(k.Secret) == 48:
		return k, nil
	case k.Transform != TransformSHA256 && k.Transform != TransformSHA384:
		return Key{}, fmt.Errorf("%w TLS PSK: hash identifier %02d: want 01 (SHA-256) or 02 (SHA-384)",
			ErrMalformed, k.Transform)
	}
	return Key{}, fmt.Errorf("%w TLS PSK: a %d-byte key with hash identifier %02d: want 32 bytes with 01, 48 with 02",
		ErrMalformed, len(k.Secret), k.Transform)
}

// parse checks the common shape; its errors name what is wrong, never
// what the text holds.
func parse(s, prefix string) (Key, error) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return Key{}, fmt.Errorf("it does not start with %q", prefix)
	}
	if len(rest) < 3 || rest[2] != ':' || !isDigit(rest[0]) || !isDigit(rest[1]) {
		return Key{}, errors.New("no two-digit hash identifier after the prefix")
	}
	hh := (rest[0]-'0')*10 + rest[1] - '0'
	b64, ok := strings.CutSuffix(rest[3:], ":")
	if !ok {
		return Key{}, errors.New("it does not end with ':'")
	}
	// The decoder skips newlines; a secret has none.
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || strings.ContainsAny(b64, "\r\n") {
		return Key{}, errors.New("the key is not valid padded base64")
	}
	switch len(raw) - crc32.Size {
	case 32, 48, 64:
	default:
		return Key{}, fmt.Errorf("a %d-byte key: want 32, 48 or 64 bytes", max(0, len(raw)-crc32.Size))
	}
	key, crc := raw[:len(raw)-crc32.Size], raw[len(raw)-crc32.Size:]
	if binary.LittleEndian.Uint32(crc) != crc32.ChecksumIEEE(key) {
		return Key{}, errors.New("its CRC-32 does not match the key (a typo, or a truncated copy)")
	}
	return Key{Transform: hh, Secret: key}, nil
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
