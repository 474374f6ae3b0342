package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
)

// Superblock layout constants; the byte diagram is in doc.go.
const (
	// FormatVersion is the superblock format this code writes and reads.
	FormatVersion = 1
	// SuperblockSize is the size of one superblock copy.
	SuperblockSize = BlockSize
	// ReservedSize is the region at the start of every drive that belongs to
	// this package (the two superblock copies and room to grow). Data
	// starts at ReservedSize.
	ReservedSize = 1 << 20

	superblockMagic    = "BASALTSB"
	superblockCopies   = 2
	superblockCRCStart = SuperblockSize - 4
)

// Superblock errors.
var (
	// ErrNoSuperblock means neither copy carries the magic: the drive has not
	// been formatted (or was wiped).
	ErrNoSuperblock = errors.New("disk: no superblock")
	// ErrCorruptSuperblock means a superblock was found but no copy passes
	// its checksum and field checks.
	ErrCorruptSuperblock = errors.New("disk: corrupt superblock")
	// ErrUnsupportedVersion means the newest valid copy has a format version
	// this code does not know.
	ErrUnsupportedVersion = errors.New("disk: unsupported superblock version")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Superblock identifies a drive. It is written at format time, in two copies
// at offsets 0 and SuperblockSize, and checked at every mount so that a drive
// moved to another slot, another node, or replaced, is recognised.
type Superblock struct {
	// Version is the format version; 0 in WriteSuperblock means FormatVersion.
	Version uint32
	// BlockSize is the drive's I/O unit in bytes; 0 in WriteSuperblock means
	// the drive's BlockSize().
	BlockSize uint32
	// DriveUUID names this drive for all time; it must not be zero.
	DriveUUID UUID
	// NodeUUID names the node the drive belongs to.
	NodeUUID UUID
	// DriveIndex is the drive's position among its node's drives.
	DriveIndex DriveIndex
	// DriveSize is the capacity in bytes at format time; 0 in WriteSuperblock
	// means the drive's Size(). A drive found smaller than this at mount is
	// refused.
	DriveSize int64
	// Generation orders rewrites: a rewrite must use a higher generation,
	// and ReadSuperblock returns the valid copy with the highest one.
	Generation uint64
}

// WriteSuperblock writes sb to both copies of d's superblock, syncing after
// each copy, so that a crash at any moment leaves at least one valid copy,
// old or new. Zero Version, BlockSize and DriveSize are filled in from the
// drive.
func WriteSuperblock(d Drive, sb Superblock) error {
	if sb.Version == 0 {
		sb.Version = FormatVersion
	}
	if sb.BlockSize == 0 {
		sb.BlockSize = uint32(d.BlockSize())
	}
	if sb.DriveSize == 0 {
		sb.DriveSize = d.Size()
	}
	if err := checkSuperblockFor(d, sb); err != nil {
		return err
	}
	block := AlignedBuffer(SuperblockSize)
	encodeSuperblock(block, sb)
	for copyIndex := range superblockCopies {
		offset := int64(copyIndex * SuperblockSize)
		if _, err := d.WriteAt(block, offset); err != nil {
			return fmt.Errorf("disk: while writing superblock copy %d: %w", copyIndex, err)
		}
		if err := d.Sync(); err != nil {
			return fmt.Errorf("disk: while syncing superblock copy %d: %w", copyIndex, err)
		}
	}
	return nil
}

// ReadSuperblock reads both copies of d's superblock and returns the valid one
// with the highest Generation (copy 0 on a tie: it is written first). Errors
// wrap ErrNoSuperblock, ErrCorruptSuperblock, ErrUnsupportedVersion,
// ErrOutOfRange (the drive is smaller than its superblock says) or the drive's
// read error.
func ReadSuperblock(d Drive) (Superblock, error) {
	if d.Size() < ReservedSize {
		return Superblock{}, fmt.Errorf("%w: drive of %d bytes is smaller than the %d reserved",
			ErrOutOfRange, d.Size(), ReservedSize)
	}
	buffer := AlignedBuffer(superblockCopies * SuperblockSize)
	if _, err := d.ReadAt(buffer, 0); err != nil {
		return Superblock{}, fmt.Errorf("disk: while reading superblock: %w", err)
	}
	var best Superblock
	var errs []error
	found := false
	for copyIndex := range superblockCopies {
		sb, err := decodeSuperblock(buffer[copyIndex*SuperblockSize : (copyIndex+1)*SuperblockSize])
		if err != nil {
			errs = append(errs, fmt.Errorf("copy %d: %w", copyIndex, err))
			continue
		}
		if !found || sb.Generation > best.Generation {
			best, found = sb, true
		}
	}
	if !found {
		return Superblock{}, superblockReadError(errs)
	}
	if err := checkSuperblockFor(d, best); err != nil {
		return Superblock{}, err
	}
	return best, nil
}

// superblockReadError reports why no copy was usable, preferring the most
// specific class: a version problem over corruption over absence.
func superblockReadError(errs []error) error {
	joined := errors.Join(errs...)
	for _, class := range []error{ErrUnsupportedVersion, ErrCorruptSuperblock} {
		if errors.Is(joined, class) {
			return fmt.Errorf("%w: %w", class, joined)
		}
	}
	return fmt.Errorf("%w: %w", ErrNoSuperblock, joined)
}

// checkSuperblockFor checks that sb describes d.
func checkSuperblockFor(d Drive, sb Superblock) error {
	if err := sb.validate(); err != nil {
		return err
	}
	if int(sb.BlockSize) != d.BlockSize() {
		return fmt.Errorf("%w: superblock block size %d, drive block size %d",
			ErrCorruptSuperblock, sb.BlockSize, d.BlockSize())
	}
	if sb.DriveSize > d.Size() || d.Size() < ReservedSize {
		return fmt.Errorf("%w: superblock says %d bytes, drive holds %d (at least %d needed)",
			ErrOutOfRange, sb.DriveSize, d.Size(), ReservedSize)
	}
	return nil
}

// validate checks the fields that do not depend on a drive.
func (sb *Superblock) validate() error {
	switch {
	case sb.Version != FormatVersion:
		return fmt.Errorf("%w: version %d (this code knows %d)", ErrUnsupportedVersion,
			sb.Version, FormatVersion)
	case sb.BlockSize < SectorSize || sb.BlockSize > 1<<20 || bits.OnesCount32(sb.BlockSize) != 1:
		return fmt.Errorf("%w: block size %d", ErrCorruptSuperblock, sb.BlockSize)
	case sb.DriveUUID.IsZero():
		return fmt.Errorf("%w: zero drive UUID", ErrCorruptSuperblock)
	case sb.DriveSize <= 0 || sb.DriveSize%int64(sb.BlockSize) != 0:
		return fmt.Errorf("%w: drive size %d", ErrCorruptSuperblock, sb.DriveSize)
	}
	return nil
}

// encodeSuperblock writes sb into b (SuperblockSize bytes) with its checksum.
func encodeSuperblock(b []byte, sb Superblock) {
	clear(b[:SuperblockSize])
	copy(b[0:8], superblockMagic)
	binary.LittleEndian.PutUint32(b[8:12], sb.Version)
	binary.LittleEndian.PutUint32(b[12:16], sb.BlockSize)
	copy(b[16:32], sb.DriveUUID[:])
	copy(b[32:48], sb.NodeUUID[:])
	binary.LittleEndian.PutUint32(b[48:52], uint32(sb.DriveIndex))
	binary.LittleEndian.PutUint64(b[56:64], uint64(sb.DriveSize))
	binary.LittleEndian.PutUint64(b[64:72], sb.Generation)
	sum := crc32.Checksum(b[:superblockCRCStart], castagnoli)
	binary.LittleEndian.PutUint32(b[superblockCRCStart:SuperblockSize], sum)
}

// decodeSuperblock parses one superblock copy. It checks, in order: length,
// magic (ErrNoSuperblock), checksum (ErrCorruptSuperblock), version
// (ErrUnsupportedVersion), reserved bytes (ErrCorruptSuperblock), then the
// fields (see Superblock.validate).
func decodeSuperblock(b []byte) (Superblock, error) {
	if len(b) != SuperblockSize {
		return Superblock{}, fmt.Errorf("%w: %d bytes, want %d", ErrCorruptSuperblock,
			len(b), SuperblockSize)
	}
	if string(b[0:8]) != superblockMagic {
		return Superblock{}, fmt.Errorf("%w: magic %q", ErrNoSuperblock, b[0:8])
	}
	stored := binary.LittleEndian.Uint32(b[superblockCRCStart:SuperblockSize])
	if sum := crc32.Checksum(b[:superblockCRCStart], castagnoli); sum != stored {
		return Superblock{}, fmt.Errorf("%w: checksum %#08x, computed %#08x",
			ErrCorruptSuperblock, stored, sum)
	}
	var sb Superblock
	sb.Version = binary.LittleEndian.Uint32(b[8:12])
	if sb.Version != FormatVersion {
		// Checked before the reserved bytes, which a later version may use.
		return Superblock{}, fmt.Errorf("%w: version %d (this code knows %d)",
			ErrUnsupportedVersion, sb.Version, FormatVersion)
	}
	if !allZero(b[52:56]) || !allZero(b[72:superblockCRCStart]) {
		return Superblock{}, fmt.Errorf("%w: reserved bytes are not zero", ErrCorruptSuperblock)
	}
	sb.BlockSize = binary.LittleEndian.Uint32(b[12:16])
	copy(sb.DriveUUID[:], b[16:32])
	copy(sb.NodeUUID[:], b[32:48])
	sb.DriveIndex = DriveIndex(binary.LittleEndian.Uint32(b[48:52]))
	sb.DriveSize = int64(binary.LittleEndian.Uint64(b[56:64]))
	sb.Generation = binary.LittleEndian.Uint64(b[64:72])
	if err := sb.validate(); err != nil {
		return Superblock{}, err
	}
	return sb, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
