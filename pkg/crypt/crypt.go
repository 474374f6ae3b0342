// Package crypt holds a cluster's key-encryption keys (KEKs) and wraps and
// unwraps the volumes' data keys with them. A volume's data key (random,
// 64 bytes: aes-xts-256, two AES-256 keys) is stored in the replicated
// volume metadata only wrapped: sealed with AES-256-GCM under a KEK, with
// the KEK's ID beside it. Rotating the KEK re-wraps every data key under
// the newest KEK; no data is rewritten.
//
// # Keyring file
//
// The node config's security.kek_file names a text file, readable by its
// owner only (mode 0600 or stricter), one KEK per line:
//
//	# comments and blank lines are ignored
//	<id> <64 hex digits: the 32-byte AES-256 key>
//
// IDs are 1..32 letters, digits, '-' or '_', each once. The last line is
// the newest KEK, used for wrapping; the others only unwrap, so that a key
// can be retired (removed) once a rotation re-wrapped everything under a
// newer one.
//
// # Wrapped data key (version 1)
//
//	offset  size  field
//	     0     1  version = 1
//	     1    12  GCM nonce (random)
//	    13    80  AES-256-GCM of the 64-byte data key (64) and its tag (16)
//
// The GCM additional data is "basalt data key v1", a zero byte, the KEK's
// ID, a zero byte and the volume's 16-byte UUID: a wrapped key opens only
// for its volume and under the KEK its ID names.
package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// DataKeySize is the length of a volume's data key (aes-xts-256).
const DataKeySize = 64

// WrappedSize is the length of a wrapped data key (version 1).
const WrappedSize = 1 + nonceSize + DataKeySize + tagSize

const (
	version   = 1
	nonceSize = 12
	tagSize   = 16
	kekSize   = 32
)

var (
	// ErrNoKEK: no keyring is configured, or it lacks the KEK a data key
	// is wrapped under.
	ErrNoKEK = errors.New("crypt: key-encryption key not available")
	// ErrUnwrap: a wrapped data key does not open under its KEK (a wrong
	// key of that ID, or a damaged or swapped wrapping).
	ErrUnwrap = errors.New("crypt: the data key does not unwrap under its key-encryption key")
	// ErrKeyring: the keyring file is malformed or too widely readable.
	ErrKeyring = errors.New("crypt: bad keyring file")
)

// KEK is one key-encryption key.
type KEK struct {
	ID  string
	key []byte
}

// Keyring is a set of KEKs, the newest last. The zero Keyring has none.
type Keyring struct{ keks []KEK }

// Load reads a keyring file (package doc, "Keyring file").
func Load(path string) (*Keyring, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyring, err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by others (mode %v): chmod 600 it", ErrKeyring, path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyring, err)
	}
	k, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// Parse reads a keyring file's text. Error messages never quote key bytes.
func Parse(text string) (*Keyring, error) {
	k := &Keyring{}
	seen := map[string]bool{}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || !validID(fields[0]) {
			return nil, fmt.Errorf("%w: line %d: want <id> <64 hex digits>", ErrKeyring, n+1)
		}
		key, err := hex.DecodeString(fields[1])
		if err != nil || len(key) != kekSize {
			return nil, fmt.Errorf("%w: line %d: key %q is not 64 hex digits", ErrKeyring, n+1, fields[0])
		}
		if seen[fields[0]] {
			return nil, fmt.Errorf("%w: line %d: key %q listed twice", ErrKeyring, n+1, fields[0])
		}
		seen[fields[0]] = true
		k.keks = append(k.keks, KEK{ID: fields[0], key: key})
	}
	if len(k.keks) == 0 {
		return nil, fmt.Errorf("%w: no key", ErrKeyring)
	}
	return k, nil
}

func validID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Newest returns the ID of the KEK that Wrap uses ("" for a nil or empty
// keyring).
func (k *Keyring) Newest() string {
	if k == nil || len(k.keks) == 0 {
		return ""
	}
	return k.keks[len(k.keks)-1].ID
}

func (k *Keyring) find(id string) (KEK, bool) {
	if k != nil {
		for _, kek := range k.keks {
			if kek.ID == id {
				return kek, true
			}
		}
	}
	return KEK{}, false
}

// NewKEKLine returns a keyring file line for a new KEK of the given ID
// with a fresh random key (package doc, "Keyring file"), without the
// newline.
func NewKEKLine(id string) (string, error) {
	if !validID(id) {
		return "", fmt.Errorf("%w: key ID %q: want 1..32 letters, digits, '-' or '_'", ErrKeyring, id)
	}
	key := make([]byte, kekSize)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("crypt: while drawing a key-encryption key: %w", err)
	}
	return id + " " + hex.EncodeToString(key), nil
}

// NewKeyringText returns the text of a keyring file with a new KEK for
// each ID, in order (the last the newest).
func NewKeyringText(ids ...string) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		line, err := NewKEKLine(id)
		if err != nil {
			return "", err
		}
		b.WriteString(line + "\n")
	}
	return b.String(), nil
}

// NewDataKey returns a fresh random data key.
func NewDataKey() ([]byte, error) {
	key := make([]byte, DataKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("crypt: while drawing a data key: %w", err)
	}
	return key, nil
}

// Wrap seals the data key of the volume with UUID volume under the newest
// KEK and returns the wrapping and that KEK's ID.
func (k *Keyring) Wrap(dataKey []byte, volume [16]byte) (wrapped []byte, kekID string, err error) {
	kek, ok := k.find(k.Newest())
	if !ok {
		return nil, "", fmt.Errorf("%w: no keyring configured (security.kek_file)", ErrNoKEK)
	}
	if len(dataKey) != DataKeySize {
		return nil, "", fmt.Errorf("crypt: data key of %d bytes, want %d", len(dataKey), DataKeySize)
	}
	aead, err := gcm(kek.key)
	if err != nil {
		return nil, "", err
	}
	out := make([]byte, 1+nonceSize, WrappedSize)
	out[0] = version
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, "", fmt.Errorf("crypt: while drawing a nonce: %w", err)
	}
	out = aead.Seal(out, out[1:1+nonceSize], dataKey, additional(kek.ID, volume))
	return out, kek.ID, nil
}

// Unwrap opens a data key wrapped under KEK kekID for the volume with UUID
// volume. A KEK the keyring lacks is ErrNoKEK; a wrapping that does not
// open, ErrUnwrap.
func (k *Keyring) Unwrap(wrapped []byte, kekID string, volume [16]byte) ([]byte, error) {
	kek, ok := k.find(kekID)
	if !ok {
		return nil, fmt.Errorf("%w: the data key is wrapped under %q, which the keyring (security.kek_file) lacks",
			ErrNoKEK, kekID)
	}
	if len(wrapped) != WrappedSize || wrapped[0] != version {
		return nil, fmt.Errorf("%w: a wrapping of %d bytes, version %d", ErrUnwrap, len(wrapped), firstByte(wrapped))
	}
	aead, err := gcm(kek.key)
	if err != nil {
		return nil, err
	}
	key, err := aead.Open(nil, wrapped[1:1+nonceSize], wrapped[1+nonceSize:], additional(kekID, volume))
	if err != nil {
		return nil, fmt.Errorf("%w %q", ErrUnwrap, kekID)
	}
	return key, nil
}

// Rewrap unwraps a data key and wraps it again under the newest KEK.
func (k *Keyring) Rewrap(wrapped []byte, kekID string, volume [16]byte) ([]byte, string, error) {
	key, err := k.Unwrap(wrapped, kekID, volume)
	if err != nil {
		return nil, "", err
	}
	defer clear(key)
	return k.Wrap(key, volume)
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

func gcm(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("crypt: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("crypt: %w", err)
	}
	return aead, nil
}

// additional returns the GCM additional data (package doc).
func additional(kekID string, volume [16]byte) []byte {
	ad := append([]byte("basalt data key v1\x00"), kekID...)
	ad = append(ad, 0)
	return append(ad, volume[:]...)
}
