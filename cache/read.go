package cache

import (
	"errors"
	"fmt"
	"hash/crc32"
)

// Read copies the payload of acknowledged, unreleased record seq into
// dst[:0], growing it only if its capacity is short, and returns the record's
// kind and the payload. It verifies the record's checksum again and returns an
// ErrCorrupt error if the region was damaged since. It returns an error
// wrapping ErrReleased for a released record, ErrNotFound for one never
// acknowledged or truncated, and ErrClosed after Close.
func (b *Buffer) Read(seq Seq, dst []byte) (Kind, []byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.closed {
		return 0, dst[:0], ErrClosed
	}
	e, err := b.liveEntryLocked(seq)
	if err != nil {
		return 0, dst[:0], err
	}
	h, payload, ok := b.recordAt(e.pos)
	if !ok || h.seq != seq || h.flags&flagPadding != 0 {
		return 0, dst[:0], fmt.Errorf("%w: record %v at log position %d no longer verifies", ErrCorrupt, seq, e.pos)
	}
	return h.kind, append(dst[:0], payload...), nil
}

// View returns the kind and payload of acknowledged, unreleased record seq,
// aliasing the buffer's memory: the payload stays valid until seq is
// released and must not be written. Unlike Read, it does not verify the
// payload against the record's checksum again, only the record header
// (magic, version, sequence, position, bounds). It is for the reader that
// releases seq itself and trusts the buffer's memory from Append, or Open's
// verification, until Release: the destager, which checks each block it
// moves against the block's own checksum later, on every read from a drive.
// Errors are Read's.
func (b *Buffer) View(seq Seq) (Kind, []byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.closed {
		return 0, nil, ErrClosed
	}
	e, err := b.liveEntryLocked(seq)
	if err != nil {
		return 0, nil, err
	}
	off := b.offset(e.pos)
	h, ok := decodeRecordHeader(b.mem[off : off+recordHeaderLen])
	if !ok || h.seq != seq || h.pos != e.pos || h.flags&flagPadding != 0 ||
		recordSize(int(h.length)) != e.end-e.pos {
		return 0, nil, fmt.Errorf("%w: record %v at log position %d no longer verifies", ErrCorrupt, seq, e.pos)
	}
	return h.kind, b.mem[off+recordHeaderLen : off+recordHeaderLen+int(h.length)], nil
}

func (b *Buffer) liveEntryLocked(seq Seq) (*entry, error) {
	first := b.firstLocked()
	switch {
	case seq == 0 || seq > b.mu.watermark:
		return nil, fmt.Errorf("%w: %v (last is %v)", ErrNotFound, seq, b.mu.watermark)
	case seq < first:
		return nil, fmt.Errorf("%w: %v (first live is %v)", ErrReleased, seq, first)
	}
	return b.mu.entries.at(int(seq - first)), nil
}

// Replay calls fn for every live record, oldest first, from the first live one
// to the last one acknowledged when Replay began. payload is valid only until
// fn returns. fn may call the Buffer's other methods: records released during
// Replay are skipped, and Replay ends at a truncation. An error from fn stops
// Replay and is returned as is.
func (b *Buffer) Replay(fn func(seq Seq, kind Kind, payload []byte) error) error {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	seq, last := b.firstLocked(), b.mu.watermark
	b.mu.Unlock()
	var scratch []byte
	for ; seq <= last; seq++ {
		kind, payload, err := b.Read(seq, scratch)
		switch {
		case errors.Is(err, ErrReleased):
			continue
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		scratch = payload
		if err := fn(seq, kind, payload); err != nil {
			return err
		}
	}
	return nil
}

// recordAt decodes the record at log position pos and verifies what the
// record itself can vouch for: magic, version, its position field, that it
// lies within the lap (and, for padding, runs exactly to the lap's end), and
// its checksum. Sequence and epoch rules are the caller's. The payload aliases
// the region.
func (b *Buffer) recordAt(pos uint64) (recordHeader, []byte, bool) {
	lapOffset := pos % b.logSize
	room := b.logSize - lapOffset
	off := headerBlockSize + int(lapOffset)
	head := b.mem[off : off+recordHeaderLen]
	h, ok := decodeRecordHeader(head)
	if !ok || h.pos != pos {
		return recordHeader{}, nil, false
	}
	if h.flags&flagPadding != 0 {
		ok := lapOffset != 0 && h.kind == 0 && uint64(h.length)+recordHeaderLen == room &&
			h.crc == headerCRC(b.crcSeed, head)
		return h, nil, ok
	}
	if recordSize(int(h.length)) > min(room, b.maxRecordSize) {
		return recordHeader{}, nil, false
	}
	payload := b.mem[off+recordHeaderLen : off+recordHeaderLen+int(h.length)]
	if crc32.Update(headerCRC(b.crcSeed, head), castagnoli, payload) != h.crc {
		return recordHeader{}, nil, false
	}
	return h, payload, true
}

// UUID returns the buffer's identity, fixed when it was formatted.
func (b *Buffer) UUID() [16]byte { return b.uuid }

// Used returns the bytes the log holds now (live records and padding),
// the Used of Stats without the rest.
func (b *Buffer) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int64(b.mu.head - b.mu.tail)
}

// Stats returns a snapshot of the Buffer's state and counters.
func (b *Buffer) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	first := b.firstLocked()
	return Stats{
		UUID:       b.uuid,
		Mode:       b.region.Mode().String(),
		Size:       int64(b.logSize),
		Used:       int64(b.mu.head - b.mu.tail),
		Live:       int(b.mu.watermark + 1 - first),
		First:      first,
		Last:       b.mu.watermark,
		MaxPayload: b.maxPayload,
		Epoch:      b.mu.epoch,
		Appends:    b.appends.Load(),
		AppendSize: b.appendSize.Load(),
		SpaceWaits: b.spaceWaits.Load(),
	}
}
