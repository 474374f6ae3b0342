package store

import (
	"errors"
	"fmt"

	"basalt/cache"
	"basalt/pkg/backend"
	"basalt/pkg/pmem"
)

// stager is where an acknowledged write waits until the writer has
// destaged it: the write buffer, which holds a copy (bufferStager, the
// default), or the caller's own bytes, which the store references
// (refRing, Options.StageByReference). Open chooses one; the writer, the
// read path, checkpoints and statistics reach the staged records only
// through it. Records are numbered by cache.Seq, gap-free from the first
// one the stager holds after Open; the appends are the mode's own
// (Volume.WriteAt and Trim for the buffer, Volume.WriteStaged and
// TrimStaged, or the copying WriteAt, for the ring).
type stager interface {
	// view returns record seq, published and not released, for the writer
	// (the only caller of release): its sums and data stay valid and
	// unchanged until the writer releases seq.
	view(seq cache.Seq) (record, error)
	// readBlock copies block ref.index of record ref.seq into dst (one
	// block) and checks it against the block's checksum. It returns
	// errRetry when the record was released meanwhile (the map has the
	// block now), an error wrapping backend.ErrMedia when the block fails
	// its checksum, never wrong data.
	readBlock(rs *readScratch, ref pendingRef, dst []byte) error
	// release lets go of every record up to seq: the writer has made them
	// durable on the drives or they were overwritten by durable ones.
	release(seq cache.Seq) error
	// usage describes what is staged now.
	usage() stageUsage
	// uuid is the identity the staged sequence numbers count in: a
	// checkpoint's BufferSeq applies to this stager only if it names it.
	uuid() [16]byte
	// durable reports whether staged records survive power loss: if not,
	// Flush and FUA destage to the drives.
	durable() bool
	// fail is told that the store failed: no record is released from now
	// on, and appends fail instead of waiting for space.
	fail()
	// close ends the stager at Close, after the writer has stopped: once
	// it returns, nothing staged is read again.
	close() error
}

// stageUsage is a snapshot of a stager's state.
type stageUsage struct {
	mode string    // "staged" for the ring, else the region's mode
	size int64     // capacity: the log's bytes, or Options.StagedSize
	used int64     // bytes taken: the log's records, or the bytes referenced
	live int       // records staged and not released
	last cache.Seq // the newest record
}

// bufferStager stages copies in the write buffer (cache.Buffer on the
// store's persistent-memory region): the default, copying mode.
type bufferStager struct {
	buf    *cache.Buffer
	region pmem.Region // the buffer's
}

var _ stager = bufferStager{}

// view reads the record in place: the writer releases records itself, so
// a view of the buffer's memory is valid while it packs; each block's own
// checksum, from the record, travels with it into the segment summary.
func (b bufferStager) view(seq cache.Seq) (record, error) {
	kind, payload, err := b.buf.View(seq)
	if err != nil {
		return record{}, fmt.Errorf("store: while reading write-buffer record %v: %w", seq, err)
	}
	r, err := decodeRecord(kind, payload)
	if err != nil {
		return record{}, fmt.Errorf("%w: record %v: %w", ErrCorrupt, seq, err)
	}
	return r, nil
}

// readBlock copies the block out of a copy of its record, which rs keeps
// for the next block of the same record.
func (b bufferStager) readBlock(rs *readScratch, ref pendingRef, dst []byte) error {
	if rs.seq != ref.seq {
		kind, payload, err := b.buf.Read(ref.seq, rs.buffer)
		if errors.Is(err, cache.ErrReleased) || errors.Is(err, cache.ErrNotFound) {
			return errRetry // destaged meanwhile: the map has it now
		}
		if err != nil {
			return fmt.Errorf("%w: write-buffer record %v: %w", backend.ErrMedia, ref.seq, err)
		}
		rs.buffer = payload[:0]
		if rs.rec, err = decodeRecord(kind, payload); err != nil || int(ref.index) >= rs.rec.count {
			return fmt.Errorf("%w: write-buffer record %v: %v", backend.ErrMedia, ref.seq, err)
		}
		rs.seq = ref.seq
	}
	block := rs.rec.block(int(ref.index))
	if blockSum(block) != rs.rec.sum(int(ref.index)) {
		return fmt.Errorf("%w: block %d of write-buffer record %v fails its checksum", backend.ErrMedia,
			ref.index, ref.seq)
	}
	copy(dst, block)
	return nil
}

func (b bufferStager) release(seq cache.Seq) error {
	if err := b.buf.Release(seq); err != nil {
		return fmt.Errorf("store: while releasing the write buffer up to %v: %w", seq, err)
	}
	return nil
}

func (b bufferStager) usage() stageUsage {
	st := b.buf.Stats()
	return stageUsage{mode: st.Mode, size: st.Size, used: st.Used, live: st.Live, last: st.Last}
}

func (b bufferStager) uuid() [16]byte { return b.buf.UUID() }

// durable: the buffer survives power loss when its region does.
func (b bufferStager) durable() bool { return b.region.Mode().Durable() }

// fail closes the buffer, so that writes waiting for space in it fail
// instead of waiting forever: their data would never be destaged. What
// the buffer holds stays there for the next Open.
func (b bufferStager) fail() { _ = b.buf.Close() }

func (b bufferStager) close() error {
	if err := b.buf.Close(); err != nil && !errors.Is(err, cache.ErrClosed) {
		return fmt.Errorf("store: while closing the write buffer: %w", err)
	}
	return nil
}
