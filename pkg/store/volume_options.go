package store

import (
	"fmt"

	"basalt/pkg/compress"
)

// VolumeOptions are a volume's settings, fixed at creation.
type VolumeOptions struct {
	// Compression is how the writer packs the volume's blocks into
	// stripes (default none; compress.go).
	Compression compress.Algorithm
	// Encryption is EncryptionNone or EncryptionAESXTS256.
	Encryption string
	// Key is the data key of an encrypted volume (XTSKeySize bytes, random),
	// required with encryption. Its check value (keyCheck), not the key, is
	// kept in the store's metadata, so that SetKey tells a wrong key.
	Key []byte
}

// check validates the options. Compression and encryption together are
// refused: a packed slot holds several blocks, and the cipher's sector
// number is the one block's LBA (cipher.go), so the two do not compose yet.
func (o VolumeOptions) check() error {
	if o.Compression != compress.None && o.Encryption != EncryptionNone {
		return fmt.Errorf("%w: compression (%s) and encryption (%s) together are not supported",
			ErrInvalidOptions, o.Compression, o.Encryption)
	}
	switch o.Encryption {
	case EncryptionNone:
		if o.Key != nil {
			return fmt.Errorf("%w: a data key for a volume without encryption", ErrInvalidOptions)
		}
	case EncryptionAESXTS256:
		if len(o.Key) != XTSKeySize {
			return fmt.Errorf("%w: %s data key of %d bytes, want %d", ErrInvalidOptions,
				o.Encryption, len(o.Key), XTSKeySize)
		}
	default:
		return fmt.Errorf("%w: encryption %q (want %q or none)", ErrInvalidOptions, o.Encryption, EncryptionAESXTS256)
	}
	return nil
}
