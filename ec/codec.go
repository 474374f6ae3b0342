package ec

import (
	"errors"
	"fmt"
	"hash/crc32"
	"unsafe"

	"github.com/klauspost/reedsolomon"
)

// Errors returned by this package wrap one of these.
var (
	// ErrInvalidGeometry is a Geometry that fails Validate.
	ErrInvalidGeometry = errors.New("ec: invalid geometry")
	// ErrInvalidStripe is a stripe or checksum slice of the wrong shape:
	// the wrong number of chunks, or a chunk of the wrong size. It is a
	// caller's bug, not a property of the data.
	ErrInvalidStripe = errors.New("ec: invalid stripe")
	// ErrTooManyMissing means more chunks are missing or fail their
	// checksum than the stripe has parity; the data cannot be rebuilt.
	ErrTooManyMissing = errors.New("ec: too many chunks missing")
	// ErrCorruption means chunks that pass their checksums are inconsistent
	// with each other (parity does not match the data, or a rebuilt chunk
	// fails its checksum): a checksum itself is wrong, or the codec is.
	ErrCorruption = errors.New("ec: corruption")
	// ErrTooFewDrives means too few drives remain for any stripe with the
	// configured parity.
	ErrTooFewDrives = errors.New("ec: too few drives")
	// ErrSelfTest means the known-answer self-test failed: this build, CPU
	// or option set computes wrong parity and must not serve data.
	ErrSelfTest = errors.New("ec: self-test failed")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C (Castagnoli) of chunk. Every chunk of a stripe
// is checksummed when written, and the sums are kept in the metadata that
// points at the stripe, not only next to the chunk, so that a misdirected or
// lost write is detected too.
func Checksum(chunk []byte) uint32 { return crc32.Checksum(chunk, castagnoli) }

// Codec encodes and reconstructs stripes of one Geometry. Create it once per
// geometry and reuse it; it is safe for concurrent use, but a given stripe
// must not be used by two calls at once.
//
// A stripe is a [][]byte of Width() chunks: Data data chunks, then Parity
// parity chunks, each ChunkSize bytes. A chunk of length 0 is missing; its
// capacity, if at least ChunkSize, is reused when it is rebuilt.
type Codec struct {
	geometry Geometry
	encoder  reedsolomon.Encoder
	options  options
}

// New returns a Codec for g.
func New(g Geometry, opts ...Option) (*Codec, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	encoder, err := reedsolomon.New(g.Data, g.Parity, o.reedsolomonOptions()...)
	if err != nil {
		return nil, fmt.Errorf("ec: while creating the %v encoder: %w", g, err)
	}
	return &Codec{geometry: g, encoder: encoder, options: o}, nil
}

// Geometry returns the codec's geometry.
func (c *Codec) Geometry() Geometry { return c.geometry }

// AllocStripe returns a zeroed stripe of Width() chunks in one allocation.
// Each chunk starts on a 4096-byte boundary, as O_DIRECT requires, and has
// capacity ChunkSize, so appending to one chunk cannot spill into the next.
func (c *Codec) AllocStripe() [][]byte {
	return alignedChunks(c.geometry.Width(), c.geometry.ChunkSize)
}

// alignedChunks returns n slices of size bytes, each ChunkAlignment-aligned,
// backed by one allocation. size is a multiple of ChunkAlignment.
func alignedChunks(n, size int) [][]byte {
	raw := make([]byte, n*size+ChunkAlignment-1)
	skip := 0
	if rest := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & (ChunkAlignment - 1)); rest != 0 {
		skip = ChunkAlignment - rest
	}
	chunks := make([][]byte, n)
	for i := range chunks {
		start := skip + i*size
		chunks[i] = raw[start : start+size : start+size]
	}
	return chunks
}

// Encode computes the parity chunks of stripe in place from its data chunks.
// Every chunk, parity included, must be ChunkSize bytes; the parity chunks'
// previous content is overwritten.
//
// Encode itself allocates nothing. reedsolomon's generated vector kernels
// allocate one small buffer per call (896 bytes on the GFNI path, 24 on the
// AVX2 path; nothing at SIMDSSSE3 or SIMDNone); its allocation-free
// alternative, EncodeIdx, was measured three to four times slower, which
// costs far more than one small allocation per stripe.
func (c *Codec) Encode(stripe [][]byte) error {
	if err := c.checkShape(stripe, nil, false /* allowMissing */); err != nil {
		return err
	}
	if err := c.encoder.Encode(stripe); err != nil {
		return fmt.Errorf("ec: while encoding a %v stripe: %w", c.geometry, err)
	}
	return nil
}

// ChecksumStripe stores Checksum(stripe[i]) in sums[i] for every chunk.
// sums must have Width() entries; a missing chunk is an error.
func (c *Codec) ChecksumStripe(stripe [][]byte, sums []uint32) error {
	if err := c.checkShape(stripe, sums, false /* allowMissing */); err != nil {
		return err
	}
	for i, chunk := range stripe {
		sums[i] = Checksum(chunk)
	}
	return nil
}

// Verify checks every chunk against its checksum and returns, in increasing
// order, the indexes of the chunks that are missing or fail it (nil if none).
// When none does and the stripe has parity, it also checks that the parity
// matches the data, and returns an error wrapping ErrCorruption if not. The
// stripe is not modified.
func (c *Codec) Verify(stripe [][]byte, sums []uint32) (bad []int, err error) {
	if err := c.checkShape(stripe, sums, true /* allowMissing */); err != nil {
		return nil, err
	}
	for i, chunk := range stripe {
		if len(chunk) == 0 || Checksum(chunk) != sums[i] {
			bad = append(bad, i)
		}
	}
	if len(bad) > 0 || c.geometry.Parity == 0 {
		return bad, nil
	}
	ok, err := c.encoder.Verify(stripe)
	if err != nil {
		return nil, fmt.Errorf("ec: while verifying a %v stripe: %w", c.geometry, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: every chunk of a %v stripe passes its checksum but the parity does not match the data",
			ErrCorruption, c.geometry)
	}
	return nil, nil
}

// checkShape checks that stripe has Width() chunks of ChunkSize bytes (or 0
// bytes, when allowMissing), that the data chunks are present when it is
// false, and that sums, if not nil, has Width() entries.
func (c *Codec) checkShape(stripe [][]byte, sums []uint32, allowMissing bool) error {
	width := c.geometry.Width()
	if len(stripe) != width {
		return fmt.Errorf("%w: %d chunks for geometry %v", ErrInvalidStripe, len(stripe), c.geometry)
	}
	if sums != nil && len(sums) != width {
		return fmt.Errorf("%w: %d checksums for geometry %v", ErrInvalidStripe, len(sums), c.geometry)
	}
	for i, chunk := range stripe {
		if len(chunk) == c.geometry.ChunkSize || (allowMissing && len(chunk) == 0) {
			continue
		}
		return fmt.Errorf("%w: chunk %d has %d bytes, geometry %v", ErrInvalidStripe, i, len(chunk), c.geometry)
	}
	return nil
}
