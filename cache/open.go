package cache

import (
	"crypto/rand"
	"fmt"
	"hash/crc32"

	"basalt/pkg/pmem"
)

// Open returns the Buffer on region r. A blank region (an all-zero header
// block), or any region when opts.Reformat is set, is formatted empty. A
// formatted one is recovered: Open scans the log from the persisted tail to the
// first record that is torn or otherwise invalid (doc.go, "Recovery"), keeps
// the records before it, and starts a new epoch so that nothing past that point
// can be taken for a record later. Recovery therefore yields every record whose
// Append returned and was not released or truncated, in order, possibly
// followed by records whose Append was cut short but which persisted whole.
//
// Open writes to the region (at least one header) before it returns. It
// returns an ErrCorrupt error for a region it will not interpret, and the
// Region's error if a Persist fails. The Buffer does not take ownership of r.
func Open(r pmem.Region, opts Options) (*Buffer, error) {
	size := r.Size()
	if size < headerBlockSize+minLogSize || len(r.Bytes()) != size {
		return nil, fmt.Errorf("%w: %d bytes, need at least %d", ErrRegionTooSmall, size, headerBlockSize+minLogSize)
	}
	b := &Buffer{region: r, mem: r.Bytes(), logSize: uint64(size-headerBlockSize) &^ (recordAlign - 1)}
	b.maxRecordSize = min(b.logSize/2&^(recordAlign-1), maxRecordSize)
	b.maxPayload = int(b.maxRecordSize) - recordHeaderLen
	b.mu.persisted.L = &b.mu.Mutex
	h, formatted, err := b.readHeader()
	switch {
	case opts.Reformat || (err == nil && !formatted):
		err = b.format(opts.UUID)
	case err == nil:
		err = b.recover(h)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// readHeader returns the valid header slot with the higher generation. It
// reports formatted = false for a blank header block, and an ErrCorrupt error
// when no slot is valid but the block is not blank, or when the header was
// written for a region of another size.
func (b *Buffer) readHeader() (h header, formatted bool, err error) {
	var found bool
	for slot := range 2 {
		candidate, ok := decodeHeader(b.mem[slot*headerSlotSize : (slot+1)*headerSlotSize])
		if ok && (!found || candidate.generation > h.generation) {
			h, found = candidate, true
		}
	}
	if !found {
		for _, c := range b.mem[:headerBlockSize] {
			if c != 0 {
				return header{}, false, fmt.Errorf("%w: no valid header slot, and the header block is not blank", ErrCorrupt)
			}
		}
		return header{}, false, nil
	}
	if h.regionSize != uint64(len(b.mem)) {
		return header{}, false, fmt.Errorf("%w: formatted for %d bytes, region has %d", ErrCorrupt, h.regionSize, len(b.mem))
	}
	return h, true, nil
}

// format makes the region an empty log. It first blanks both header slots, so
// that a crash before the new header is persisted leaves a blank region (or a
// torn header, refused without Reformat), never an old header; then it blanks
// the first record of the log, so that a region formatted again with the same
// UUID cannot show its old first record; then it writes the header.
func (b *Buffer) format(uuid [16]byte) error {
	if uuid == [16]byte{} {
		if _, err := rand.Read(uuid[:]); err != nil {
			return fmt.Errorf("cache: while drawing a region UUID: %w", err)
		}
	}
	clear(b.mem[:2*headerSlotSize])
	if err := b.region.Persist(0, 2*headerSlotSize); err != nil {
		return fmt.Errorf("cache: while formatting: %w", err)
	}
	clear(b.mem[headerBlockSize : headerBlockSize+recordAlign])
	if err := b.region.Persist(headerBlockSize, recordAlign); err != nil {
		return fmt.Errorf("cache: while formatting: %w", err)
	}
	b.setIdentity(uuid)
	h := header{uuid: uuid, regionSize: uint64(len(b.mem)), tailSeq: 1, truncSeq: 1, epoch: 1}
	if err := b.writeHeaderLocked(h); err != nil {
		return fmt.Errorf("cache: while formatting: %w", err)
	}
	b.mu.nextSeq, b.mu.epoch = 1, 1
	return nil
}

func (b *Buffer) setIdentity(uuid [16]byte) {
	b.uuid = uuid
	b.crcSeed = crc32.Checksum(uuid[:], castagnoli)
}

// recover rebuilds the in-memory state from header h and the log, checks it
// against the clean-close mark, and persists a header for a new epoch.
func (b *Buffer) recover(h header) error {
	b.setIdentity(h.uuid)
	b.hdr.current = h
	b.mu.tail, b.mu.head = h.tailPos, h.tailPos
	b.mu.nextSeq, b.mu.watermark = h.tailSeq, h.tailSeq-1
	b.scan(h)
	if h.closedSeq != 0 && (b.mu.head != h.closedHead || b.mu.nextSeq != h.closedSeq) {
		return fmt.Errorf("%w: closed cleanly at record %v (log position %d), but the log ends at record %v (position %d)",
			ErrCorrupt, h.closedSeq, h.closedHead, b.mu.nextSeq, b.mu.head)
	}
	next := h
	next.epoch++
	next.truncSeq = b.mu.nextSeq
	next.closedHead, next.closedSeq = 0, 0
	if err := b.writeHeaderLocked(next); err != nil {
		return fmt.Errorf("cache: while starting epoch %d: %w", next.epoch, err)
	}
	b.mu.epoch = next.epoch
	return nil
}

// scan appends an entry for every record from the tail that passes the
// recovery checks, and stops at the first that does not.
func (b *Buffer) scan(h header) {
	pos, epoch := h.tailPos, uint64(0)
	for {
		start := pos
		r, ok := b.acceptable(h, pos, epoch)
		if ok && r.flags&flagPadding != 0 {
			pos += b.logSize - pos%b.logSize
			r, ok = b.acceptable(h, pos, r.epoch)
			ok = ok && r.flags&flagPadding == 0
		}
		if !ok {
			return
		}
		end := pos + recordSize(int(r.length))
		b.mu.entries.push(entry{start: start, pos: pos, end: end, done: true})
		b.mu.head, epoch = end, r.epoch
		b.mu.nextSeq++
		b.mu.watermark++
		pos = end
	}
}

// acceptable applies the recovery checks (doc.go) to the record at pos, the
// next one expected: seq b.mu.nextSeq, epoch at least previousEpoch.
func (b *Buffer) acceptable(h header, pos, previousEpoch uint64) (recordHeader, bool) {
	r, _, ok := b.recordAt(pos)
	if !ok || r.seq != b.mu.nextSeq || r.epoch > h.epoch || r.epoch < previousEpoch ||
		(r.seq >= h.truncSeq && r.epoch < h.epoch) {
		return recordHeader{}, false
	}
	size := recordSize(int(r.length))
	if r.flags&flagPadding != 0 {
		size = b.logSize - pos%b.logSize
	}
	return r, pos+size-h.tailPos <= b.logSize
}
