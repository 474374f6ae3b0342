package store

import (
	"fmt"

	"basalt/pkg/meta"
)

// segRows commits the writer's segment rows (a segment opened, sealed) to
// the metadata store in the background, in the order the writer made them,
// all rows queued while one commit runs going into the next: one
// transaction, and one sync, for many rows, instead of one per row on the
// writer's path. It belongs to the writer goroutine.
//
// Durability is asked for where it is needed, with a ticket: a segment's
// open row before its first stripe is written (flushStream: recovery looks
// for stripes only in segments the metadata shows open or sealed, and a
// segment whose open row a crash lost is reopened at the same generation,
// so stripes written under the lost open would pass for the new one's),
// and so before their write-buffer records are released; every row before a checkpoint commits (the checkpointed
// map points into them), and a free row before the segment's range is
// discarded (freeing.go). A seal row is never waited for: recovery seals a
// segment it finds open at its last intact stripe, which is what the seal
// row says.
//
// In the synchronous test mode nothing runs in the background: rows are
// committed when a ticket is waited for, so that a simulated crash sees
// them pending.
type segRows struct {
	db          *meta.DB
	synchronous bool

	pending  []meta.SegmentInfo
	queued   uint64 // tickets given: rows queued so far
	durable  uint64 // every row up to this ticket is committed
	inflight *rowCommit
	wake     func() // called when a background commit ends
}

// rowCommit is one transaction of rows in the background.
type rowCommit struct {
	rows []meta.SegmentInfo
	upTo uint64
	done chan struct{}
	err  error
}

// add queues row and returns its ticket. In the background mode a commit
// starts if none is running.
func (r *segRows) add(row meta.SegmentInfo) (uint64, error) {
	r.pending = append(r.pending, row)
	r.queued++
	if r.synchronous {
		return r.queued, nil
	}
	return r.queued, r.poll()
}

// poll takes note of a finished commit and starts the next one if rows are
// waiting. It returns a failed commit's error.
func (r *segRows) poll() error {
	if c := r.inflight; c != nil {
		select {
		case <-c.done:
		default:
			return nil
		}
		r.inflight = nil
		if c.err != nil {
			return c.err
		}
		r.durable = c.upTo
	}
	if len(r.pending) > 0 && !r.synchronous {
		r.start()
	}
	return nil
}

func (r *segRows) start() {
	c := &rowCommit{rows: r.pending, upTo: r.queued, done: make(chan struct{})}
	r.pending = nil
	r.inflight = c
	go func() {
		if r.wake != nil {
			defer r.wake()
		}
		defer close(c.done)
		c.err = commitRows(r.db, c.rows)
	}()
}

// wait returns once the row of ticket, and every row before it, is
// committed.
func (r *segRows) wait(ticket uint64) error {
	for r.durable < ticket {
		if r.synchronous {
			if err := commitRows(r.db, r.pending); err != nil {
				return err
			}
			r.pending, r.durable = r.pending[:0], r.queued
			return nil
		}
		if r.inflight == nil {
			r.start()
		}
		<-r.inflight.done
		if err := r.poll(); err != nil {
			return err
		}
	}
	return nil
}

// quiesce waits for the commit in flight, if any, whatever its outcome.
func (r *segRows) quiesce() {
	if r.inflight != nil {
		<-r.inflight.done
	}
}

// sync returns once every row queued is committed.
func (r *segRows) sync() error { return r.wait(r.queued) }

// commitRows commits rows in order, up to rowsPerCommit per transaction
// (freeing the segments of a deleted volume queues thousands at once).
func commitRows(db *meta.DB, rows []meta.SegmentInfo) error {
	for len(rows) > 0 {
		part := rows[:min(len(rows), rowsPerCommit)]
		rows = rows[len(part):]
		err := db.Update(func(tx *meta.Tx) error {
			for _, row := range part {
				if err := tx.PutSegment(row); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("store: while recording %d segment rows: %w", len(part), err)
		}
	}
	return nil
}

const rowsPerCommit = 256
