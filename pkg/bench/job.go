package bench

import (
	"fmt"
	"sync/atomic"
	"time"

	"basalt/pkg/clock"
)

// opStats is what a job measures for one operation inside the window.
type opStats struct {
	ios   int64
	bytes int64
	hist  Histogram
}

func (s *opStats) merge(o *opStats) {
	s.ios += o.ios
	s.bytes += o.bytes
	s.hist.Merge(&o.hist)
}

// job keeps QueueDepth I/Os in flight on its own queue over its share of the
// region. Everything here is owned by the job's goroutine except the
// progress counters.
type job struct {
	id    int
	r     *run
	spec  *Spec
	clk   clock.Clock
	v     *Verifier
	q     Queue
	bufs  *Buffers
	start int64 // share of the region, bytes
	size  int64
	bs    int64

	rng    uint64
	cursor int64 // next sequential offset, relative to start
	busy   []uint64

	slotOp  []Op
	slotOff []int64
	slotGen []uint64
	slotT   []time.Time

	stats     [2]opStats // read, write
	doneOps   atomic.Int64
	doneBytes atomic.Int64
	err       error
}

func newJob(r *run, id int) (*job, error) {
	s := &r.spec
	qd := s.QueueDepth
	start, size := s.share(id)
	j := &job{id: id, r: r, spec: s, clk: r.clk, v: r.v, start: start, size: size, bs: int64(s.BlockSize),
		rng:    s.Seed ^ uint64(id+1)*0xA24BAED4963EE407,
		slotOp: make([]Op, qd), slotOff: make([]int64, qd), slotGen: make([]uint64, qd), slotT: make([]time.Time, qd)}
	if s.Verify {
		j.busy = make([]uint64, (size/j.bs+63)/64)
	}
	var err error
	if j.bufs, err = AllocBuffers(qd, s.BlockSize); err != nil {
		return nil, err
	}
	if !s.Verify {
		for i, b := range j.bufs.Each {
			fillRandom(b, j.rng+uint64(i))
		}
	}
	if j.q, err = r.dev.OpenQueue(qd); err != nil {
		j.bufs.Free()
		return nil, err
	}
	return j, nil
}

func (j *job) close() {
	if j.q != nil {
		j.q.Close()
	}
	j.bufs.Free()
}

// loop is the job's goroutine: fill the queue, then on every wake-up take
// all completions, resubmit the freed slots together and flush once.
func (j *job) loop() error {
	inflight := 0
	var err error
	for slot := range j.spec.QueueDepth {
		ok, perr := j.prepare(slot, j.clk.Now())
		if perr != nil {
			return perr
		}
		if !ok {
			break
		}
		inflight++
	}
	if err = j.send(); err != nil {
		return err
	}
	for inflight > 0 {
		block := true
		for {
			slot, ioErr, ok := j.q.Wait(block)
			if !ok {
				break
			}
			block = false
			inflight--
			now := j.clk.Now()
			if cerr := j.complete(slot, ioErr, now); cerr != nil && err == nil {
				err = cerr
			}
			if err != nil || j.r.stop.Load() || (!j.spec.Once && !now.Before(j.r.measureEnd)) {
				continue
			}
			more, perr := j.prepare(slot, now)
			if perr != nil && err == nil {
				err = perr
			}
			if more {
				inflight++
			}
		}
		if serr := j.send(); serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// send makes the intents of the batch durable (journal) and flushes it.
func (j *job) send() error {
	if j.v != nil && j.v.journal != nil {
		if err := j.v.journal.Sync(); err != nil {
			return err
		}
	}
	return j.q.Flush()
}

func (j *job) next() uint64 { return splitmix(&j.rng) }

// prepare queues the next I/O on slot; ok is false when a once-over run has
// nothing left to write.
func (j *job) prepare(slot int, now time.Time) (ok bool, err error) {
	op := OpWrite
	if j.spec.ReadPct > 0 && int(j.next()%100) < j.spec.ReadPct {
		op = OpRead
	}
	blocks := j.size / j.bs
	var blk int64
	if j.spec.RandomPct > 0 && int(j.next()%100) < j.spec.RandomPct {
		blk = int64(j.next() % uint64(blocks))
	} else {
		if j.spec.Once && j.cursor >= j.size {
			return false, nil
		}
		if j.cursor >= j.size {
			j.cursor = 0
		}
		blk = j.cursor / j.bs
		j.cursor += j.bs
	}
	if j.busy != nil {
		blk = j.claim(blk, blocks)
	}
	off := j.start + blk*j.bs
	buf := j.bufs.Each[slot]
	j.slotOp[slot], j.slotOff[slot] = op, off
	if op == OpWrite && j.v != nil {
		j.slotGen[slot] = j.v.stamp(buf, off)
	}
	j.slotT[slot] = now
	if err := j.q.Queue(slot, op, off, buf); err != nil {
		return false, fmt.Errorf("%w: queueing %s at %d: %w", ErrIO, op, off, err)
	}
	return true, nil
}

// claim marks block blk (or the next free one) in flight: verified I/Os to
// one block never overlap, so every read knows what it must find.
func (j *job) claim(blk, blocks int64) int64 {
	for j.busy[blk/64]&(1<<(blk%64)) != 0 {
		blk = (blk + 1) % blocks
	}
	j.busy[blk/64] |= 1 << (blk % 64)
	return blk
}

// complete accounts one completion and checks what a verified read returned.
func (j *job) complete(slot int, ioErr error, now time.Time) error {
	op, off := j.slotOp[slot], j.slotOff[slot]
	if j.busy != nil {
		blk := (off - j.start) / j.bs
		j.busy[blk/64] &^= 1 << (blk % 64)
	}
	if ioErr != nil {
		return fmt.Errorf("%w: %s of %d bytes at offset %d: %w", ErrIO, op, j.bs, off, ioErr)
	}
	j.doneOps.Add(1)
	j.doneBytes.Add(j.bs)
	if !now.Before(j.r.measureStart) && now.Before(j.r.measureEnd) {
		st := &j.stats[op-1]
		st.ios++
		st.bytes += j.bs
		st.hist.Record(now.Sub(j.slotT[slot]))
	}
	if j.v == nil {
		return nil
	}
	if op == OpWrite {
		j.v.ack(off, int(j.bs), j.slotGen[slot])
		return nil
	}
	return j.v.check(j.bufs.Each[slot], off)
}
