package meta

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Checkpoint returns the checkpoint head in force; ok is false if no
// checkpoint was ever committed.
func (d *DB) Checkpoint() (head CheckpointHead, ok bool, err error) {
	ok, err = d.getJSON([]byte(keyHead), &head)
	return head, ok, err
}

// ReadCheckpoint calls fn for every chunk of head's checkpoint, in (volume,
// chunk) order. data is valid only until fn returns. A chunk that head lists
// but the store lacks is an error wrapping ErrCorrupt.
func (d *DB) ReadCheckpoint(head CheckpointHead, fn func(vol VolumeID, chunk uint32, data []byte) error) error {
	listed := 0
	for _, v := range head.Volumes {
		listed += len(v.Chunks)
	}
	found := 0
	prefix := binaryPrefix(head.Gen)
	err := d.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			_, vol, chunk, ok := parseChunkKey(item.Key())
			if !ok {
				return fmt.Errorf("%w: key %q under the checkpoint prefix", ErrCorrupt, item.Key())
			}
			found++
			if err := item.Value(func(b []byte) error { return fn(vol, chunk, b) }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: while reading checkpoint %d: %w", head.Gen, err)
	}
	if found != listed {
		return fmt.Errorf("%w: checkpoint %d lists %d chunks, the store holds %d", ErrCorrupt,
			head.Gen, listed, found)
	}
	return nil
}

func binaryPrefix(gen uint64) []byte {
	k := keyChunk(gen, 0, 0)
	return k[:len(prefixChunk)+8]
}

// CheckpointWriter writes one checkpoint. It is not safe for concurrent use.
type CheckpointWriter struct {
	db      *DB
	gen     uint64
	prev    uint64 // generation in force when the writer began; 0: none
	pending []kv
	size    int64
	volumes map[VolumeID]*CheckpointVolume
	order   []VolumeID
	err     error
}

type kv struct{ key, value []byte }

// BeginCheckpoint starts a checkpoint under the next generation.
func (d *DB) BeginCheckpoint() (*CheckpointWriter, error) {
	head, ok, err := d.Checkpoint()
	if err != nil {
		return nil, err
	}
	w := &CheckpointWriter{db: d, gen: 1, volumes: make(map[VolumeID]*CheckpointVolume)}
	if ok {
		w.gen, w.prev = head.Gen+1, head.Gen
	}
	return w, nil
}

// Gen returns the generation the checkpoint is written under: the one in
// force once Commit returns nil.
func (w *CheckpointWriter) Gen() uint64 { return w.gen }

// Put adds chunk of vol's map. data is copied. Chunks of a volume must be
// put in increasing order; an all-zero chunk need not be put at all.
func (w *CheckpointWriter) Put(vol VolumeID, chunk uint32, data []byte) error {
	if w.err != nil {
		return w.err
	}
	v := w.volumes[vol]
	if v == nil {
		v = &CheckpointVolume{ID: vol}
		w.volumes[vol] = v
		w.order = append(w.order, vol)
	}
	if n := len(v.Chunks); n > 0 && v.Chunks[n-1] >= chunk {
		w.err = fmt.Errorf("meta: checkpoint chunk %d of %v after chunk %d", chunk, vol, v.Chunks[n-1])
		return w.err
	}
	v.Chunks = append(v.Chunks, chunk)
	w.pending = append(w.pending, kv{keyChunk(w.gen, vol, chunk), append([]byte(nil), data...)})
	w.size += int64(len(data)) + 64
	if w.size >= w.db.maxBatch {
		w.err = w.flush()
	}
	return w.err
}

// flush writes the pending chunks in one transaction.
func (w *CheckpointWriter) flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	pending := w.pending
	w.pending, w.size = nil, 0
	return w.db.Update(func(tx *Tx) error {
		for _, e := range pending {
			if err := tx.txn.Set(e.key, e.value); err != nil {
				return err
			}
		}
		return nil
	})
}

// Commit writes the remaining chunks, then the head (with head.Gen and
// head.Volumes filled in from the writer), then deletes the previous
// generation's chunks. The checkpoint is in force once Commit returns nil;
// if Commit fails, the previous one may still be.
func (w *CheckpointWriter) Commit(head CheckpointHead) (CheckpointHead, error) {
	if w.err != nil {
		return CheckpointHead{}, w.err
	}
	if err := w.flush(); err != nil {
		return CheckpointHead{}, err
	}
	head.Gen = w.gen
	head.Volumes = make([]CheckpointVolume, 0, len(w.order))
	for _, id := range w.order {
		head.Volumes = append(head.Volumes, *w.volumes[id])
	}
	if err := w.db.Update(func(tx *Tx) error { return tx.putJSON([]byte(keyHead), head) }); err != nil {
		return CheckpointHead{}, fmt.Errorf("meta: while committing checkpoint %d: %w", w.gen, err)
	}
	if w.prev != 0 {
		if err := w.db.deleteChunks(func(gen uint64) bool { return gen == w.prev }); err != nil {
			return head, err
		}
	}
	return head, nil
}

// DeleteStrayChunks removes the chunks of every checkpoint generation but
// the one in force: what a checkpoint cut short left. Open does it; a store
// recovering on a database that stayed open calls it, since its next
// checkpoint takes the generation the one cut short had.
func (d *DB) DeleteStrayChunks() error { return d.deleteStrayChunks() }

// deleteStrayChunks removes chunks of every generation but the head's.
func (d *DB) deleteStrayChunks() error {
	head, ok, err := d.Checkpoint()
	if err != nil {
		return err
	}
	return d.deleteChunks(func(gen uint64) bool { return !ok || gen != head.Gen })
}

// deleteChunks deletes every checkpoint chunk whose generation matches, in
// transactions of bounded size.
func (d *DB) deleteChunks(match func(gen uint64) bool) error {
	var keys [][]byte
	err := d.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixChunk)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if gen, _, _, ok := parseChunkKey(it.Item().Key()); ok && match(gen) {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: while listing old checkpoint chunks: %w", err)
	}
	const perTxn = 1000
	for len(keys) > 0 {
		batch := keys[:min(perTxn, len(keys))]
		keys = keys[len(batch):]
		err := d.Update(func(tx *Tx) error {
			for _, k := range batch {
				if err := tx.txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("meta: while deleting old checkpoint chunks: %w", err)
		}
	}
	return nil
}
