package disk

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

// MemDrive is an in-memory Drive for tests that models what survives a power
// loss. It keeps two images: the current one, which reads and writes see, and
// the durable one as of the last Sync. Every write (and discard) since that
// Sync is also kept, block by block and in order, so that CrashClone can build
// a plausible post-crash image. The memory cost is the drive's size twice plus
// a copy of every block written since the last Sync.
//
// MemDrive enforces the full Drive contract, buffer alignment included, so a
// caller that works against it also works against a FileDrive with O_DIRECT.
type MemDrive struct {
	size int64
	mu   struct {
		sync.Mutex
		current []byte
		durable []byte
		// unsynced lists the block writes since the last Sync, oldest first.
		// Invariant: applying them all to durable yields current.
		unsynced []blockWrite
		closed   bool
	}
}

// blockWrite is one block-sized write; data nil means a block of zeros
// (a discard).
type blockWrite struct {
	block int64
	data  []byte
}

var _ Drive = (*MemDrive)(nil)

// NewMem returns a zeroed, fully synced MemDrive of size bytes. size must be
// a positive multiple of BlockSize; NewMem panics otherwise, since sizes of
// test drives are constants.
func NewMem(size int64) *MemDrive {
	if size <= 0 || size%BlockSize != 0 {
		panic(fmt.Sprintf("disk: NewMem(%d): size must be a positive multiple of %d", size, BlockSize))
	}
	d := &MemDrive{size: size}
	d.mu.current = make([]byte, size)
	d.mu.durable = make([]byte, size)
	return d
}

// Size returns the capacity in bytes.
func (d *MemDrive) Size() int64 { return d.size }

// BlockSize returns BlockSize.
func (d *MemDrive) BlockSize() int { return BlockSize }

// ReadAt copies the current image at off into p; see Drive.
func (d *MemDrive) ReadAt(p []byte, off int64) (int, error) {
	if err := checkBuffer("read", p, off, d.size); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return 0, ErrClosed
	}
	return copy(p, d.mu.current[off:]), nil
}

// WriteAt copies p into the current image at off; the write becomes durable
// at the next Sync. See Drive.
func (d *MemDrive) WriteAt(p []byte, off int64) (int, error) {
	if err := checkBuffer("write", p, off, d.size); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return 0, ErrClosed
	}
	copy(d.mu.current[off:], p)
	for i := 0; i < len(p); i += BlockSize {
		data := append([]byte(nil), p[i:i+BlockSize]...)
		d.mu.unsynced = append(d.mu.unsynced, blockWrite{block: (off + int64(i)) / BlockSize, data: data})
	}
	return len(p), nil
}

// Discard zeroes [off, off+n) in the current image; like a write, the zeros
// become durable at the next Sync.
func (d *MemDrive) Discard(off, n int64) error {
	if err := checkRange("discard", off, n, d.size); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return ErrClosed
	}
	clear(d.mu.current[off : off+n])
	for b := off / BlockSize; b < (off+n)/BlockSize; b++ {
		d.mu.unsynced = append(d.mu.unsynced, blockWrite{block: b})
	}
	return nil
}

// Sync makes the current image durable. It copies only the blocks written
// since the last Sync: elsewhere the two images agree (the invariant on
// unsynced).
func (d *MemDrive) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return ErrClosed
	}
	for _, w := range d.mu.unsynced {
		off := w.block * BlockSize
		copy(d.mu.durable[off:off+BlockSize], d.mu.current[off:off+BlockSize])
	}
	d.mu.unsynced = nil
	return nil
}

// Close releases nothing but makes later calls fail with ErrClosed. A closed
// MemDrive can still be crash-cloned.
func (d *MemDrive) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return ErrClosed
	}
	d.mu.closed = true
	return nil
}

// UnsyncedBlocks returns the number of block writes since the last Sync.
func (d *MemDrive) UnsyncedBlocks() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mu.unsynced)
}

// CrashClone returns a new, fully synced MemDrive holding what the drive
// might contain after a power loss now: the durable image, plus each block
// write since the last Sync, replayed in order, with probability
// keepUnsyncedPct percent. Of the replayed block writes, one in four is torn:
// each of its eight 512-byte sectors independently holds either the new data
// or what was there before. Everything else is lost. The result is a function
// of the drive's history and seed alone. d itself is unchanged.
//
// keepUnsyncedPct 0 yields exactly the durable image; 100 replays every write,
// some of them torn. Values outside [0, 100] act as the nearest bound.
func (d *MemDrive) CrashClone(seed int64, keepUnsyncedPct int) *MemDrive {
	d.mu.Lock()
	defer d.mu.Unlock()
	clone := NewMem(d.size)
	image := clone.mu.current
	copy(image, d.mu.durable)
	random := rand.New(rand.NewPCG(uint64(seed), 0x6261_7361_6c74)) // "basalt"
	for _, w := range d.mu.unsynced {
		if random.IntN(100) >= keepUnsyncedPct {
			continue
		}
		block := image[w.block*BlockSize : (w.block+1)*BlockSize]
		torn := random.IntN(4) == 0
		for s := 0; s < BlockSize; s += SectorSize {
			if torn && random.IntN(2) == 0 {
				continue
			}
			if w.data == nil {
				clear(block[s : s+SectorSize])
			} else {
				copy(block[s:s+SectorSize], w.data[s:s+SectorSize])
			}
		}
	}
	copy(clone.mu.durable, image)
	return clone
}
