package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync"
	"sync/atomic"

	"basalt/pkg/pmem"
)

// Seq is a record's sequence number: strictly increasing and gap-free along
// the log, starting at 1 in a freshly formatted region. 0 is never a record.
type Seq uint64

func (s Seq) String() string { return strconv.FormatUint(uint64(s), 10) }

// Kind is the caller's record type (a block write, a Raft entry, a Raft hard
// state...). The Buffer stores it with the record and returns it unchanged.
type Kind uint8

func (k Kind) String() string { return strconv.Itoa(int(k)) }

var (
	// ErrTooLarge: the record is larger than Stats.MaxPayload (about half the
	// log, at most 2 GiB).
	ErrTooLarge = errors.New("cache: record too large")
	// ErrBadBlocks: AppendBlocks was given data that is not whole blocks.
	ErrBadBlocks = errors.New("cache: data is not a whole number of blocks")
	// ErrReleased: the record was released.
	ErrReleased = errors.New("cache: record released")
	// ErrNotFound: no such record: never appended, truncated, or not yet
	// acknowledged.
	ErrNotFound = errors.New("cache: record not found")
	// ErrClosed: the Buffer was closed.
	ErrClosed = errors.New("cache: buffer closed")
	// ErrCorrupt: the region holds something Open will not interpret: no valid
	// header on a non-blank header block, a header for another region size, a
	// log shorter than a clean Close left it, or a record that fails its
	// checksum after it was acknowledged.
	ErrCorrupt = errors.New("cache: region corrupt")
	// ErrFailed: a Persist failed, so what reached the media is unknown. Every
	// later Append, Release and Truncate fails with an error wrapping ErrFailed
	// and the cause. Open the region again to recover.
	ErrFailed = errors.New("cache: buffer failed")
	// ErrRegionTooSmall: the region cannot hold the header block and a minimal
	// log (4096 + 1024 bytes).
	ErrRegionTooSmall = errors.New("cache: region too small")
)

// Options configure Open. The zero value is the usual choice.
type Options struct {
	// UUID identifies the region when Open formats it; it is written in the
	// header and seeds every record checksum, so records of another region are
	// never taken for this one's. Zero (the default) draws a random UUID. It is
	// ignored when the region is already formatted.
	UUID [16]byte
	// Reformat makes Open discard whatever the region holds and format it.
	// Default false: Open recovers a formatted region, formats a blank one (an
	// all-zero header block), and refuses anything else with ErrCorrupt.
	Reformat bool
}

// Stats is a snapshot of a Buffer's state and counters.
type Stats struct {
	UUID       [16]byte // the region's identity
	Mode       string   // the region's persistence mode, for example "msync"
	Size       int64    // capacity of the log in bytes (the region less its header block)
	Used       int64    // bytes taken by live and in-flight records and their padding
	Live       int      // records acknowledged and not released
	First      Seq      // oldest live record; when Live is 0, the Seq after Last
	Last       Seq      // newest acknowledged record; First-1 when Live is 0
	MaxPayload int      // largest payload Append accepts, in bytes
	Epoch      uint64   // current truncation epoch (doc.go, "Truncation and epochs")
	Appends    uint64   // records acknowledged since Open
	AppendSize uint64   // payload bytes acknowledged since Open
	SpaceWaits uint64   // Appends since Open that had to wait for space
}

// Buffer is the write buffer on one Region. Its methods are safe for
// concurrent use. A region must be used by one Buffer at a time.
type Buffer struct {
	region        pmem.Region
	mem           []byte // region.Bytes()
	logSize       uint64 // L: bytes of log after the header block, a multiple of 64
	maxRecordSize uint64 // L/2 rounded down to 64: header, payload and alignment
	maxPayload    int
	uuid          [16]byte
	crcSeed       uint32 // CRC32C of uuid: the seed of every record CRC

	// hdr serializes the header writers (Release, Truncate, Close). Lock order:
	// hdr, then mu.
	hdr struct {
		sync.Mutex
		current header // the header in force: the last one persisted
	}

	// mu protects the log state. It is held for reservations, bookkeeping and
	// Read's copy, never while a record is persisted. Truncate and Close hold
	// it while they wait for in-flight appends and persist one header slot.
	mu struct {
		sync.Mutex
		persisted sync.Cond // on mu: watermark advanced, or err set

		// Invariant: tail <= head <= tail+logSize, and [tail, head) is covered
		// by entries, in order, without gaps.
		tail, head uint64
		nextSeq    Seq
		// watermark: this record and every earlier one are persisted.
		// Invariant: first-1 <= watermark < nextSeq.
		watermark Seq
		epoch     uint64     // written into new records
		entries   entryQueue // records first .. nextSeq-1
		waiters   []*spaceWaiter
		quiescing int // Truncate or Close waits for in-flight appends: reserve nothing
		closed    bool
		err       error // sticky; wraps ErrFailed
	}

	appends    atomic.Uint64
	appendSize atomic.Uint64
	spaceWaits atomic.Uint64
}

// spaceWaiter is an Append queued for space, first come first served.
type spaceWaiter struct {
	wake chan struct{} // capacity 1: a wake-up is never lost nor blocks
}

// reservation is the log space given to one Append.
type reservation struct {
	seq        Seq
	start, pos uint64 // start < pos when padding precedes the record
	epoch      uint64
}

// Append writes one record whose payload is the concatenation of payloads,
// persists it, and returns its Seq. It returns only once this record and every
// record before it are persisted, so a record it acknowledges is recovered
// after a crash. It copies the payloads and does not keep them.
//
// When the log has no room, Append waits, in arrival order with other waiting
// Appends, until Release frees enough; it never overwrites a live record. It
// returns ctx.Err() if ctx is done first, ErrTooLarge for a payload larger than
// Stats.MaxPayload, ErrClosed after Close, and an ErrFailed error once a
// Persist has failed. On error, no record was acknowledged.
func (b *Buffer) Append(ctx context.Context, kind Kind, payloads ...[]byte) (Seq, error) {
	length := 0
	for _, payload := range payloads {
		length += len(payload)
	}
	return b.append(ctx, kind, length, payloads, nil)
}

// AppendBlocks is Append of the payload head || sums || data, where data is
// a whole number of BlockSize blocks and sums is the table of their CRC32Cs
// (Castagnoli, 4 bytes each, little-endian) in order. The buffer computes
// the table from its own copy of data, so each sum matches the block the
// record holds even if the caller's data changed during the copy; the
// record's checksum covers the whole payload as for Append, and Read returns
// it whole. A data length that is not a multiple of BlockSize is
// ErrBadBlocks.
func (b *Buffer) AppendBlocks(ctx context.Context, kind Kind, head, data []byte) (Seq, error) {
	if len(data)%BlockSize != 0 {
		return 0, fmt.Errorf("%w: %d bytes", ErrBadBlocks, len(data))
	}
	length := len(head) + len(data)/BlockSize*4 + len(data)
	return b.append(ctx, kind, length, [][]byte{head}, data)
}

// append writes a record of length bytes: payloads, then, if blocks is not
// nil, the table of its blocks' checksums and the blocks.
func (b *Buffer) append(ctx context.Context, kind Kind, length int, payloads [][]byte, blocks []byte) (Seq, error) {
	if length > b.maxPayload {
		return 0, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, length, b.maxPayload)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r, err := b.reserve(ctx, recordSize(length))
	if err != nil {
		return 0, err
	}
	err = b.writeRecord(r, kind, uint32(length), payloads, blocks)
	if err := b.complete(r.seq, err); err != nil {
		return 0, err
	}
	b.appends.Add(1)
	b.appendSize.Add(uint64(length))
	return r.seq, nil
}

func (b *Buffer) reserve(ctx context.Context, size uint64) (reservation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mu.waiters) == 0 {
		if r, ok, err := b.tryReserveLocked(size); ok || err != nil {
			return r, err
		}
	}
	return b.waitReserveLocked(ctx, size)
}

// tryReserveLocked takes size bytes at the head, after padding to the next lap
// when the record would cross the end of the log. It reports false when the
// space is not free.
func (b *Buffer) tryReserveLocked(size uint64) (reservation, bool, error) {
	if err := b.usableLocked(); err != nil {
		return reservation{}, false, err
	}
	if b.mu.quiescing > 0 {
		return reservation{}, false, nil
	}
	start := b.mu.head
	pos := start
	if lapOffset := start % b.logSize; lapOffset+size > b.logSize {
		pos += b.logSize - lapOffset
	}
	if pos+size-b.mu.tail > b.logSize {
		return reservation{}, false, nil
	}
	r := reservation{seq: b.mu.nextSeq, start: start, pos: pos, epoch: b.mu.epoch}
	b.mu.entries.push(entry{start: start, pos: pos, end: pos + size})
	b.mu.head = pos + size
	b.mu.nextSeq++
	return r, true, nil
}

var waiterPool = sync.Pool{New: func() any { return &spaceWaiter{wake: make(chan struct{}, 1)} }}

// waitReserveLocked queues for space. Only the first waiter reserves; whoever
// frees space wakes it, and it wakes the next one when it leaves the queue.
func (b *Buffer) waitReserveLocked(ctx context.Context, size uint64) (reservation, error) {
	w := waiterPool.Get().(*spaceWaiter)
	b.mu.waiters = append(b.mu.waiters, w)
	b.spaceWaits.Add(1)
	defer func() {
		b.removeWaiterLocked(w)
		// Out of the list (under mu), w gets no more wake-ups: drop a stale
		// one and reuse it. An Append that waits for space would otherwise
		// allocate on every call while the buffer is full.
		select {
		case <-w.wake:
		default:
		}
		waiterPool.Put(w)
	}()
	for {
		if b.mu.waiters[0] == w {
			if r, ok, err := b.tryReserveLocked(size); ok || err != nil {
				return r, err
			}
		} else if err := b.usableLocked(); err != nil {
			return reservation{}, err
		}
		b.mu.Unlock()
		select {
		case <-w.wake:
		case <-ctx.Done():
		}
		b.mu.Lock()
		if err := ctx.Err(); err != nil {
			return reservation{}, err
		}
	}
}

func (b *Buffer) removeWaiterLocked(w *spaceWaiter) {
	for i, other := range b.mu.waiters {
		if other == w {
			b.mu.waiters = append(b.mu.waiters[:i], b.mu.waiters[i+1:]...)
			break
		}
	}
	b.wakeFirstLocked()
}

// wakeFirstLocked tells the first waiter to look for space again.
func (b *Buffer) wakeFirstLocked() {
	if len(b.mu.waiters) > 0 {
		select {
		case b.mu.waiters[0].wake <- struct{}{}:
		default:
		}
	}
}

func (b *Buffer) wakeAllLocked() {
	for _, w := range b.mu.waiters {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// writeRecord fills the reserved space and persists it. It runs without mu:
// the space belongs to this Append alone.
func (b *Buffer) writeRecord(r reservation, kind Kind, length uint32, payloads [][]byte, blocks []byte) error {
	if r.pos != r.start {
		if err := b.writePadding(r); err != nil {
			return err
		}
	}
	off := b.offset(r.pos)
	head := b.mem[off : off+recordHeaderLen]
	h := recordHeader{kind: kind, length: length, seq: r.seq, pos: r.pos, epoch: r.epoch}
	h.encode(head)
	at := off + recordHeaderLen
	for _, payload := range payloads {
		at += copy(b.mem[at:], payload)
	}
	// The CRC covers the copy in the region, not the caller's buffers.
	crc := crc32.Update(headerCRC(b.crcSeed, head), castagnoli, b.mem[off+recordHeaderLen:at])
	if blocks != nil {
		n := len(blocks) / BlockSize
		sums, data := b.mem[at:at+4*n], b.mem[at+4*n:at+4*n+len(blocks)]
		crc = copyBlocks(crc, data, sums, blocks)
		at += 4*n + len(blocks)
	}
	binary.LittleEndian.PutUint32(head[4:], crc)
	return b.region.Persist(off, at-off)
}

// writePadding fills [r.start, r.pos), the rest of a lap, with a padding
// record. Only its header is written and persisted.
func (b *Buffer) writePadding(r reservation) error {
	off := b.offset(r.start)
	head := b.mem[off : off+recordHeaderLen]
	h := recordHeader{
		flags: flagPadding, length: uint32(r.pos - r.start - recordHeaderLen),
		seq: r.seq, pos: r.start, epoch: r.epoch,
	}
	h.encode(head)
	binary.LittleEndian.PutUint32(head[4:], headerCRC(b.crcSeed, head))
	return b.region.Persist(off, recordHeaderLen)
}

// complete marks record seq persisted (or the Buffer failed, if writeErr is
// set) and waits until every earlier record is persisted too.
func (b *Buffer) complete(seq Seq, writeErr error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if writeErr != nil {
		b.failLocked(fmt.Errorf("while persisting record %v: %w", seq, writeErr))
		return b.mu.err
	}
	first := b.firstLocked()
	b.mu.entries.at(int(seq - first)).done = true
	if seq == b.mu.watermark+1 {
		for b.mu.watermark+1 < b.mu.nextSeq && b.mu.entries.at(int(b.mu.watermark+1-first)).done {
			b.mu.watermark++
		}
		b.mu.persisted.Broadcast()
	}
	for b.mu.watermark < seq && b.mu.err == nil {
		b.mu.persisted.Wait()
	}
	if b.mu.watermark < seq {
		return b.mu.err
	}
	return nil
}

// failLocked makes the Buffer failed with cause, once, and wakes everyone who
// waits so that they see it.
func (b *Buffer) failLocked(cause error) {
	if b.mu.err == nil {
		b.mu.err = fmt.Errorf("%w: %w", ErrFailed, cause)
	}
	b.mu.persisted.Broadcast()
	b.wakeAllLocked()
}

func (b *Buffer) usableLocked() error {
	if b.mu.closed {
		return ErrClosed
	}
	return b.mu.err
}

func (b *Buffer) firstLocked() Seq { return b.mu.nextSeq - Seq(b.mu.entries.len()) }

// offset returns the region offset of log position pos.
func (b *Buffer) offset(pos uint64) int { return headerBlockSize + int(pos%b.logSize) }
