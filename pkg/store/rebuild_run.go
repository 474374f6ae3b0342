package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// DefaultRebuildRate is the background rebuild's default bound on its
// drive I/O, in bytes per second (reads and writes summed over the drives).
const DefaultRebuildRate = 200 << 20

// RebuildOptions configure the background rebuild (StartRebuilder).
type RebuildOptions struct {
	// BytesPerSecond bounds the rebuild's drive I/O (reads and writes,
	// summed over the drives) so that client I/O goes on meanwhile. 0:
	// DefaultRebuildRate; negative: unlimited.
	BytesPerSecond int64
	// RetryInterval is the wait before a pass that failed (no space to
	// re-stripe into, data beyond parity, a store error) is tried again.
	// Default 1 minute.
	RetryInterval time.Duration
}

// RebuildStatus is the progress of the store's rebuild: the pass running,
// or else the last one. Byte counts are the pass's drive I/O (reads and
// writes, as the rate limit counts them); BytesTotal is estimated when the
// pass begins.
type RebuildStatus struct {
	// Running: a pass is in progress.
	Running bool
	// Background: StartRebuilder runs passes on its own.
	Background bool
	// Drives are the slots the pass re-protects (failed or rebuilding).
	Drives []int
	// SegmentsDone of SegmentsTotal are finished in this pass;
	// SegmentsSkipped needed nothing (rebuilt by an earlier pass, or with
	// no live block left to move).
	SegmentsDone, SegmentsTotal, SegmentsSkipped int
	BytesDone, BytesTotal                        int64
	// BytesPerSecond is the pass's average rate; ETA the time left at it
	// (0 when unknown or done).
	BytesPerSecond float64
	ETA            time.Duration
	// RateLimit is the bound in bytes per second (0: none).
	RateLimit         int64
	Started, Finished time.Time
	// Passes counts the passes completed since the store opened.
	Passes uint64
	// LastError is why the last pass stopped short ("" if it did not).
	LastError string
}

// pacerFunc waits until n more bytes of rebuild I/O are allowed.
type pacerFunc func(ctx context.Context, n int64) error

func unpaced(ctx context.Context, _ int64) error { return ctx.Err() }

// rebuildState is the Store's part of the rebuild: the progress every pass
// reports, the lock that runs one pass at a time and the background runner.
type rebuildState struct {
	pass     sync.Mutex
	progress rebuildProgress
	runner   atomic.Pointer[rebuilder]
}

// rebuildProgress is the status the passes update.
type rebuildProgress struct {
	mu sync.Mutex
	st RebuildStatus
}

func (p *rebuildProgress) update(fn func(st *RebuildStatus)) {
	p.mu.Lock()
	fn(&p.st)
	p.mu.Unlock()
}

func (p *rebuildProgress) add(n int64) { p.update(func(st *RebuildStatus) { st.BytesDone += n }) }

// RebuildStatus returns the progress of the rebuild running, or of the
// last one.
func (s *Store) RebuildStatus() RebuildStatus {
	p := &s.reb.progress
	p.mu.Lock()
	st := p.st
	p.mu.Unlock()
	st.Drives = append([]int(nil), st.Drives...)
	if r := s.reb.runner.Load(); r != nil {
		st.Background, st.RateLimit = true, max(r.opts.BytesPerSecond, 0)
	}
	end := st.Finished
	if st.Running {
		end = s.clock.Now()
	}
	if secs := end.Sub(st.Started).Seconds(); secs > 0 && !st.Started.IsZero() {
		st.BytesPerSecond = float64(st.BytesDone) / secs
	}
	if st.Running && st.BytesPerSecond > 0 && st.BytesTotal > st.BytesDone {
		st.ETA = time.Duration(float64(st.BytesTotal-st.BytesDone) / st.BytesPerSecond * float64(time.Second))
	}
	return st
}

// rebuildPlan is the work of one pass.
type rebuildPlan struct {
	rebuilding, failed []int
	work               []*segment // ascending IDs
	skipped            int
	bytes              int64
}

// planRebuild lists the slots to re-protect and the segments that need it.
func (s *Store) planRebuild() rebuildPlan {
	var p rebuildPlan
	for i, d := range s.drives {
		switch d.getState() {
		case meta.DriveRebuilding:
			p.rebuilding = append(p.rebuilding, i)
		case meta.DriveFailed:
			p.failed = append(p.failed, i)
		}
	}
	for _, g := range s.segs {
		geom := g.geom.Load()
		switch {
		case geom == nil:
		case usesAny(geom, p.failed):
			if g.getState() == meta.SegmentSealed && g.live.Load() == 0 {
				p.skipped++ // nothing left to move
				continue
			}
			p.work, p.bytes = append(p.work, g), p.bytes+s.evacuateBytes(g, geom)
		case len(s.rebuildTargets(g.id, geom, p.rebuilding)) > 0:
			n := len(s.rebuildTargets(g.id, geom, p.rebuilding))
			p.work = append(p.work, g)
			p.bytes += int64(g.written.Load()) * int64(geom.shape.width()+n) * int64(s.lay.chunkSize)
		case usesAny(geom, p.rebuilding):
			p.skipped++ // rebuilt by an earlier pass
		}
	}
	return p
}

// evacuateBytes estimates the drive I/O of re-striping g: every written
// chunk read, its live blocks written again with their parity.
func (s *Store) evacuateBytes(g *segment, geom *segGeom) int64 {
	sh := geom.shape
	read := int64(g.written.Load()) * int64(sh.width()) * int64(s.lay.chunkSize)
	return read + g.live.Load()*BlockSize*int64(sh.width())/int64(sh.data)
}

// rebuildTargets returns the replacement slots among rebuilding that
// segment id uses and has not been rebuilt onto yet.
func (s *Store) rebuildTargets(id meta.SegmentID, geom *segGeom, rebuilding []int) []int {
	var out []int
	for _, d := range rebuilding {
		slot := s.drives[d]
		slot.mu.Lock()
		done := slot.mu.info.RebuiltSegments
		slot.mu.Unlock()
		if geom.hasDrive(d) && uint32(id) >= done {
			out = append(out, d)
		}
	}
	return out
}

// rebuild runs one pass (Rebuild's contract), pacing its I/O with pace
// (nil: unpaced).
func (s *Store) rebuild(ctx context.Context, pace pacerFunc, progress func(done, total int)) (err error) {
	if err := s.usable(); err != nil {
		return err
	}
	if pace == nil {
		pace = unpaced
	}
	s.reb.pass.Lock()
	defer s.reb.pass.Unlock()
	p := s.planRebuild()
	now := s.clock.Now()
	s.reb.progress.update(func(st *RebuildStatus) {
		*st = RebuildStatus{Running: true, Drives: append(append([]int(nil), p.rebuilding...), p.failed...),
			SegmentsTotal: len(p.work), SegmentsSkipped: p.skipped, BytesTotal: p.bytes, Started: now,
			Passes: st.Passes}
	})
	if len(p.work) > 0 {
		s.log.Info("rebuild started", "rebuilding", p.rebuilding, "failed", p.failed, "segments", len(p.work),
			"skipped", p.skipped, "bytes", p.bytes)
	}
	defer func() { s.endPass(err) }()
	var lost []error
	for i, g := range p.work {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := s.rebuildSegment(ctx, g, &p, pace, len(lost) == 0)
		if errors.Is(err, backend.ErrMedia) {
			lost = append(lost, err)
		} else if err != nil {
			return err
		}
		s.reb.progress.update(func(st *RebuildStatus) { st.SegmentsDone++ })
		if progress != nil {
			progress(i+1, len(p.work))
		}
	}
	if err := errors.Join(lost...); err != nil {
		return err
	}
	return s.finishRebuild(p.rebuilding, p.failed)
}

// rebuildSegment re-stripes g if it uses a failed slot, else rebuilds its
// columns on the replacement drives; with record, it then records g as
// rebuilt on them (a pass that lost data records nothing past the loss).
func (s *Store) rebuildSegment(ctx context.Context, g *segment, p *rebuildPlan, pace pacerFunc, record bool) error {
	geom := g.geom.Load()
	if geom == nil {
		return nil
	}
	if usesAny(geom, p.failed) {
		_, err := s.evacuateSegment(ctx, g, geom, pace)
		return err
	}
	targets := s.rebuildTargets(g.id, geom, p.rebuilding)
	if err := s.rebuildColumns(ctx, g, geom, targets, pace); err != nil {
		return err
	}
	if !record {
		return nil
	}
	for _, d := range targets {
		if err := s.setRebuilt(s.drives[d], uint32(g.id)+1); err != nil {
			return err
		}
	}
	return nil
}

// setRebuilt records that every segment below next is rebuilt onto slot,
// a replacement still rebuilding.
func (s *Store) setRebuilt(slot *driveSlot, next uint32) error {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	info := slot.mu.info
	if info.State != meta.DriveRebuilding || info.RebuiltSegments >= next {
		return nil
	}
	info.RebuiltSegments = next
	if err := s.meta.Update(func(tx *meta.Tx) error { return tx.PutDrive(info) }); err != nil {
		return fmt.Errorf("store: while recording the rebuild of drive %d: %w", slot.index, err)
	}
	slot.mu.info = info
	return nil
}

// endPass records the end of a pass.
func (s *Store) endPass(err error) {
	now := s.clock.Now()
	s.reb.progress.update(func(st *RebuildStatus) {
		st.Running, st.Finished = false, now
		if err != nil {
			st.LastError = err.Error()
			return
		}
		st.Passes++
	})
	st := s.RebuildStatus()
	switch {
	case err != nil:
		s.log.Warn("rebuild stopped", "done", st.SegmentsDone, "of", st.SegmentsTotal, "err", err)
	case st.SegmentsTotal > 0:
		s.log.Info("rebuild completed", "segments", st.SegmentsDone, "skipped", st.SegmentsSkipped,
			"bytes", st.BytesDone, "bytes_per_second", int64(st.BytesPerSecond))
	}
}

// rebuildNeeded reports whether some slot is rebuilding, or failed and not
// evacuated.
func (s *Store) rebuildNeeded() bool {
	for _, d := range s.drives {
		d.mu.Lock()
		info := d.mu.info
		d.mu.Unlock()
		if st := d.getState(); st == meta.DriveRebuilding || (st == meta.DriveFailed && !info.Evacuated) {
			return true
		}
	}
	return false
}

// DriveStatus describes one drive slot for an administrator.
type DriveStatus struct {
	Index int
	UUID  string
	Size  int64
	// State is "healthy", "failed", "rebuilding" (a replacement being
	// filled) or "evacuated" (failed, its data re-striped on the others).
	State                 string
	Reads, Writes, Errors uint64
	// RebuiltSegments, while rebuilding: the segments below it are done.
	RebuiltSegments int
}

// Drives returns the state of every drive slot.
func (s *Store) Drives() []DriveStatus {
	out := make([]DriveStatus, 0, len(s.drives))
	for _, d := range s.drives {
		d.mu.Lock()
		info := d.mu.info
		d.mu.Unlock()
		st := d.getState()
		state := st.String()
		if st == meta.DriveFailed && info.Evacuated {
			state = "evacuated"
		}
		out = append(out, DriveStatus{Index: d.index, UUID: disk.UUID(info.UUID).String(), Size: info.Size,
			State: state, Reads: d.reads.Load(), Writes: d.writes.Load(), Errors: d.errors.Load(),
			RebuiltSegments: int(info.RebuiltSegments)})
	}
	return out
}
