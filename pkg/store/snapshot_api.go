package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"basalt/cache"
	"basalt/pkg/backend"
)

// SnapshotInfo describes a snapshot of a volume.
type SnapshotInfo struct {
	Name   string // the snapshot's own name (s1 of db@s1)
	Volume string // the volume it was taken of
	Size   int64  // the volume's size when it was taken, bytes
	// PinnedBytes is the space only this snapshot holds: what deleting it
	// would return (blocks the volume and the family's other members have
	// overwritten, trimmed or never had).
	PinnedBytes int64
	// Clones names the clones made from the snapshot.
	Clones []string
}

// CreateSnapshot takes a snapshot of the named volume: a read-only volume,
// opened as Volume(volume+SnapshotSep+name), that holds every write the
// volume completed before the call and none it started after. No data is
// copied. It is durable when CreateSnapshot returns; a crash before that
// leaves no snapshot.
func (s *Store) CreateSnapshot(ctx context.Context, volume, name string) (SnapshotInfo, error) {
	v, err := s.familySource(volume, name, false)
	if err != nil {
		return SnapshotInfo{}, err
	}
	fc := &familyCmd{name: volume + SnapshotSep + name, src: v}
	if fc.cut, err = s.awaitPublished(ctx); err != nil {
		return SnapshotInfo{}, err
	}
	if err := s.call(ctx, command{kind: cmdSnapshot, fam: fc}); err != nil {
		return SnapshotInfo{}, fmt.Errorf("store: while taking snapshot %q of %q: %w", name, volume, err)
	}
	s.log.Info("snapshot created", "volume", volume, "snapshot", name, "id", fc.info.ID)
	return SnapshotInfo{Name: name, Volume: volume, Size: fc.info.Size}, nil
}

// CloneVolume creates the writable volume name from the snapshot snap of
// volume: it reads as the snapshot did and shares the snapshot's blocks
// until they are overwritten. It is durable when CloneVolume returns.
func (s *Store) CloneVolume(ctx context.Context, volume, snap, name string) (*Volume, error) {
	if name == "" || strings.Contains(name, SnapshotSep) {
		return nil, fmt.Errorf("%w: volume name %q", ErrInvalidOptions, name)
	}
	sv, err := s.snapshot(volume, snap)
	if err != nil {
		return nil, err
	}
	fc := &familyCmd{name: name, src: sv}
	if err := s.call(ctx, command{kind: cmdClone, fam: fc}); err != nil {
		return nil, fmt.Errorf("store: while cloning %q from %s%s%s: %w", name, volume, SnapshotSep, snap, err)
	}
	s.log.Info("clone created", "volume", name, "origin", sv.info.Name, "id", fc.info.ID)
	return s.Volume(name)
}

// RollbackVolume makes the named volume read as its snapshot snap does:
// writes completed before the call are gone, writes started after it
// apply on top. The caller keeps hosts off the volume meanwhile.
func (s *Store) RollbackVolume(ctx context.Context, volume, snap string) error {
	v, err := s.familySource(volume, snap, true)
	if err != nil {
		return err
	}
	sv, err := s.snapshot(volume, snap)
	if err != nil {
		return err
	}
	cut, err := s.awaitPublished(ctx)
	if err != nil {
		return err
	}
	if err := s.call(ctx, command{kind: cmdRollback, vol: v, fam: &familyCmd{src: sv, cut: cut}}); err != nil {
		return fmt.Errorf("store: while rolling %q back to %q: %w", volume, snap, err)
	}
	s.log.Info("volume rolled back", "volume", volume, "snapshot", snap)
	return nil
}

// DeleteSnapshot deletes the snapshot name of volume; the blocks only it
// held are returned by the cleaner. It is refused, wrapping ErrInUse, while
// clones of it exist.
func (s *Store) DeleteSnapshot(volume, name string) error {
	if _, err := s.snapshot(volume, name); err != nil {
		return err
	}
	return s.DeleteVolume(volume + SnapshotSep + name)
}

// Snapshots describes the named volume's snapshots, in the order taken.
func (s *Store) Snapshots(volume string) ([]SnapshotInfo, error) {
	v, err := s.familySource(volume, "", true)
	if err != nil {
		return nil, err
	}
	s.vols.Lock()
	defer s.vols.Unlock()
	var out []SnapshotInfo
	for _, m := range v.fam.members {
		if m.info.SnapshotOf != v.info.ID || m.deleted.Load() {
			continue
		}
		si := SnapshotInfo{Name: strings.TrimPrefix(m.info.Name, volume+SnapshotSep), Volume: volume,
			Size: m.info.Size}
		m.lmap.forEach(func(lba uint64, e entry) {
			if !m.sharedAt(lba, e) {
				si.PinnedBytes += BlockSize
			}
		})
		for _, c := range m.fam.members {
			if c.info.Origin == m.info.ID && !c.deleted.Load() {
				si.Clones = append(si.Clones, c.info.Name)
			}
		}
		out = append(out, si)
	}
	return out, nil
}

// familySource returns the writable volume named volume, checking name as
// a snapshot name unless skipName.
func (s *Store) familySource(volume, name string, skipName bool) (*volume, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if !skipName && (name == "" || strings.Contains(name, SnapshotSep)) {
		return nil, fmt.Errorf("%w: snapshot name %q", ErrInvalidOptions, name)
	}
	s.vols.Lock()
	defer s.vols.Unlock()
	v, ok := s.vols.byName[volume]
	if !ok || v.info.SnapshotOf != 0 {
		return nil, fmt.Errorf("%w: %q", ErrNoVolume, volume)
	}
	return v, nil
}

// snapshot returns the snapshot snap of volume.
func (s *Store) snapshot(volume, snap string) (*volume, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	s.vols.Lock()
	defer s.vols.Unlock()
	v, ok := s.vols.byName[volume+SnapshotSep+snap]
	if !ok || v.info.SnapshotOf == 0 {
		return nil, fmt.Errorf("%w: snapshot %q of %q", ErrNoVolume, snap, volume)
	}
	return v, nil
}

// CreateSnapshot takes the snapshot name of the handle's volume; one that
// exists is left as it is (volume.Snapshotter: applying it again is
// harmless).
func (h *Volume) CreateSnapshot(ctx context.Context, name string) error {
	_, err := h.s.CreateSnapshot(ctx, h.v.info.Name, name)
	if errors.Is(err, ErrVolumeExists) {
		return nil
	}
	return err
}

// DeleteSnapshot deletes the snapshot name of the handle's volume; one that
// does not exist is no error.
func (h *Volume) DeleteSnapshot(name string) error {
	err := h.s.DeleteSnapshot(h.v.info.Name, name)
	if errors.Is(err, ErrNoVolume) {
		return nil
	}
	return err
}

// RollbackTo rolls the handle's volume back to its snapshot name.
func (h *Volume) RollbackTo(ctx context.Context, name string) error {
	return h.s.RollbackVolume(ctx, h.v.info.Name, name)
}

// SnapshotNames lists the handle's volume's snapshots, in the order taken.
func (h *Volume) SnapshotNames() []string {
	snaps, _ := h.s.Snapshots(h.v.info.Name)
	names := make([]string, len(snaps))
	for i, sn := range snaps {
		names[i] = sn.Name
	}
	return names
}

// publishWait bounds awaitPublished: records in flight are published within
// microseconds of their append; one that never is belongs to a failed
// write buffer.
const publishWait = 5 * time.Second

// awaitPublished waits until every record appended so far is published,
// and returns the last of them, the cut a snapshot or rollback drains to: a
// write acknowledged before the call then lies below the destager's
// watermark, so the drain of a snapshot or rollback command takes it. (The
// watermark moves only over contiguous records; a write still between its
// append and its publication holds it back, and the acknowledged writes
// after it would be left out of the cut.)
func (s *Store) awaitPublished(ctx context.Context) (cache.Seq, error) {
	last := s.stage.usage().last
	deadline := s.clock.Now().Add(publishWait)
	for s.pub.published() < last {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := s.Err(); err != nil {
			return 0, err
		}
		if s.clock.Now().After(deadline) {
			return 0, fmt.Errorf("%w: write-buffer records up to %v appended, only %v published after %v",
				backend.ErrWriteFault, last, s.pub.published(), publishWait)
		}
		runtime.Gosched()
	}
	return last, nil
}

// SnapshotPinnedBytes maps each of the handle's volume's snapshots to the
// space only it pins (SnapshotInfo.PinnedBytes); nil if none.
func (h *Volume) SnapshotPinnedBytes() map[string]int64 {
	snaps, _ := h.s.Snapshots(h.v.info.Name)
	if len(snaps) == 0 {
		return nil
	}
	out := make(map[string]int64, len(snaps))
	for _, sn := range snaps {
		out[sn.Name] = sn.PinnedBytes
	}
	return out
}
