package cache

import "fmt"

// Release declares every record with seq <= upTo destaged: it persists a
// header whose tail is past them, so recovery will not replay them, and only
// then lets Append reuse their space. Releasing records already released is a
// no-op; upTo beyond the last acknowledged record is an error wrapping
// ErrNotFound, and nothing is released. A failed Persist fails the Buffer.
func (b *Buffer) Release(upTo Seq) error {
	b.hdr.Lock()
	defer b.hdr.Unlock()
	b.mu.Lock()
	if err := b.usableLocked(); err != nil {
		b.mu.Unlock()
		return err
	}
	first := b.firstLocked()
	if upTo < first {
		b.mu.Unlock()
		return nil
	}
	if upTo > b.mu.watermark {
		last := b.mu.watermark
		b.mu.Unlock()
		return fmt.Errorf("%w: release up to %v, last acknowledged is %v", ErrNotFound, upTo, last)
	}
	tail := b.mu.entries.at(int(upTo - first)).end
	b.mu.Unlock()

	// Appends go on meanwhile; only header writers, excluded by hdr, move the
	// tail or drop entries.
	h := b.hdr.current
	h.tailPos, h.tailSeq = tail, upTo+1
	h.closedHead, h.closedSeq = 0, 0
	err := b.writeHeaderLocked(h)

	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.failLocked(err)
		return b.mu.err
	}
	b.mu.entries.dropFront(int(upTo - first + 1))
	b.mu.tail = tail
	b.wakeFirstLocked()
	return nil
}

// Truncate drops every record with seq >= from, live or in flight, so that the
// next Append reuses seq from (or the first unreleased seq, if from is lower).
// It waits for in-flight Appends to finish and holds new ones back, then
// persists a header that starts a new epoch: dropped records never come back
// after a crash, even where new records are written over only part of them.
// from beyond the last record is a no-op.
func (b *Buffer) Truncate(from Seq) error {
	b.hdr.Lock()
	defer b.hdr.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.waitQuiescentLocked(); err != nil {
		return err
	}
	defer b.wakeFirstLocked()
	first := b.firstLocked()
	from = max(from, first)
	if from >= b.mu.nextSeq {
		return nil
	}
	dropped := *b.mu.entries.at(int(from - first))
	h := b.hdr.current
	h.epoch++
	h.truncSeq = from
	h.closedHead, h.closedSeq = 0, 0
	if err := b.writeHeaderLocked(h); err != nil {
		b.failLocked(err)
		return b.mu.err
	}
	b.mu.entries.keepFront(int(from - first))
	b.mu.head = dropped.start
	b.mu.nextSeq = from
	b.mu.watermark = from - 1
	b.mu.epoch = h.epoch
	return nil
}

// waitQuiescentLocked holds new reservations back and waits until every
// reserved record is persisted, or the Buffer failed.
func (b *Buffer) waitQuiescentLocked() error {
	if err := b.usableLocked(); err != nil {
		return err
	}
	b.mu.quiescing++
	for b.mu.watermark+1 < b.mu.nextSeq && b.mu.err == nil {
		b.mu.persisted.Wait()
	}
	b.mu.quiescing--
	return b.mu.err
}

// Close waits for in-flight Appends, fails the waiting ones with ErrClosed,
// and persists a header recording where the log ends, which the next Open
// checks. It does not close the Region, which belongs to the caller. After
// Close every method returns ErrClosed. Close of a failed Buffer writes
// nothing and returns nil.
func (b *Buffer) Close() error {
	b.hdr.Lock()
	defer b.hdr.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.closed {
		return ErrClosed
	}
	b.mu.closed = true
	b.wakeAllLocked()
	for b.mu.watermark+1 < b.mu.nextSeq && b.mu.err == nil {
		b.mu.persisted.Wait()
	}
	if b.mu.err != nil {
		return nil
	}
	h := b.hdr.current
	h.closedHead, h.closedSeq = b.mu.head, b.mu.nextSeq
	return b.writeHeaderLocked(h)
}

// writeHeaderLocked persists h, with the next generation, in the slot that
// does not hold the current header. b.hdr must be held.
func (b *Buffer) writeHeaderLocked(h header) error {
	h.generation = b.hdr.current.generation + 1
	off := int(h.generation%2) * headerSlotSize
	h.encode(b.mem[off : off+headerSlotSize])
	if err := b.region.Persist(off, headerSlotSize); err != nil {
		return fmt.Errorf("while persisting header generation %d: %w", h.generation, err)
	}
	b.hdr.current = h
	return nil
}
