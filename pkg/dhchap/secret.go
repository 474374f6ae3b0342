package dhchap

import (
	"errors"
	"fmt"
	"io"

	"basalt/pkg/nvme"
	"basalt/pkg/nvmekey"
)

// ErrInvalidSecret is wrapped by every error ParseSecret returns. The
// errors never contain the secret.
var ErrInvalidSecret = errors.New("dhchap: invalid secret")

// Secret is a DH-HMAC-CHAP secret: the key and the hash function that
// transforms it before use (0: none).
//
// Its representation, as `nvme gen-dhchap-key` prints it and Linux parses
// it (nvme_auth_extract_key):
//
//	DHHC-1:hh:<base64(key ‖ CRC-32(key) as LE32)>:
//
//	hh     00 no transformation, 01 SHA-256, 02 SHA-384, 03 SHA-512
//	key    32, 48 or 64 bytes (any hh)
//	CRC-32 the IEEE polynomial (Linux: ~crc32(~0, key)), little-endian
//
// A Secret formats as a redacted string under %v and %s; Encode returns
// the representation.
type Secret struct {
	// Transform is the hash of the key transformation, or 0.
	Transform nvme.AuthHashID
	// Key is the secret key itself.
	Key []byte
}

// ParseSecret parses the representation above (with nvmekey, the one
// parser of it). The trailing ':' is optional, as in Linux, and CR and LF
// inside the base64 are skipped.
func ParseSecret(s string) (Secret, error) {
	k, err := nvmekey.ParseDHCHAP(s, nvmekey.FinalColonOptional(), nvmekey.SkipNewlines())
	if err != nil {
		return Secret{}, fmt.Errorf("%w: %w", ErrInvalidSecret, err)
	}
	return Secret{Transform: nvme.AuthHashID(k.Transform), Key: k.Secret}, nil
}

// Encode returns the representation ParseSecret reads.
func (s Secret) Encode() string {
	return nvmekey.Encode(nvmekey.DHCHAPPrefix, byte(s.Transform), s.Key)
}

// String is redacted: secrets do not reach logs.
func (s Secret) String() string {
	return fmt.Sprintf("%s%02d:<redacted %d-byte key>:", nvmekey.DHCHAPPrefix, s.Transform, len(s.Key))
}

// GoString is redacted too (%#v).
func (s Secret) GoString() string { return s.String() }

// GenerateSecret makes a random secret of keyLen bytes (32, 48 or 64)
// with the given transformation, as `nvme gen-dhchap-key` does.
func GenerateSecret(rand io.Reader, transform nvme.AuthHashID, keyLen int) (Secret, error) {
	if keyLen != 32 && keyLen != 48 && keyLen != 64 {
		return Secret{}, fmt.Errorf("%w: key length %d (32, 48 or 64)", ErrInvalidSecret, keyLen)
	}
	if transform != 0 && HashSize(transform) == 0 {
		return Secret{}, fmt.Errorf("%w: transformation %d", ErrInvalidSecret, transform)
	}
	key := make([]byte, keyLen)
	if _, err := io.ReadFull(rand, key); err != nil {
		return Secret{}, fmt.Errorf("dhchap: generating a key: %w", err)
	}
	return Secret{Transform: transform, Key: key}, nil
}

// TransformedKey returns the key the responses are keyed with (Linux
// nvme_auth_transform_key): the key itself without a transformation, else
// HMAC-hh(key, nqn ‖ "NVMe-over-Fabrics"), where nqn is the NQN of the side
// the secret belongs to (the host's for the host secret, the subsystem's
// for the controller secret).
func (s Secret) TransformedKey(nqn string) []byte {
	if s.Transform == 0 {
		return append([]byte(nil), s.Key...)
	}
	m := newHMAC(s.Transform, s.Key)
	m.Write([]byte(nqn))
	m.Write([]byte("NVMe-over-Fabrics"))
	return m.Sum(nil)
}
