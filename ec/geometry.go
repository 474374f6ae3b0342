package ec

import (
	"errors"
	"fmt"
)

// Limits on a Geometry.
const (
	// ChunkAlignment is the unit of ChunkSize: the drive block size, so a
	// chunk is written to a drive with O_DIRECT as it is.
	ChunkAlignment = 4096
	// MaxChunkSize bounds the memory of one stripe.
	MaxChunkSize = 16 << 20
	// MaxWidth bounds Data+Parity: a node does not have more drives than this,
	// and reconstruction cost grows with the width.
	MaxWidth = 64
)

// Geometry is the shape of a stripe: Data chunks of user data and Parity
// chunks computed from them, ChunkSize bytes each, every chunk on its own
// drive. A stripe survives the loss of any Parity of its chunks.
type Geometry struct {
	// Data is the number of data chunks, at least 1.
	Data int
	// Parity is the number of parity chunks, at least 0. 0 means no
	// protection (a single-drive development node).
	Parity int
	// ChunkSize is the size of each chunk in bytes: a positive multiple of
	// ChunkAlignment, at most MaxChunkSize.
	ChunkSize int
}

// Validate reports every problem with g at once, wrapping ErrInvalidGeometry.
func (g Geometry) Validate() error {
	var problems []error
	if g.Data < 1 {
		problems = append(problems, fmt.Errorf("data chunks %d < 1", g.Data))
	}
	if g.Parity < 0 {
		problems = append(problems, fmt.Errorf("parity chunks %d < 0", g.Parity))
	}
	if g.Data > MaxWidth || g.Parity > MaxWidth || g.Data+g.Parity > MaxWidth {
		problems = append(problems, fmt.Errorf("width %d+%d > %d", g.Data, g.Parity, MaxWidth))
	}
	if g.ChunkSize <= 0 || g.ChunkSize%ChunkAlignment != 0 || g.ChunkSize > MaxChunkSize {
		problems = append(problems, fmt.Errorf("chunk size %d is not a positive multiple of %d up to %d",
			g.ChunkSize, ChunkAlignment, MaxChunkSize))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w %v: %w", ErrInvalidGeometry, g, errors.Join(problems...))
}

// Width returns Data+Parity, the number of chunks and drives in a stripe.
func (g Geometry) Width() int { return g.Data + g.Parity }

// DataSize returns the user data a stripe holds, Data*ChunkSize bytes.
func (g Geometry) DataSize() int { return g.Data * g.ChunkSize }

// String returns the geometry as "4+2x64KiB" (or bytes when ChunkSize is not
// a whole number of KiB).
func (g Geometry) String() string {
	if g.ChunkSize > 0 && g.ChunkSize%1024 == 0 {
		return fmt.Sprintf("%d+%dx%dKiB", g.Data, g.Parity, g.ChunkSize/1024)
	}
	return fmt.Sprintf("%d+%dx%dB", g.Data, g.Parity, g.ChunkSize)
}

// Narrower returns the geometry for new stripes on a node that has survivors
// working drives, given its configured geometry g. This is "elastic" width:
//
//   - With at least g.Width() survivors nothing changes: g is returned.
//   - Otherwise new stripes keep g.Parity and g.ChunkSize and shrink Data to
//     survivors-Parity. The protection of new data (how many more drive
//     losses it survives) stays the same; only the share of capacity spent on
//     parity grows. The node keeps writing full stripes, without
//     read-modify-write, while the lost drive is replaced and rebuilt.
//   - With fewer than Parity+1 survivors no stripe can keep the configured
//     protection, and Narrower fails with ErrTooFewDrives: the node must stop
//     accepting writes rather than silently write less-protected data.
//
// Stripes already written keep the geometry they were written with; reading
// them reconstructs the lost chunks.
func Narrower(g Geometry, survivors int) (Geometry, error) {
	if err := g.Validate(); err != nil {
		return Geometry{}, err
	}
	if survivors >= g.Width() {
		return g, nil
	}
	if survivors < g.Parity+1 {
		return Geometry{}, fmt.Errorf("%w: %d drives left, geometry %v needs at least %d",
			ErrTooFewDrives, survivors, g, g.Parity+1)
	}
	return Geometry{Data: survivors - g.Parity, Parity: g.Parity, ChunkSize: g.ChunkSize}, nil
}
