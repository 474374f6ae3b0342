package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// errDriveUnavailable is returned for I/O to a drive that has failed or is
// being rebuilt; callers fall back to parity.
var errDriveUnavailable = errors.New("store: drive unavailable")

// driveRef boxes a Drive so it can be swapped atomically on replacement.
type driveRef struct{ disk.Drive }

// driveSlot is one of the node's drive positions.
type driveSlot struct {
	index int
	ref   atomic.Pointer[driveRef]
	state atomic.Uint32 // meta.DriveState
	mu    struct {
		sync.Mutex
		info meta.DriveInfo // as last persisted
	}
	reads, writes, errors atomic.Uint64
}

func (d *driveSlot) drive() disk.Drive         { return d.ref.Load().Drive }
func (d *driveSlot) getState() meta.DriveState { return meta.DriveState(d.state.Load()) }
func (d *driveSlot) healthy() bool             { return d.getState() == meta.DriveHealthy }

// mountDrives matches every drive with its slot's record. A drive whose
// superblock is missing, unreadable or another drive's is marked failed: the
// store opens degraded, and the slot can be given a replacement. It refuses
// (ErrTooManyLost) when more drives are lost than the parity covers.
func (s *Store) mountDrives() error {
	infos, err := s.meta.Drives()
	if err != nil {
		return err
	}
	if len(infos) != s.node.Drives {
		return fmt.Errorf("%w: %d drive records for %d drives", ErrCorrupt, len(infos), s.node.Drives)
	}
	s.drives = make([]*driveSlot, len(infos))
	for i, info := range infos {
		if int(info.Index) != i {
			return fmt.Errorf("%w: drive record %d has index %d", ErrCorrupt, i, info.Index)
		}
		slot := &driveSlot{index: i}
		slot.ref.Store(&driveRef{s.opts.Drives[i]})
		slot.state.Store(uint32(info.State))
		slot.mu.info = info
		s.drives[i] = slot
	}
	// Every slot exists before the first failure is recorded:
	// setDriveState counts them all.
	var lost []string
	bad := map[int]error{}
	for i, slot := range s.drives {
		info := slot.mu.info
		switch {
		case info.State == meta.DriveFailed && info.Evacuated:
		case info.State == meta.DriveFailed:
			lost = append(lost, fmt.Sprintf("drive %d: failed before", i))
		default:
			// A replacement being rebuilt is not counted: what it holds
			// already serves once it is rebuilt, and what it lacks reads
			// as a media error, never as wrong data.
			if err := s.checkSuperblock(slot, info); err != nil {
				bad[i] = err
				lost = append(lost, fmt.Sprintf("drive %d: %v", i, err))
			}
		}
	}
	if len(lost) > s.node.Parity {
		return fmt.Errorf("%w: %d drives are lost and the stripes have %d parity chunks, so data would be missing: %s",
			ErrTooManyLost, len(lost), s.node.Parity, strings.Join(lost, "; "))
	}
	for i, slot := range s.drives {
		err, ok := bad[i]
		if !ok {
			continue
		}
		s.log.Error("drive missing or not this slot's: the store opens degraded, serving its data from parity "+
			"until a rebuild re-protects it", "drive", i, "uuid", disk.UUID(slot.mu.info.UUID), "reason", err)
		if err := s.setDriveState(slot, meta.DriveFailed); err != nil {
			return err
		}
	}
	s.refreshCapacity()
	return nil
}

// ErrTooManyLost: Open found more drives missing or failed (and not
// evacuated) than the stripes' parity covers.
var ErrTooManyLost = errors.New("store: more drives lost than parity covers")

func (s *Store) checkSuperblock(slot *driveSlot, info meta.DriveInfo) error {
	sb, err := disk.ReadSuperblock(slot.drive())
	switch {
	case err != nil:
		return err
	case sb.DriveUUID != disk.UUID(info.UUID):
		return fmt.Errorf("%w: drive UUID %v, slot expects %v", ErrForeignDrive, sb.DriveUUID,
			disk.UUID(info.UUID))
	case sb.NodeUUID != disk.UUID(s.node.NodeUUID) || int(sb.DriveIndex) != slot.index:
		return fmt.Errorf("%w: superblock of node %v slot %d", ErrForeignDrive, sb.NodeUUID, sb.DriveIndex)
	}
	return nil
}

// setDriveState persists and sets a slot's state.
func (s *Store) setDriveState(slot *driveSlot, state meta.DriveState) error {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	info := slot.mu.info
	if state != info.State {
		info.RebuiltSegments = 0
	}
	info.State = state
	if state != meta.DriveFailed {
		info.Evacuated = false
	}
	err := s.meta.Update(func(tx *meta.Tx) error { return tx.PutDrive(info) })
	if err != nil {
		return fmt.Errorf("store: while recording drive %d as %v: %w", slot.index, state, err)
	}
	slot.mu.info = info
	slot.state.Store(uint32(state))
	s.refreshCapacity()
	return nil
}

// failDrive marks a drive failed after an error that shows it lost. Only
// the first call for a drive does anything.
func (s *Store) failDrive(index int, cause error) {
	slot := s.drives[index]
	old := slot.state.Load()
	if old == uint32(meta.DriveFailed) || !slot.state.CompareAndSwap(old, uint32(meta.DriveFailed)) {
		return
	}
	s.log.Error("drive failed", "drive", index, "err", cause)
	s.refreshCapacity()
	s.driveEpoch.Add(1)
	if err := s.setDriveState(slot, meta.DriveFailed); err != nil {
		s.log.Error("could not record the drive failure", "drive", index, "err", err)
	}
	s.wake()
	s.kickRebuild()
}

// readDrive reads p at off from drive index, which must be healthy.
func (s *Store) readDrive(index int, p []byte, off int64) error {
	slot := s.drives[index]
	if !slot.healthy() {
		return errDriveUnavailable
	}
	slot.reads.Add(1)
	if _, err := slot.drive().ReadAt(p, off); err != nil {
		slot.errors.Add(1)
		if errors.Is(err, disk.ErrDriveFailed) {
			s.failDrive(index, err)
		}
		return err
	}
	return nil
}

// writeDrive writes p at off to drive index. A failed write marks the drive
// failed: a drive that loses writes is not trusted with more. rebuilding
// allows writes to a drive being rebuilt.
func (s *Store) writeDrive(index int, p []byte, off int64, rebuilding bool) error {
	slot := s.drives[index]
	st := slot.getState()
	if st != meta.DriveHealthy && !(rebuilding && st == meta.DriveRebuilding) {
		return errDriveUnavailable
	}
	slot.writes.Add(1)
	if _, err := slot.drive().WriteAt(p, off); err != nil {
		slot.errors.Add(1)
		s.failDrive(index, err)
		return err
	}
	return nil
}

// syncDrive syncs drive index; a failure marks it failed.
func (s *Store) syncDrive(index int, rebuilding bool) error {
	slot := s.drives[index]
	st := slot.getState()
	if st != meta.DriveHealthy && !(rebuilding && st == meta.DriveRebuilding) {
		return errDriveUnavailable
	}
	if err := slot.drive().Sync(); err != nil {
		slot.errors.Add(1)
		s.failDrive(index, err)
		return err
	}
	return nil
}

// healthyDrives returns the indexes of the healthy drives.
func (s *Store) healthyDrives() []int {
	var out []int
	for i, d := range s.drives {
		if d.healthy() {
			out = append(out, i)
		}
	}
	return out
}

// chunkBuffer returns a pooled, aligned buffer of one chunk.
func (s *Store) chunkBuffer() *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	b := disk.AlignedBuffer(s.lay.chunkSize)
	return &b
}

func (s *Store) putChunkBuffer(b *[]byte) { s.bufs.Put(b) }
