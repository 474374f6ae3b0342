package dhchap

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"

	"basalt/pkg/nvme"
)

// ErrInvalidSecret is wrapped by every error ParseSecret returns. The
// errors never contain the secret.
var ErrInvalidSecret = errors.New("dhchap: invalid secret")

// secretPrefix starts every representation; the version is 1.
const secretPrefix = "DHHC-1:"

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

// ParseSecret parses the representation above. The trailing ':' is
// optional, as in Linux.
func ParseSecret(s string) (Secret, error) {
	rest, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("%w: it does not start with %q", ErrInvalidSecret, secretPrefix)
	}
	if len(rest) < 3 || rest[2] != ':' || rest[0] != '0' || rest[1] < '0' || rest[1] > '3' {
		return Secret{}, fmt.Errorf("%w: the transformation must be 00, 01, 02 or 03", ErrInvalidSecret)
	}
	transform := nvme.AuthHashID(rest[1] - '0')
	enc := strings.TrimSuffix(rest[3:], ":")
	raw, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return Secret{}, fmt.Errorf("%w: the key is not base64", ErrInvalidSecret)
	}
	switch len(raw) {
	case 32 + 4, 48 + 4, 64 + 4:
	default:
		return Secret{}, fmt.Errorf("%w: a key of %d bytes (32, 48 or 64 and a CRC)", ErrInvalidSecret, len(raw))
	}
	key, crc := raw[:len(raw)-4], binary.LittleEndian.Uint32(raw[len(raw)-4:])
	if crc32.ChecksumIEEE(key) != crc {
		return Secret{}, fmt.Errorf("%w: CRC mismatch", ErrInvalidSecret)
	}
	return Secret{Transform: transform, Key: key}, nil
}

// Encode returns the representation ParseSecret reads.
func (s Secret) Encode() string {
	raw := binary.LittleEndian.AppendUint32(append([]byte(nil), s.Key...), crc32.ChecksumIEEE(s.Key))
	return fmt.Sprintf("%s%02d:%s:", secretPrefix, s.Transform, base64.StdEncoding.EncodeToString(raw))
}

// String is redacted: secrets do not reach logs.
func (s Secret) String() string {
	return fmt.Sprintf("%s%02d:<redacted %d-byte key>:", secretPrefix, s.Transform, len(s.Key))
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
