package store

import (
	"context"
	"errors"
	"fmt"

	"basalt/pkg/backend"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// FailDrive marks drive index failed, as an I/O error showing it lost would:
// an operator takes a drive out (it reports errors, it is to be replaced).
// Its data is reconstructed from parity from then on.
func (s *Store) FailDrive(index int) error {
	if err := s.usable(); err != nil {
		return err
	}
	if index < 0 || index >= len(s.drives) {
		return fmt.Errorf("%w: no drive slot %d", ErrDriveState, index)
	}
	s.failDrive(index, errors.New("taken out by the operator"))
	return nil
}

// ReplaceDrive puts d into slot index, whose drive has failed: it writes a
// new superblock (a new drive UUID, this node, this slot) and marks the slot
// rebuilding. The old drive is closed. Until Rebuild completes, the slot
// serves no reads and new stripes avoid it. The Store owns d from now on.
func (s *Store) ReplaceDrive(index int, d disk.Drive) error {
	if err := s.usable(); err != nil {
		return err
	}
	if index < 0 || index >= len(s.drives) {
		return fmt.Errorf("%w: no drive slot %d", ErrDriveState, index)
	}
	slot := s.drives[index]
	if slot.getState() != meta.DriveFailed {
		return fmt.Errorf("%w: drive %d is %v, not failed", ErrDriveState, index, slot.getState())
	}
	slot.mu.Lock()
	need := slot.mu.info.Size
	slot.mu.Unlock()
	if d.Size() < need {
		return fmt.Errorf("%w: replacement of %d bytes for a drive of %d", ErrDriveState, d.Size(), need)
	}
	sb := disk.Superblock{DriveUUID: disk.NewUUID(), NodeUUID: disk.UUID(s.node.NodeUUID),
		DriveIndex: disk.DriveIndex(index)}
	if err := disk.WriteSuperblock(d, sb); err != nil {
		return fmt.Errorf("store: while formatting the replacement for drive %d: %w", index, err)
	}
	slot.mu.Lock()
	slot.mu.info.UUID, slot.mu.info.Size = sb.DriveUUID, d.Size()
	slot.mu.Unlock()
	old := slot.ref.Swap(&driveRef{d})
	_ = old.Close()
	if err := s.setDriveState(slot, meta.DriveRebuilding); err != nil {
		return err
	}
	s.log.Info("drive replaced; rebuild pending", "drive", index, "uuid", sb.DriveUUID)
	s.kickRebuild()
	return nil
}

// Rebuild restores full protection after drive losses, and reports
// progress (segments done, segments to do) after each segment:
//
//   - onto each replacement drive (ReplaceDrive), the chunks it must hold of
//     every segment that uses its slot are reconstructed and written; the
//     drive then becomes healthy;
//   - for each failed slot without a replacement, every segment that uses
//     it is re-striped: its live blocks are relocated into new stripes on
//     the survivors (narrower, with full parity), and the slot is marked
//     evacuated.
//
// Writes go on meanwhile. What a pass finishes stays done: a later pass
// (after a restart too) skips the segments already rebuilt onto a
// replacement (meta.DriveInfo.RebuiltSegments) and those already emptied.
// It returns an error wrapping backend.ErrMedia if some data could not be
// reconstructed (more drives lost than parity); a replacement drive then
// stays rebuilding. Rebuild is not paced; the background rebuild
// (StartRebuilder) is. Passes run one at a time.
func (s *Store) Rebuild(ctx context.Context, progress func(done, total int)) error {
	return s.rebuild(ctx, nil, progress)
}

func usesAny(geom *segGeom, drives []int) bool {
	for _, d := range drives {
		if geom.hasDrive(d) {
			return true
		}
	}
	return false
}

// evacuateSegment re-stripes g, which uses a failed slot, onto the
// survivors after pacing the I/O it costs; it returns that cost.
func (s *Store) evacuateSegment(ctx context.Context, g *segment, geom *segGeom, pace pacerFunc) (int64, error) {
	n := s.evacuateBytes(g, geom)
	if err := pace(ctx, n); err != nil {
		return 0, err
	}
	if err := s.call(ctx, command{kind: cmdEvacuate, seg: g.id}); err != nil {
		return 0, err
	}
	s.reb.progress.add(n)
	return n, nil
}

// rebuildColumns rebuilds g's chunks onto the replacement drives targets,
// stripe by stripe (each paced), and syncs them.
func (s *Store) rebuildColumns(ctx context.Context, g *segment, geom *segGeom, targets []int, pace pacerFunc) error {
	if !s.pin(g.id, geom.gen) {
		return nil // freed meanwhile
	}
	defer s.unpin(g.id)
	per := int64(geom.shape.width()+len(targets)) * int64(s.lay.chunkSize)
	var sum summary
	for j := range int(g.written.Load()) {
		if err := pace(ctx, per); err != nil {
			return err
		}
		if err := s.readSummary(g.id, geom, j, &sum); err != nil {
			return err
		}
		if err := s.rebuildStripe(g.id, geom, j, &sum, targets); err != nil {
			return err
		}
		s.reb.progress.add(per)
	}
	for _, d := range targets {
		if err := s.syncDrive(d, true /* rebuilding */); err != nil {
			return fmt.Errorf("store: while syncing rebuilt drive %d: %w", d, err)
		}
	}
	return nil
}

// rebuildStripe reconstructs the chunks of stripe j that belong on drives
// being rebuilt, and writes them there.
func (s *Store) rebuildStripe(seg meta.SegmentID, geom *segGeom, j int, sum *summary, targets []int) error {
	sh := geom.shape
	width := sh.width()
	head := sh.summaryBlocks * BlockSize
	off := s.lay.chunkOffset(seg, j)
	chunks := make([][]byte, width)
	readable := make([]bool, width)
	for c := range width {
		bp := s.chunkBuffer()
		defer s.putChunkBuffer(bp)
		chunks[c] = *bp
		readable[c] = s.readDrive(geom.columns[sh.column(j, c)], chunks[c], off) == nil
	}
	slotSums := dataSums(sum)
	row := make([][]byte, width)
	sums := make([]uint32, width)
	for r := range sh.payload {
		start := head + r*BlockSize
		for c := range width {
			row[c] = chunks[c][start : start+BlockSize : start+BlockSize]
			if !readable[c] {
				row[c] = row[c][:0]
			}
			sums[c] = rowSum(sh, sum, slotSums, c, r)
		}
		if err := sh.row.Reconstruct(row, sums); err != nil {
			return fmt.Errorf("%w: %v stripe %d row %d: %w", backend.ErrMedia, seg, j, r, err)
		}
	}
	for c := range width {
		d := geom.columns[sh.column(j, c)]
		if !contains(targets, d) {
			continue
		}
		encodeSummary(chunks[c][:head], sum)
		if err := s.writeDrive(d, chunks[c], off, true /* rebuilding */); err != nil {
			return fmt.Errorf("store: while rebuilding drive %d: %w", d, err)
		}
	}
	return nil
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// finishRebuild syncs the rebuilt drives and marks them healthy, and marks
// the failed slots evacuated.
func (s *Store) finishRebuild(rebuilding, failed []int) error {
	for _, d := range rebuilding {
		if err := s.syncDrive(d, true /* rebuilding */); err != nil {
			return fmt.Errorf("store: while syncing rebuilt drive %d: %w", d, err)
		}
		if err := s.setDriveState(s.drives[d], meta.DriveHealthy); err != nil {
			return err
		}
		s.log.Info("drive rebuilt", "drive", d)
	}
	for _, d := range failed {
		slot := s.drives[d]
		slot.mu.Lock()
		info := slot.mu.info
		slot.mu.Unlock()
		if info.State != meta.DriveFailed || info.Evacuated {
			continue
		}
		info.Evacuated = true
		if err := s.meta.Update(func(tx *meta.Tx) error { return tx.PutDrive(info) }); err != nil {
			return err
		}
		slot.mu.Lock()
		slot.mu.info = info
		slot.mu.Unlock()
		s.log.Info("failed drive evacuated: its data is re-striped on the survivors", "drive", d)
	}
	s.driveEpoch.Add(1) // new stripes may be wide again
	s.wake()
	return nil
}
