package store

import (
	"fmt"

	"basalt/pkg/meta"
)

// checkpoint writes every volume's map to the metadata as it stands after
// the stripes applied so far (a consistent cut: only this goroutine changes
// the maps), then frees the segments the new checkpoint lets go.
func (w *writer) checkpoint() error { return w.checkpointWith(nil) }

// checkpointWith is checkpoint with record, when not nil, called with the
// new checkpoint's generation before its head is committed: what record
// writes is in force with the checkpoint or not at all (snapshot.go).
func (w *writer) checkpointWith(record func(gen uint64) error) error {
	s := w.s
	if err := w.rows.sync(); err != nil {
		return err
	}
	cw, err := s.meta.BeginCheckpoint()
	if err != nil {
		return err
	}
	if record != nil {
		if err := record(cw.Gen()); err != nil {
			return err
		}
	}
	for _, v := range s.volumeList() {
		for ci := range v.lmap.chunkCount() {
			data, mapped := v.lmap.snapshotChunk(ci, w.ckptBuf[:0])
			w.ckptBuf = data
			if !mapped {
				continue
			}
			if err := cw.Put(v.info.ID, uint32(ci), data); err != nil {
				return fmt.Errorf("store: while checkpointing %v: %w", v.info.ID, err)
			}
		}
	}
	head, err := cw.Commit(meta.CheckpointHead{Seq: w.applied, BufferSeq: w.appliedBuf, BufferUUID: s.stage.uuid()})
	if err != nil {
		return fmt.Errorf("store: while committing a checkpoint: %w", err)
	}
	stats := s.counters.lifetime()
	if err := s.meta.Update(func(tx *meta.Tx) error { return tx.PutGCStats(stats) }); err != nil {
		return fmt.Errorf("store: while saving GC counters: %w", err)
	}
	w.ckptSeq, w.ckptAt, w.sinceCkpt, w.ckptDue = head.Seq, s.clock.Now(), 0, false
	s.counters.checkpoints.Add(1)
	s.log.Debug("checkpoint", "seq", head.Seq, "gen", head.Gen)
	_, err = w.freeEligible()
	return err
}
