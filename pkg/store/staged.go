package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"basalt/cache"
	"basalt/pkg/backend"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// ErrStaging: WriteStaged or TrimStaged on a store opened without
// Options.StageByReference, or with a token below the volume's previous
// one (or the largest uint64, which the floor cannot report).
var ErrStaging = errors.New("store: misuse of staged writes")

// WriteStaged stages a write of p (a multiple of 4096 bytes) at byte offset
// off without copying p: the store keeps p and reads it when it destages
// the blocks or serves a read of them, until the record is released. The
// caller must keep p valid and unchanged until then, i.e. until StagedFloor
// reports a token above this one (or the volume is deleted, or the store
// is closed). token is the caller's position of the write (a Raft index):
// non-decreasing per volume, may repeat, below 2^64-1.
//
// It never blocks waiting for space (it is called on a Raft group's apply
// loop): the per-block checksums are computed from p here, and the record
// descriptors come from a ring that grows when full. It fails like WriteAt
// for range, alignment, a closed or deleted volume, a closed or failed
// store (backend.ErrWriteFault), and with backend.ErrNoSpace exactly as
// WriteAt's capacity rule says. Only valid with Options.StageByReference
// (else ErrStaging). A write of more than 16 blocks is staged as several
// records; if one fails, the earlier ones stay staged.
func (h *Volume) WriteStaged(p []byte, off int64, token uint64) error {
	lba, n, err := h.check(off, int64(len(p)))
	if err != nil || n == 0 {
		return err
	}
	s := h.s
	if err := s.checkStaging(token); err != nil {
		return err
	}
	if err := s.admit(h.v, lba, n); err != nil {
		return err
	}
	return s.stageBlocks(h.v, p, lba, n, token, true)
}

// TrimStaged is Trim with a token: an unmap record in the staged sequence,
// counted in the volume's floor like a WriteStaged record. It holds no
// caller bytes. Errors are WriteStaged's.
func (h *Volume) TrimStaged(off, n int64, token uint64) error {
	lba, count, err := h.check(off, n)
	if err != nil || count == 0 {
		return err
	}
	if err := h.s.checkStaging(token); err != nil {
		return err
	}
	return h.s.stageTrim(h.v, lba, uint64(count), token, true)
}

// StagedFloor returns the token of this volume's oldest staged record that
// is not yet released (its blocks written to the drives in a durable
// stripe, or superseded and dropped), and ok false when none is
// outstanding. Every staged write with a token below the floor is durable
// on the drives (or superseded by a durable newer write). A failed store
// never advances it, and after Close it stays where Close left it (none,
// unless the store had failed): the caller replays what it reports. A
// deleted volume reports none. Cheap (one atomic load); safe from any
// goroutine. On a store without StageByReference it always reports none.
func (h *Volume) StagedFloor() (token uint64, ok bool) {
	f := h.v.staged.floor.Load()
	if f == 0 {
		return 0, false
	}
	return f - 1, true
}

// checkStaging refuses staged writes on a copying store and the one token
// the floor cannot carry.
func (s *Store) checkStaging(token uint64) error {
	if s.ring == nil {
		return fmt.Errorf("%w: the store was opened without StageByReference", ErrStaging)
	}
	if token == math.MaxUint64 {
		return fmt.Errorf("%w: token %d", ErrStaging, token)
	}
	return nil
}

// stageBlocks stages p, n blocks at lba of v, in records of at most
// stagedRecordBlocks blocks: each is entered into the overlay and
// published, as WriteAt does with its write-buffer records. tracked records
// (WriteStaged) count in v's floor; the others hold the store's own copy.
func (s *Store) stageBlocks(v *volume, p []byte, lba uint64, n int, token uint64, tracked bool) error {
	defer s.wake()
	for n > 0 {
		chunk := min(n, stagedRecordBlocks)
		size := chunk * BlockSize
		rec := stagedRec{kind: recordWrite, tracked: tracked, count: uint32(chunk), vol: v.info.ID, lba: lba,
			token: token, v: v, bytes: int64(size), data: p[:size:size]}
		for i := range chunk {
			binary.LittleEndian.PutUint32(rec.sums[4*i:], blockSum(p[i*BlockSize:(i+1)*BlockSize]))
		}
		seq, err := s.ring.append(&rec)
		if err != nil {
			return err
		}
		v.ov.addWrite(seq, lba, chunk)
		s.pub.publish(seq)
		s.counters.hostBlocks.Add(uint64(chunk))
		lba, n, p = lba+uint64(chunk), n-chunk, p[size:]
	}
	return nil
}

// stageTrim stages unmap records for n blocks at lba of v.
func (s *Store) stageTrim(v *volume, lba, n, token uint64, tracked bool) error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("%w: %w", backend.ErrWriteFault, err)
	}
	defer s.wake()
	for n > 0 {
		chunk := min(n, maxUnmapBlocks)
		rec := stagedRec{kind: recordUnmap, tracked: tracked, count: uint32(chunk), vol: v.info.ID, lba: lba,
			token: token, v: v}
		seq, err := s.ring.append(&rec)
		if err != nil {
			return err
		}
		v.ov.addTrim(seq, lba, chunk)
		s.pub.publish(seq)
		lba, n = lba+chunk, n-chunk
	}
	return nil
}

// writeCopy is WriteAt on a store that stages by reference: the blocks are
// copied once, into memory of the store's own (the caller may reuse p as
// soon as WriteAt returns), and staged like WriteStaged's, in the same
// sequence, so whichever of the two was called last for a block wins.
// They count in no floor and, like everything staged, are durable only
// once destaged (Flush).
func (s *Store) writeCopy(v *volume, p []byte, lba uint64, n int) error {
	own := make([]byte, len(p))
	copy(own, p)
	return s.stageBlocks(v, own, lba, n, 0, false)
}

// openStage opens the stager recovery enters the surviving records from:
// the write buffer (openBuffer), or with StageByReference a new, empty
// ring. It returns the first record left and the buffer sequence destaged
// up to (0 for a ring: its sequence is new, whatever the checkpoint
// counted in).
func (s *Store) openStage(head meta.CheckpointHead, destaged uint64) (cache.Seq, uint64, error) {
	if !s.opts.StageByReference {
		return s.openBuffer(head, destaged)
	}
	s.ring = newRefRing(s.opts.StagedSize, disk.NewUUID())
	s.stage = s.ring
	s.pub.reset(1)
	if head.BufferUUID != ([16]byte{}) {
		s.log.Info("staged writes start empty: the caller replays what it staged", "checkpoint", head.Seq)
	}
	return 1, 0, nil
}
