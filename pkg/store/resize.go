package store

import (
	"context"
	"fmt"

	"basalt/pkg/meta"
)

// maxVolumeBlocks bounds a volume: fewer than 2^40 blocks (4 PiB).
const maxVolumeBlocks = 1 << 40

// ResizeVolume grows the named volume to size bytes in place, while I/O
// goes on: the blocks it adds read as zeros until written, and the data
// already there stays. A size equal to the current one is a no-op. A
// smaller size is an error wrapping ErrShrinkVolume, a size that is not a
// positive multiple of BlockSize or of 2^40 blocks or more one wrapping
// ErrVolumeSize, an unknown name one wrapping ErrNoVolume.
//
// The new size is in the metadata before ResizeVolume returns nil: it
// survives Close and crashes. Handles on the volume see it (Size, and the
// range checks of I/O) only once the map covers it. An error after the
// metadata write (the store failing meanwhile) may leave the volume grown
// at the next Open.
func (s *Store) ResizeVolume(name string, size int64) error {
	if err := s.usable(); err != nil {
		return err
	}
	s.vols.Lock()
	defer s.vols.Unlock()
	v, ok := s.vols.byName[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoVolume, name)
	}
	if v.info.SnapshotOf != 0 {
		return fmt.Errorf("%w: %q is a snapshot", ErrVolumeSize, name)
	}
	cur := v.size.Load()
	switch {
	case size <= 0 || size%BlockSize != 0 || size/BlockSize >= maxVolumeBlocks:
		return fmt.Errorf("%w: %d bytes for volume %q: want a multiple of %d below %d", ErrVolumeSize, size, name,
			BlockSize, int64(maxVolumeBlocks)*BlockSize)
	case size < cur:
		return fmt.Errorf("%w: volume %q has %d bytes, asked for %d", ErrShrinkVolume, name, cur, size)
	case size == cur:
		return nil
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("store: while growing volume %q: %w", name, err)
	}
	if err := s.growVolume(v, size); err != nil {
		return fmt.Errorf("store: while growing volume %q to %d bytes: %w", name, size, err)
	}
	s.log.Info("volume grown", "volume", name, "id", v.info.ID, "from", cur, "size", size)
	return nil
}

// growVolume records v's new size, grows its map and then publishes the
// size. s.vols held.
//
// The order matters: the metadata first, so that a checkpoint of the
// grown map (whose last chunk may be longer than the old size allows) is
// never read back against the old size; the size last, so that no I/O
// reaches an LBA the map does not cover.
func (s *Store) growVolume(v *volume, size int64) error {
	info := v.current()
	info.Size = size
	if err := s.meta.Update(func(tx *meta.Tx) error { return tx.PutVolume(info) }); err != nil {
		return err
	}
	err := s.call(context.Background(), command{kind: cmdGrowVolume, vol: v, blocks: uint64(size / BlockSize)})
	if err != nil {
		return err
	}
	v.size.Store(size)
	return nil
}
