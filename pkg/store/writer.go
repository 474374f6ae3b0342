package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"basalt/cache"
	"basalt/pkg/backend"
	"basalt/pkg/compress"
	"basalt/pkg/meta"
)

// errNoSegment: no free segment for the stream now; the cleaner must run.
var errNoSegment = errors.New("store: no free segment")

type cmdKind uint8

const (
	cmdFlush      cmdKind = iota + 1 // destage everything, padding, and reply
	cmdDropVolume                    // a deleted volume's map entries stop counting
	cmdEvacuate                      // relocate every live block of a segment
	cmdCheckpoint                    // take a checkpoint now
	cmdGrowVolume                    // grow a volume's map to blocks LBAs
	cmdSnapshot                      // freeze a volume's map as a snapshot (snapshot.go)
	cmdClone                         // a new volume sharing a snapshot's map
	cmdRollback                      // a volume's map becomes a share of a snapshot's
)

// command is a request to the writer goroutine.
type command struct {
	kind   cmdKind
	vol    *volume
	seg    meta.SegmentID
	blocks uint64     // cmdGrowVolume
	fam    *familyCmd // cmdSnapshot, cmdClone, cmdRollback
	reply  chan error // capacity 1
}

// call sends c to the writer and waits for its reply.
func (s *Store) call(ctx context.Context, c command) error {
	c.reply = make(chan error, 1)
	if s.opts.synchronous {
		s.w.handle(c)
		return <-c.reply
	}
	select {
	case s.cmds <- c:
	case <-s.w.done:
		return s.stoppedError()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.reply:
		return err
	case <-s.w.done:
		return s.stoppedError()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) stoppedError() error {
	if err := s.Err(); err != nil {
		return err
	}
	return ErrFailed
}

// wake tells the writer there is new work, without blocking.
func (s *Store) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// writer is the one goroutine that changes the maps, the segment table and
// the drives' data region: it destages the write buffer, cleans segments,
// takes checkpoints and frees segments. Everything in it belongs to it
// alone.
type writer struct {
	s        *Store
	host, gc *stream

	// Destage position. Invariant: released <= lastComplete < nextPack.
	nextPack     cache.Seq // next write-buffer record to pack
	packIndex    int       // blocks of record nextPack already looked at
	lastComplete cache.Seq // every record <= this is in a stripe or overwritten
	released     cache.Seq // every record <= this is released

	// Stripe sequence. Invariant: applied <= durable < nextSeq, and between
	// batches applied == durable == nextSeq-1.
	nextSeq    uint64
	durable    uint64
	applied    uint64
	appliedBuf uint64 // bufferSeq of the last applied host stripe

	free       []meta.SegmentID // free segments, ascending
	freeing    []*freeing       // segments on their way to free, oldest first
	gcActive   bool             // between the low and high water marks
	ckptSeq    uint64           // sequence of the checkpoint in force
	ckptAt     time.Time
	ckptDue    bool
	sinceCkpt  int // stripes applied since the checkpoint
	lastInput  time.Time
	seenInput  cache.Seq
	onTick     bool // the step runs on the ticker: every full stripe goes out
	driveEpoch uint64
	rateAt     time.Time
	rateBase   uint64
	failed     error
	sealBuf    []byte   // one slot: an encrypted block on its way into a stripe (cipher.go)
	chunkBufs  [][]byte // the cleaner's chunk buffers
	// flights are the batches being written, of both streams, in the
	// order they were flushed (their stripes' sequence order).
	flights   []*flight
	gcRead    readAhead
	gcNext    *segment // the victim after the one being cleaned, read ahead
	rows      segRows  // segment rows on their way to the metadata
	ckptBuf   []byte
	comp      *compress.Compressor // compresses blocks as they are packed
	compBuf   []byte
	unpackBuf []byte

	stop chan struct{}
	done chan struct{}
	err  error // the shutdown result
}

func newWriter(s *Store) *writer {
	w := s.w
	if w == nil {
		w = &writer{s: s}
	}
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	w.rows.db, w.rows.synchronous, w.rows.wake = s.meta, s.opts.synchronous, s.wake
	w.host, w.gc = newStream(s, streamHost), newStream(s, streamGC)
	w.ckptAt, w.lastInput, w.rateAt = s.clock.Now(), s.clock.Now(), s.clock.Now()
	w.driveEpoch = s.driveEpoch.Load()
	return w
}

// run is the writer's loop: work until nothing is left, then wait for a
// wake-up, a command, a tick or the stop signal.
func (w *writer) run() {
	defer close(w.done)
	ticker := w.s.clock.NewTicker(w.s.opts.TickInterval)
	defer ticker.Stop()
	for {
		w.work()
		select {
		case <-w.stop:
			w.err = w.finish()
			w.waitDiscards()
			w.gcRead.wait()
			return
		case c := <-w.s.cmds:
			w.handle(c)
		case <-w.s.kick:
		case <-w.flightDone():
			if err := w.complete(); err != nil {
				w.setFailed(err)
			}
		case <-ticker.C():
			w.tick()
		}
	}
}

// shutdown stops the writer after a final destage and checkpoint.
func (w *writer) shutdown() error {
	if w.s.opts.synchronous {
		return w.finish()
	}
	close(w.stop)
	<-w.done
	return w.err
}

// work does destage, cleaning and checkpoint work until none is left or a
// budget is spent, checking for commands between steps.
func (w *writer) work() {
	for range 64 {
		if w.failed != nil {
			return
		}
		progress, err := w.step(false /* pad */)
		if err != nil {
			w.setFailed(err)
			return
		}
		select {
		case c := <-w.s.cmds:
			w.handle(c)
			continue
		default:
		}
		if !progress {
			return
		}
	}
	w.s.wake() // budget spent: come back after the select
}

// step does one round of work. pad forces partial stripes out.
func (w *writer) step(pad bool) (bool, error) {
	progress := false
	for fl := w.oldest(); fl != nil && isDone(fl.done); fl = w.oldest() {
		if err := w.complete(); err != nil {
			return false, err
		}
		progress = true
	}
	if err := w.advanceFreeing(false); err != nil {
		return false, err
	}
	if epoch := w.s.driveEpoch.Load(); epoch != w.driveEpoch {
		w.driveEpoch = epoch
		if err := w.retireDegraded(); err != nil {
			return false, err
		}
	}
	if did, err := w.clean(); err != nil {
		return false, err
	} else if did {
		progress = true
	}
	packed, err := w.pack()
	if err != nil && !errors.Is(err, errNoSegment) {
		return false, err
	}
	progress = progress || packed
	pad = pad || w.bufferHigh()
	if wrote, err := w.destage(pad); err != nil {
		return false, err
	} else if wrote {
		progress = true
	}
	if w.ckptDue || w.sinceCkpt >= w.s.opts.CheckpointStripes {
		if err := w.checkpoint(); err != nil {
			return false, err
		}
	}
	return progress, nil
}

// destage writes the host stream's full stripes (and, with pad, its partial
// one) once the batch is full, or once everything published is packed, no
// batch is in flight (while one is, the next keeps filling) and either
// FlushStripes are full or the ticker runs the step; and it releases buffer
// records that need no stripe.
func (w *writer) destage(pad bool) (bool, error) {
	st := w.host
	caughtUp := w.nextPack > w.s.pub.published() && st.inflight == 0
	closed := st.closedStripes()
	ready := caughtUp && closed > 0 && (closed >= w.s.opts.FlushStripes || w.onTick)
	wrote := false
	if st.batchFull() || ready || (pad && !st.empty()) {
		if err := w.flushStream(st, pad); err != nil {
			return false, err
		}
		wrote = true
	}
	if st.settled() && w.lastComplete > w.released {
		if err := w.release(w.lastComplete); err != nil {
			return false, err
		}
	}
	return wrote, nil
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// bufferHigh reports whether the write buffer is fuller than the high water
// mark, when partial stripes are padded so that it drains.
func (w *writer) bufferHigh() bool {
	u := w.s.stage.usage()
	return float64(u.used) > w.s.opts.BufferHighWater*float64(u.size)
}

// tick runs on the ticker: idle padding, time-based checkpoints, the
// destage rate.
func (w *writer) tick() {
	if w.failed != nil {
		return
	}
	now := w.s.clock.Now()
	if last := w.s.stage.usage().last; last != w.seenInput {
		w.seenInput, w.lastInput = last, now
	}
	pad := !w.host.empty() && now.Sub(w.lastInput) >= w.s.opts.PartialStripeDelay
	if now.Sub(w.ckptAt) >= w.s.opts.CheckpointInterval && w.sinceCkpt > 0 {
		w.ckptDue = true
	}
	if elapsed := now.Sub(w.rateAt); elapsed >= time.Second {
		destaged := w.s.counters.destagedBlocks.Load()
		w.s.counters.destageRate.Store(uint64(float64(destaged-w.rateBase) / elapsed.Seconds()))
		w.rateAt, w.rateBase = now, destaged
	}
	w.onTick = true
	_, err := w.step(pad)
	w.onTick = false
	if err != nil {
		w.setFailed(err)
	}
}

// handle serves one command.
func (w *writer) handle(c command) {
	if w.failed != nil {
		c.reply <- w.failed
		return
	}
	var err error
	switch c.kind {
	case cmdFlush:
		err = w.drain()
	case cmdDropVolume:
		w.dropVolume(c.vol)
	case cmdEvacuate:
		err = w.evacuate(c.seg)
	case cmdCheckpoint:
		err = w.checkpoint()
	case cmdGrowVolume:
		c.vol.lmap.grow(c.blocks)
	case cmdSnapshot, cmdClone, cmdRollback:
		err = w.handleFamily(c)
	}
	if err != nil && !errors.Is(err, errNoSegment) && !errors.Is(err, backend.ErrMedia) &&
		!errors.Is(err, backend.ErrNoSpace) && !refused(err) {
		w.setFailed(err)
	}
	c.reply <- err
}

// drain packs and writes everything published, padding the last stripe.
// When the host stream has no segment, it runs the cleaner first; if that
// frees nothing either, the store is full.
func (w *writer) drain() error { return w.drainTo(0) }

// drainTo is drain up to record upTo (0: everything published): it packs
// and writes until every record up to upTo is in a stripe, not chasing the
// records published meanwhile (a snapshot's cut).
func (w *writer) drainTo(upTo cache.Seq) error {
	// cleaned counts cleaner rounds since the host stream last packed: more
	// than a few per segment means cleaning only moves stripes around (it
	// pads, so relocating can use up what it frees), and drain gives up
	// instead of looping for ever.
	for stuck, cleaned := 0, 0; ; {
		_, err := w.pack()
		if errors.Is(err, errNoSegment) {
			waited, err := w.awaitFreeing()
			if err != nil {
				return err
			}
			if waited {
				continue
			}
			did, err := w.cleanNow(true /* pad */)
			if err != nil {
				return err
			}
			if did {
				stuck = 0
			} else if stuck++; stuck > 3 {
				return fmt.Errorf("%w: no segment free for destaging and nothing to clean", backend.ErrNoSpace)
			}
			if cleaned++; cleaned > 4*len(w.s.segs) {
				return fmt.Errorf("%w: %d cleaner rounds freed no segment for destaging", backend.ErrNoSpace, cleaned-1)
			}
			continue
		}
		cleaned = 0
		if err != nil {
			return err
		}
		target := upTo
		if target == 0 {
			target = w.s.pub.published()
		}
		caughtUp := w.nextPack > target
		if err := w.flushStream(w.host, caughtUp /* pad only the last stripe */); err != nil {
			return err
		}
		if caughtUp {
			break
		}
	}
	if err := w.completeAll(); err != nil {
		return err
	}
	if w.lastComplete > w.released {
		return w.release(w.lastComplete)
	}
	return nil
}

// finish is the clean shutdown: drain, write the cleaner's partial stripe,
// checkpoint. A writer that has failed, or fails here, returns the failure
// once its goroutines are done (quiesce).
func (w *writer) finish() (err error) {
	defer func() {
		if err != nil {
			w.quiesce()
		}
	}()
	if w.failed != nil {
		return w.failed
	}
	err = w.drain()
	if err == nil {
		err = w.flushStream(w.gc, true /* pad */)
	}
	if err == nil {
		err = w.completeAll()
	}
	if err == nil {
		err = w.rows.sync()
	}
	if err == nil && !w.s.opts.noCloseCheckpoint {
		err = w.checkpoint()
	}
	if err == nil {
		_, err = w.awaitFreeing()
	}
	if err != nil {
		w.setFailed(err)
	}
	return err
}

// quiesce waits for the goroutines the writer started that may still write
// to the drives or the metadata: the batches in flight (a failed write or
// sync also records the drive's failure in the metadata) and the segment
// rows being committed. A failed writer stops without completing them, and
// Close must not return while they run: a store opened next on the same
// drives and metadata would have its state changed behind its back.
func (w *writer) quiesce() {
	for _, fl := range w.flights {
		<-fl.done
	}
	w.rows.quiesce()
}

// setFailed stops destaging for good and tells the stager (stager.fail):
// the write buffer is closed, so that writes waiting for space in it fail
// instead of waiting forever (their data would never be destaged), and
// what it holds stays there for the next Open; staged floors stop.
func (w *writer) setFailed(err error) {
	if w.failed == nil {
		w.failed = fmt.Errorf("%w: %w", ErrFailed, err)
		w.s.fail(err)
		w.s.stage.fail()
	}
}

// release releases staged records up to seq.
func (w *writer) release(seq cache.Seq) error {
	if err := w.s.stage.release(seq); err != nil {
		return err
	}
	w.released = seq
	return nil
}

// dropVolume stops counting a deleted volume's blocks.
func (w *writer) dropVolume(v *volume) {
	v.lmap.forEach(func(lba uint64, e entry) { w.account(v, lba, e, 0) })
	w.leaveFamily(v)
	w.ckptDue = true
}

// account records that v's entry for lba changed from old to new (v's map
// already holds new): v's mapped count follows, and a block's live count
// (and the store's mapped blocks) change only when no other member of v's
// family maps it at lba, so a block shared with a snapshot or clone counts
// once. v == nil is a relocation: the same maps point at new instead of
// old, and only the segments' live counts move.
func (w *writer) account(v *volume, lba uint64, old, new entry) {
	c := &w.s.counters
	if v == nil {
		w.s.segs[w.s.lay.segmentOf(old.pbn())].live.Add(-1)
		w.s.segs[w.s.lay.segmentOf(new.pbn())].live.Add(1)
		return
	}
	if old.mapped() {
		v.mapped.Add(-1)
		if !v.sharedAt(lba, old) {
			w.s.segs[w.s.lay.segmentOf(old.pbn())].live.Add(-1)
			c.mappedBlocks.Add(-1)
		}
	}
	if new.mapped() {
		v.mapped.Add(1)
		if !v.sharedAt(lba, new) {
			w.s.segs[w.s.lay.segmentOf(new.pbn())].live.Add(1)
			c.mappedBlocks.Add(1)
		}
	}
}
