// Package compress is the one home of Basalt's block compression libraries
// (github.com/pierrec/lz4/v4 and github.com/klauspost/compress/zstd): it
// compresses and decompresses single blocks with no allocation on the hot
// path. Encoders, decoders and scratch buffers are reused; a block is
// decompressed straight into the caller's buffer.
package compress

import (
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Algorithm names a compression algorithm. Its value is what on-disk
// formats record (pkg/store doc.go, "Packed slot"): never renumber.
type Algorithm uint8

const (
	// None stores blocks as they are.
	None Algorithm = 0
	// LZ4 is the LZ4 block format: fast, a moderate ratio.
	LZ4 Algorithm = 1
	// Zstd is a single Zstandard frame at the fastest level: a better
	// ratio for more CPU.
	Zstd Algorithm = 2
)

// ErrUnknown: an algorithm name or number this build does not know.
var ErrUnknown = errors.New("compress: unknown algorithm")

// ErrCorrupt wraps every reason compressed bytes do not decompress to
// exactly the expected length.
var ErrCorrupt = errors.New("compress: corrupt data")

// String returns the algorithm's name as ParseAlgorithm takes it.
func (a Algorithm) String() string {
	switch a {
	case None:
		return "none"
	case LZ4:
		return "lz4"
	case Zstd:
		return "zstd"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a is an algorithm this build knows.
func (a Algorithm) Valid() bool { return a <= Zstd }

// ParseAlgorithm parses "none" (or ""), "lz4" or "zstd".
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "", "none":
		return None, nil
	case "lz4":
		return LZ4, nil
	case "zstd":
		return Zstd, nil
	}
	return None, fmt.Errorf("%w %q (lz4, zstd or none)", ErrUnknown, s)
}

// maxInput bounds the blocks this package compresses; scratch buffers are
// sized for it.
const maxInput = 64 << 10

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
	zstdErr  error
)

// zstdCodecs returns the process's zstd encoder and decoder: both are safe
// for concurrent EncodeAll/DecodeAll and keep their state between calls.
func zstdCodecs() (*zstd.Encoder, *zstd.Decoder, error) {
	zstdOnce.Do(func() {
		zstdEnc, zstdErr = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderCRC(false), zstd.WithSingleSegment(true), zstd.WithLowerEncoderMem(true),
			zstd.WithEncoderConcurrency(4))
		if zstdErr != nil {
			return
		}
		zstdDec, zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(maxInput))
	})
	return zstdEnc, zstdDec, zstdErr
}

// Compressor compresses blocks. It is not safe for concurrent use: each
// goroutine that compresses owns one.
type Compressor struct {
	lz4     lz4.Compressor
	scratch []byte
}

// NewCompressor returns a Compressor with its scratch buffer.
func NewCompressor() *Compressor {
	return &Compressor{scratch: make([]byte, 0, lz4.CompressBlockBound(maxInput)+64)}
}

// Compress compresses src (at most 64 KiB) with a into dst and returns the
// length written, or ok false when the result would not fit in len(dst)
// (the block does not compress well enough; dst is then undefined). None
// never compresses.
func (c *Compressor) Compress(a Algorithm, dst, src []byte) (n int, ok bool, err error) {
	if len(src) > maxInput {
		return 0, false, fmt.Errorf("compress: %d-byte input exceeds %d", len(src), maxInput)
	}
	switch a {
	case None:
		return 0, false, nil
	case LZ4:
		n, err := c.lz4.CompressBlock(src, c.scratch[:cap(c.scratch)])
		if err != nil {
			return 0, false, fmt.Errorf("compress: lz4: %w", err)
		}
		if n == 0 || n > len(dst) { // 0: incompressible
			return 0, false, nil
		}
		return copy(dst, c.scratch[:n]), true, nil
	case Zstd:
		enc, _, err := zstdCodecs()
		if err != nil {
			return 0, false, fmt.Errorf("compress: zstd: %w", err)
		}
		out := enc.EncodeAll(src, c.scratch[:0])
		if len(out) > len(dst) {
			return 0, false, nil
		}
		return copy(dst, out), true, nil
	}
	return 0, false, fmt.Errorf("%w %d", ErrUnknown, a)
}

// Decompress decompresses src, compressed with a, into dst, which it must
// fill exactly: any other outcome, malformed input included, is an error
// wrapping ErrCorrupt. It is safe for concurrent use and allocates nothing
// once warm.
func Decompress(a Algorithm, dst, src []byte) error {
	switch a {
	case LZ4:
		n, err := lz4.UncompressBlock(src, dst)
		if err != nil {
			return fmt.Errorf("%w: lz4: %w", ErrCorrupt, err)
		}
		if n != len(dst) {
			return fmt.Errorf("%w: lz4: %d bytes, want %d", ErrCorrupt, n, len(dst))
		}
		return nil
	case Zstd:
		_, dec, err := zstdCodecs()
		if err != nil {
			return fmt.Errorf("compress: zstd: %w", err)
		}
		out, err := dec.DecodeAll(src, dst[:0])
		if err != nil {
			return fmt.Errorf("%w: zstd: %w", ErrCorrupt, err)
		}
		if len(out) != len(dst) || (len(dst) > 0 && &out[0] != &dst[0]) {
			return fmt.Errorf("%w: zstd: %d bytes, want %d", ErrCorrupt, len(out), len(dst))
		}
		return nil
	}
	return fmt.Errorf("%w %d", ErrUnknown, a)
}
