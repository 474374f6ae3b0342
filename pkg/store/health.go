package store

import "basalt/pkg/backend"

// Health returns the state of the store's drives and data: the drive slots,
// those not healthy (failed, or rebuilding onto a replacement), the parity
// of the format, the capacity and what the volumes use of it, the reads
// that could not be recovered since the store opened, and whether the store
// has failed (Err). It takes no lock.
func (s *Store) Health() backend.Health {
	h := backend.Health{
		Drives: len(s.drives), Parity: s.node.Parity,
		CapacityBytes: s.capacityBlocks() * BlockSize, UsedBytes: s.counters.mappedBlocks.Load() * BlockSize,
		MediaErrors: s.counters.unrecoverable.Load(), Failed: s.Err() != nil,
	}
	for _, d := range s.drives {
		if !d.healthy() {
			h.FailedDrives++
		}
	}
	return h
}

// Health implements backend.HealthReporter: every volume reports the health
// of its store, whose drives they share.
func (h *Volume) Health() (backend.Health, bool) { return h.s.Health(), true }

var _ backend.HealthReporter = (*Volume)(nil)
