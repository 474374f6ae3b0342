package store

import (
	"errors"

	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// discardSegments tells every healthy drive that the ranges of the freed
// segments ids hold nothing: segment g's range [chunkOffset(g, 0),
// +columnBytes) on each drive (the whole range, whichever columns its last
// life used). It runs on the writer goroutine after the segments' free
// state is durable and before any of them is reopened, so nothing reads
// or writes the ranges meanwhile.
//
// Discard is best effort: an error is logged and counted, never returned
// (a drive that reports itself lost is marked failed, as on a read). The
// store does not depend on what a discarded range reads back as: a
// reopened segment is written stripe by stripe, and recovery takes a
// segment's stripes only while their summaries are intact and of the
// segment's current life, so a zero summary (summary.go, errNoSummary) or
// a stale one ends the scan.
func (s *Store) discardSegments(ids []meta.SegmentID) {
	n := s.lay.columnBytes
	for _, id := range ids {
		off := s.lay.chunkOffset(id, 0)
		for _, slot := range s.drives {
			if !slot.healthy() {
				continue
			}
			if err := slot.drive().Discard(off, n); err != nil {
				s.counters.discardErrors.Add(1)
				slot.errors.Add(1)
				s.log.Warn("discard of a freed segment failed; the space stays allocated on the drive",
					"drive", slot.index, "segment", id, "err", err)
				if errors.Is(err, disk.ErrDriveFailed) {
					s.failDrive(slot.index, err)
				}
				continue
			}
			s.counters.discardedBytes.Add(uint64(n))
		}
	}
}
