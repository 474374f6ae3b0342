package ec

import (
	"fmt"
	"slices"
)

// Reconstruct rebuilds every chunk of stripe, data and parity, that is
// missing (length 0) or fails its checksum in sums, from the chunks that
// pass. It is the repair path: afterwards the whole stripe is valid.
//
// sums must hold the checksum of every chunk, missing ones included: the
// rebuilt chunks are checked against them before Reconstruct returns. A
// rebuilt chunk is written into the capacity of the slice it replaces when
// that holds ChunkSize bytes (so a bad chunk is repaired in place), otherwise
// into a new 4096-aligned buffer.
//
// When more than Parity chunks are missing or bad, Reconstruct returns an
// error wrapping ErrTooManyMissing and leaves stripe unchanged. It never
// returns wrong data: if a rebuilt chunk fails its checksum, it is left
// missing (length 0) and the error wraps ErrCorruption.
func (c *Codec) Reconstruct(stripe [][]byte, sums []uint32) error {
	return c.reconstruct(stripe, sums, false /* dataOnly */)
}

// ReconstructData is Reconstruct for reads: it rebuilds only the data
// chunks. Parity chunks that are missing stay missing, and parity chunks that
// fail their checksum are marked missing (set to length 0), so that after a
// nil return every data chunk is valid and every non-empty parity chunk is
// too. Errors are as for Reconstruct.
func (c *Codec) ReconstructData(stripe [][]byte, sums []uint32) error {
	return c.reconstruct(stripe, sums, true /* dataOnly */)
}

func (c *Codec) reconstruct(stripe [][]byte, sums []uint32, dataOnly bool) error {
	if err := c.checkShape(stripe, sums, true /* allowMissing */); err != nil {
		return err
	}
	if sums == nil {
		return fmt.Errorf("%w: no checksums", ErrInvalidStripe)
	}
	var badBuffer [MaxWidth]int // on the stack: errors below format a clone
	bad := badBuffer[:0]
	for i, chunk := range stripe {
		if len(chunk) == 0 || Checksum(chunk) != sums[i] {
			bad = append(bad, i)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if len(bad) > c.geometry.Parity {
		return fmt.Errorf("%w: chunks %v of a %v stripe are missing or fail their checksum",
			ErrTooManyMissing, slices.Clone(bad), c.geometry)
	}
	c.markMissing(stripe, bad)
	var err error
	if dataOnly {
		err = c.encoder.ReconstructData(stripe)
	} else {
		err = c.encoder.Reconstruct(stripe)
	}
	if err != nil {
		for _, i := range bad {
			stripe[i] = stripe[i][:0]
		}
		return fmt.Errorf("ec: while reconstructing chunks %v of a %v stripe: %w", slices.Clone(bad), c.geometry, err)
	}
	return c.checkRebuilt(stripe, sums, bad)
}

// markMissing truncates the bad chunks to length 0, giving each one capacity
// for ChunkSize bytes so that the rebuilt chunk is aligned and in place.
func (c *Codec) markMissing(stripe [][]byte, bad []int) {
	size := c.geometry.ChunkSize
	fresh := 0
	for _, i := range bad {
		if cap(stripe[i]) < size {
			fresh++
		}
	}
	var buffers [][]byte
	if fresh > 0 {
		buffers = alignedChunks(fresh, size)
	}
	for _, i := range bad {
		if cap(stripe[i]) < size {
			stripe[i], buffers = buffers[0], buffers[1:]
		}
		stripe[i] = stripe[i][:0]
	}
}

// checkRebuilt verifies each rebuilt chunk against its checksum (a paired
// assertion: the chunks were checked before they were used, and the result is
// checked after). A parity chunk that ReconstructData left missing is skipped.
func (c *Codec) checkRebuilt(stripe [][]byte, sums []uint32, bad []int) error {
	var failed []int
	for _, i := range bad {
		if len(stripe[i]) == 0 {
			continue
		}
		if Checksum(stripe[i]) != sums[i] {
			stripe[i] = stripe[i][:0]
			failed = append(failed, i)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: rebuilt chunks %v of a %v stripe fail their checksums",
			ErrCorruption, failed, c.geometry)
	}
	return nil
}
