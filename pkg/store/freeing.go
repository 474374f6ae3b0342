package store

import (
	"slices"

	"basalt/pkg/meta"
)

// freeing is a group of segments on their way to the free list. Freeing a
// segment takes three steps, in this order, and only the last lets it be
// reopened:
//
//  1. its free row is queued behind the segment rows made before it
//     (segRows commits rows in order);
//  2. once that row is durable, its range is discarded on the drives, in
//     the background (discard.go). Not before: until the free row, and
//     every row before it, is durable, a crash recovers the segment as
//     sealed, and the relocations that emptied it may sit in a segment
//     whose open row was not yet durable either, so recovery would read the
//     map's old locations, in this segment;
//  3. once the discard is done, the segment joins w.free. A discard still
//     running must not punch a hole in a reopened segment's new stripes.
//
// Before, the writer did all three on its own path: under sustained
// overwrites at 70% fill it spent 45% of its time there (waiting for row
// commits, a synced metadata transaction per free, the discards).
type freeing struct {
	ids    []meta.SegmentID
	ticket uint64        // segRows ticket of the last of their free rows
	done   chan struct{} // closed when the discard is done; nil until it starts
}

// advanceFreeing moves the groups being freed along, oldest first: it
// starts the discard of a group whose rows are durable and puts a group
// whose discard is done on the free list. With wait it returns only once
// every group is free.
func (w *writer) advanceFreeing(wait bool) error {
	if err := w.rows.poll(); err != nil {
		return err
	}
	for len(w.freeing) > 0 {
		f := w.freeing[0]
		if f.done == nil {
			if w.rows.durable < f.ticket {
				if !wait {
					return nil
				}
				if err := w.rows.wait(f.ticket); err != nil {
					return err
				}
			}
			w.startDiscard(f)
		}
		if wait {
			<-f.done
		} else if !isDone(f.done) {
			return nil
		}
		w.freeing[0] = nil
		w.freeing = w.freeing[1:]
		w.free = append(w.free, f.ids...)
		slices.Sort(w.free)
		w.s.counters.freeSegments.Store(int64(len(w.free)))
	}
	return nil
}

// startDiscard discards f's ranges: on the writer goroutine in the
// synchronous test mode, otherwise in the background, waking the writer
// when done.
func (w *writer) startDiscard(f *freeing) {
	f.done = make(chan struct{})
	if w.s.opts.synchronous {
		w.s.discardSegments(f.ids)
		close(f.done)
		return
	}
	go func() {
		defer w.s.wake()
		defer close(f.done)
		w.s.discardSegments(f.ids)
	}()
}

// freeSoon counts the free segments and those on their way.
func (w *writer) freeSoon() int {
	n := len(w.free)
	for _, f := range w.freeing {
		n += len(f.ids)
	}
	return n
}

// awaitFreeing waits until every segment being freed is free, reporting
// whether any was.
func (w *writer) awaitFreeing() (bool, error) {
	if len(w.freeing) == 0 {
		return false, nil
	}
	return true, w.advanceFreeing(true)
}

// waitDiscards waits for the discards started, so that none runs once the
// store closes its drives.
func (w *writer) waitDiscards() {
	for _, f := range w.freeing {
		if f.done != nil {
			<-f.done
		}
	}
}
