package bench

import (
	"errors"
	"fmt"
	"time"

	"basalt/pkg/nvme/host"
)

// pathRetryInterval is how often I/O waiting for a usable path looks again.
const pathRetryInterval = 100 * time.Millisecond

// nvmeQueue is one job's queue on an NVMeDevice: one reused host.IO per
// slot, submitted in batches (SubmitBatch: one writev per I/O queue), with
// completions through a channel. I/Os that fail with a path error wait in
// retry for a usable path, at most PathTimeout.
type nvmeQueue struct {
	d      *NVMeDevice
	ios    []host.IO
	sentTo []*host.Controller
	since  []time.Time // when the slot's I/O first failed on a path; zero if not
	batch  []*host.IO
	retry  []int
	done   chan *host.IO
	onWire int
}

// OpenQueue implements Device.
func (d *NVMeDevice) OpenQueue(depth int) (Queue, error) {
	q := &nvmeQueue{d: d, ios: make([]host.IO, depth), sentTo: make([]*host.Controller, depth),
		since: make([]time.Time, depth), batch: make([]*host.IO, 0, depth), retry: make([]int, 0, depth),
		done: make(chan *host.IO, depth)}
	for i := range q.ios {
		q.ios[i] = host.IO{NSID: d.cfg.NSID, Tag: i, Done: q.complete}
	}
	return q, nil
}

func (q *nvmeQueue) complete(io *host.IO) { q.done <- io }

// Queue implements Queue.
func (q *nvmeQueue) Queue(slot int, op Op, off int64, buf []byte) error {
	io := &q.ios[slot]
	io.Op = host.OpRead
	if op == OpWrite {
		io.Op = host.OpWrite
	}
	io.SLBA, io.Data = uint64(off)/uint64(q.d.ns.BlockSize), buf
	q.batch = append(q.batch, io)
	return nil
}

// Flush implements Queue.
func (q *nvmeQueue) Flush() error {
	for len(q.batch) > 0 {
		c := q.d.pick(nil)
		if c == nil {
			for _, io := range q.batch {
				q.parkForPath(io.Tag)
			}
			break
		}
		n, err := c.SubmitBatch(q.d.ctx, q.batch)
		for _, io := range q.batch[:n] {
			q.sentTo[io.Tag] = c
		}
		q.onWire += n
		rest := q.batch[n:]
		if err != nil && !host.IsPathError(err) {
			err = fmt.Errorf("submitting a batch: %w", err)
			q.failUnsent(rest, err)
			q.batch = q.batch[:0]
			return err
		}
		q.batch = append(q.batch[:0], rest...)
	}
	clear(q.batch[:cap(q.batch)])
	q.batch = q.batch[:0]
	return nil
}

// failUnsent completes the I/Os a failed batch did not send with err, so
// that Wait returns each of them: their slots are in flight for the caller,
// and a Wait(true) with nothing on the wire would otherwise never return.
// The channel has room: it holds at most depth I/Os and these are not on
// the wire.
func (q *nvmeQueue) failUnsent(ios []*host.IO, err error) {
	for _, io := range ios {
		io.Err = err
		q.since[io.Tag] = time.Time{}
		q.ready(io)
	}
}

func (q *nvmeQueue) parkForPath(slot int) {
	if q.since[slot].IsZero() {
		q.since[slot] = q.d.cfg.Clock.Now()
	}
	q.retry = append(q.retry, slot)
}

// Wait implements Queue.
func (q *nvmeQueue) Wait(block bool) (int, error, bool) {
	for {
		if len(q.retry) > 0 {
			if slot, err, failed := q.resubmit(); failed {
				return slot, err, true
			}
		}
		var io *host.IO
		if q.onWire > 0 && (block || len(q.retry) == 0) {
			if block && len(q.retry) == 0 {
				io = <-q.done
			} else {
				select {
				case io = <-q.done:
				default:
				}
			}
		}
		if io == nil {
			if !block {
				return 0, nil, false
			}
			if len(q.retry) > 0 {
				q.pause()
			}
			continue
		}
		q.onWire--
		if io.Err != nil && host.IsPathError(io.Err) {
			if host.IsANAError(io.Err) {
				q.d.refreshAll()
			}
			q.parkForPath(io.Tag)
			continue
		}
		q.since[io.Tag] = time.Time{}
		return io.Tag, io.Err, true
	}
}

// pause waits pathRetryInterval (or a completion) and re-reads ANA logs.
func (q *nvmeQueue) pause() {
	t := q.d.cfg.Clock.NewTimer(pathRetryInterval)
	defer t.Stop()
	select {
	case io := <-q.done:
		q.onWire--
		if io.Err != nil && host.IsPathError(io.Err) {
			q.parkForPath(io.Tag)
		} else {
			q.since[io.Tag] = time.Time{}
			q.ready(io)
		}
	case <-t.C():
		q.d.refreshAll()
	}
}

// ready puts a completed I/O back for Wait to return (the channel has room:
// it holds at most depth I/Os and this one came out of it).
func (q *nvmeQueue) ready(io *host.IO) {
	q.onWire++
	q.done <- io
}

// resubmit sends the I/Os waiting for a path to a usable one; an I/O whose
// PathTimeout has passed is returned as failed.
func (q *nvmeQueue) resubmit() (slot int, err error, failed bool) {
	now := q.d.cfg.Clock.Now()
	for i := 0; i < len(q.retry); {
		s := q.retry[i]
		if now.Sub(q.since[s]) > q.d.cfg.PathTimeout {
			q.retry = append(q.retry[:i], q.retry[i+1:]...)
			q.since[s] = time.Time{}
			return s, fmt.Errorf("%w for %v: %w", host.ErrNoPath, q.d.cfg.PathTimeout, errNoPathInTime), true
		}
		c := q.d.pick(q.sentTo[s])
		if c == nil {
			return 0, nil, false
		}
		if err := c.Submit(q.d.ctx, &q.ios[s]); err != nil {
			if !host.IsPathError(err) {
				q.retry = append(q.retry[:i], q.retry[i+1:]...)
				return s, err, true
			}
			i++
			continue
		}
		q.sentTo[s] = c
		q.onWire++
		q.retry = append(q.retry[:i], q.retry[i+1:]...)
	}
	return 0, nil, false
}

var errNoPathInTime = errors.New("bench: no usable path")

// Close implements Queue.
func (q *nvmeQueue) Close() error { return nil }
