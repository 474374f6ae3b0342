package store

import (
	"crypto/aes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"golang.org/x/crypto/xts"
)

// Encryption at rest. A volume created with VolumeOptions.Encryption =
// EncryptionAESXTS256 has its blocks encrypted with AES-256 in XTS mode
// (a 64-byte key: two AES-256 keys) when the writer packs them into a
// stripe, and decrypted when they are read back from a drive. The XTS
// sector number (the tweak) is the block's LBA, never its place on the
// drives: the cleaner, rebuild, scrub and reconstruction move and rebuild
// the ciphertext as it is, without the key. Every checksum on the drives
// (map entry, stripe summary, parity sums) is over the ciphertext, so they
// all work unchanged; a read verifies the ciphertext, then decrypts.
//
// What is not encrypted: the write buffer (records are in clear until
// destaged), and, on a cluster node, the Raft log that stages by
// reference. The store learns a key only through VolumeOptions.Key or
// Volume.SetKey and keeps it in memory only; it is never logged.
//
// This file is the only one that imports golang.org/x/crypto.

// Encryption names of a volume's encryption at rest (meta.VolumeInfo).
const (
	EncryptionNone      = ""
	EncryptionAESXTS256 = "aes-xts-256"
)

// XTSKeySize is the length of an aes-xts-256 data key: two AES-256 keys.
const XTSKeySize = 64

// ErrNoKey: the volume is encrypted and the store has not been given its
// key; its I/O is refused rather than read or written in clear.
var ErrNoKey = errors.New("store: the volume is encrypted and its data key is not set")

// ErrWrongKey: SetKey was given a key other than the volume's.
var ErrWrongKey = errors.New("store: a different data key is already set for the volume")

// slotCipher encrypts and decrypts 4096-byte slots with AES-XTS.
type slotCipher struct{ x *xts.Cipher }

func newSlotCipher(key []byte) (*slotCipher, error) {
	if len(key) != XTSKeySize {
		return nil, fmt.Errorf("%w: data key of %d bytes, want %d", ErrInvalidOptions, len(key), XTSKeySize)
	}
	x, err := xts.NewCipher(aes.NewCipher, key)
	if err != nil {
		return nil, fmt.Errorf("store: while setting up the data key: %w", err)
	}
	return &slotCipher{x: x}, nil
}

// seal encrypts the slot src into dst (the same length, a multiple of 16
// bytes) with sector as the XTS tweak, and returns the checksum of dst.
// Compression, where a volume has it, runs before: one packed slot of
// several compressed blocks is one sector, the packer giving its number.
func (c *slotCipher) seal(dst, src []byte, sector uint64) uint32 {
	c.x.Encrypt(dst, src, sector)
	return blockSum(dst)
}

// keyCheck returns the check value of a data key kept in meta.VolumeInfo:
// the first 16 bytes of SHA-256 over a fixed label and the key, in hex. It
// tells a wrong key from the right one and, the key being 64 random bytes,
// says nothing else about it.
func keyCheck(key []byte) string {
	h := sha256.New()
	h.Write([]byte("basalt volume data key check\x00"))
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// open decrypts the slot src into dst (which may be src itself).
func (c *slotCipher) open(dst, src []byte, sector uint64) { c.x.Decrypt(dst, src, sector) }

// SetKey gives the store the data key of an encrypted volume opened
// without it (after a restart: the store keeps no key on its drives or in
// its metadata). Setting the same key again is a no-op; a key other than
// the volume's (its check value differs) is ErrWrongKey, and a key for a
// volume without encryption ErrInvalidOptions. The members of its family
// under the same key (its snapshots and clones) get it too.
func (h *Volume) SetKey(key []byte) error {
	v := h.v
	if v.info.Encryption == EncryptionNone {
		return fmt.Errorf("%w: volume %q is not encrypted", ErrInvalidOptions, v.info.Name)
	}
	if len(key) != XTSKeySize || keyCheck(key) != v.info.KeyCheck {
		return fmt.Errorf("%w: volume %q", ErrWrongKey, v.info.Name)
	}
	c, err := newSlotCipher(key)
	if err != nil {
		return err
	}
	v.cipher.CompareAndSwap(nil, c) // the same key, if already set
	h.s.vols.Lock()
	defer h.s.vols.Unlock()
	for _, m := range v.fam.members { // its snapshots and clones share the key (snapshot.go)
		if m.info.KeyCheck == v.info.KeyCheck {
			m.cipher.CompareAndSwap(nil, c)
		}
	}
	return nil
}

// Encryption returns the volume's encryption (EncryptionNone or
// EncryptionAESXTS256).
func (h *Volume) Encryption() string { return h.v.info.Encryption }

// keyErr returns ErrNoKey for an encrypted volume whose key is not set.
func (v *volume) keyErr() error {
	if v.info.Encryption != EncryptionNone && v.cipher.Load() == nil {
		return fmt.Errorf("%w: volume %q", ErrNoKey, v.info.Name)
	}
	return nil
}

// applyKey sets up a new volume's cipher from its options.
func (v *volume) applyKey(o VolumeOptions) error {
	if o.Encryption == EncryptionNone {
		return nil
	}
	c, err := newSlotCipher(o.Key)
	if err != nil {
		return err
	}
	v.cipher.Store(c)
	return nil
}

// encrypt is the pack path's hook: for an encrypted volume it encrypts block
// (of lba, whose plaintext checksum is sum) into the writer's scratch slot
// and returns that with the ciphertext's checksum; otherwise block and sum
// unchanged. ok is false if the volume's key is not set: the block must
// wait. A block whose bytes no longer match sum (staged bytes the caller
// changed) gets a checksum that its ciphertext fails, so that it reads as
// a media error, as it would in clear.
func (w *writer) encrypt(v *volume, lba uint64, block []byte, sum uint32) ([]byte, uint32, bool) {
	if v.info.Encryption == EncryptionNone {
		return block, sum, true
	}
	c := v.cipher.Load()
	if c == nil {
		return nil, 0, false
	}
	if w.sealBuf == nil {
		w.sealBuf = make([]byte, BlockSize)
	}
	csum := c.seal(w.sealBuf, block, lba)
	if blockSum(block) != sum {
		csum = ^csum
	}
	return w.sealBuf, csum, true
}

// opened is the read path's hook: it puts the verified drive block src of
// lba into dst, decrypting it for an encrypted volume.
func (v *volume) opened(lba uint64, dst, src []byte) {
	if c := v.cipher.Load(); c != nil {
		c.open(dst[:BlockSize], src[:BlockSize], lba)
		return
	}
	copy(dst, src)
}
