package store

import (
	"errors"

	"basalt/cache"
)

// pack moves published write-buffer records, oldest first, into the host
// stream's batch until the batch is full or no record is left. A block
// whose overlay shows a newer version is skipped (the newer one will be
// destaged instead); a record of a deleted volume is skipped whole. It
// returns errNoSegment when the stream needs a segment and none is free;
// the position is kept, and packing resumes there later.
func (w *writer) pack() (bool, error) {
	st := w.host
	progress := false
	limit := w.s.pub.published()
	for w.nextPack <= limit {
		if st.batchFull() {
			return progress, nil
		}
		seq := w.nextPack
		// The writer releases records itself, so a view is valid while it
		// packs; each block's own checksum, from the record, travels with
		// it into the segment summary.
		r, err := w.s.stage.view(seq)
		if err != nil {
			return progress, err
		}
		done, err := w.packRecord(st, seq, &r, limit)
		if err != nil {
			return progress, err
		}
		progress = true
		if !done {
			return progress, nil
		}
		w.packIndex, w.lastComplete = 0, seq
		w.nextPack++
	}
	return progress, nil
}

// packRecord packs what is left of record seq; done is false when the batch
// filled first (w.packIndex says where to resume).
func (w *writer) packRecord(st *stream, seq cache.Seq, r *record, published cache.Seq) (done bool, err error) {
	v := w.s.volumeByID(r.vol)
	if v == nil {
		return true, nil
	}
	if r.kind == recordUnmap {
		if err := w.room(st, false); err != nil {
			return false, err
		}
		w.addUnmap(st, summaryEntry{kind: kindUnmap, vol: r.vol, lba: r.lba, sum: uint32(r.count)}, seq)
		return true, nil
	}
	for i := w.packIndex; i < r.count; i++ {
		lba := r.lba + uint64(i)
		if lba >= v.blocks() || !v.ov.current(lba, seq, i, published) {
			continue
		}
		// The block is not checksummed again here: the buffer computed its
		// sum from this very copy, and Open verified recovered records whole.
		block, sum, ok := r.block(i), r.sum(i), true
		if st.batchFull() {
			w.packIndex = i
			return false, nil
		}
		if err := w.room(st, true); err != nil {
			w.packIndex = i
			if errors.Is(err, errBatchFull) {
				return false, nil
			}
			return false, err
		}
		if block, sum, ok = w.encrypt(v, lba, block, sum); !ok {
			w.packIndex = i // an encrypted volume without its key: its records wait
			return false, nil
		}
		w.addBlock(st, v, summaryEntry{kind: kindWrite, vol: r.vol, lba: lba, sum: sum}, seq, block)
	}
	return true, nil
}
