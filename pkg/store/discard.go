package store

import (
	"errors"
	"fmt"

	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// DiscardMode says which drives the store discards freed segments on.
type DiscardMode uint8

const (
	// DiscardAuto discards on every drive except regular files whose
	// Discard punches holes (disk.FileDrive): a block device's discard
	// (TRIM) helps its flash translation layer, while a punched file range
	// must have its blocks allocated again when a reopened segment is
	// written there. On this project's ext4 test machine that cost a third
	// of the sustained overwrite rate at 70% fill (BenchmarkOverwriteAtFill,
	// 4 file drives: 57k-68k IOPS punching, 77k-93k not). The default.
	DiscardAuto DiscardMode = iota
	// DiscardAlways discards on every drive, files too (their space goes
	// back to the filesystem: thin drive files stay thin).
	DiscardAlways
	// DiscardNever discards nothing.
	DiscardNever
)

func (m DiscardMode) String() string {
	switch m {
	case DiscardAuto:
		return "auto"
	case DiscardAlways:
		return "on"
	case DiscardNever:
		return "off"
	}
	return fmt.Sprintf("DiscardMode(%d)", uint8(m))
}

// ParseDiscardMode parses "auto" (or ""), "on" or "off".
func ParseDiscardMode(s string) (DiscardMode, error) {
	switch s {
	case "auto", "":
		return DiscardAuto, nil
	case "on":
		return DiscardAlways, nil
	case "off":
		return DiscardNever, nil
	}
	return 0, fmt.Errorf("store: discard %q: want auto, on or off", s)
}

// discards reports whether freed ranges are discarded on d.
func (m DiscardMode) discards(d disk.Drive) bool {
	switch m {
	case DiscardAlways:
		return true
	case DiscardNever:
		return false
	}
	p, ok := d.(interface{ PunchesHoles() bool })
	return !ok || !p.PunchesHoles()
}

// discardSegments tells every healthy drive that the ranges of the freed
// segments ids hold nothing: segment g's range [chunkOffset(g, 0),
// +columnBytes) on each drive (the whole range, whichever columns its last
// life used). It runs after the segments' free state is durable and
// before any of them is reopened (freeing.go), so nothing reads or writes
// the ranges meanwhile: in the background, or on the writer goroutine in
// the synchronous test mode.
//
// Only the drives Options.Discard names are told. Discard is best effort:
// an error is logged and counted, never returned (a drive that reports
// itself lost is marked failed, as on a read). The
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
			if !slot.healthy() || !s.opts.Discard.discards(slot.drive()) {
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
