package store

import (
	"fmt"
	"sync"
	"time"

	"basalt/pkg/meta"
)

// ScrubOptions configure a Scrubber.
type ScrubOptions struct {
	// Interval: every stripe is scrubbed once per Interval, a pass starting
	// Interval after the previous one completed. 0 disables the schedule.
	Interval time.Duration
	// BytesPerSecond bounds the drive reads of the scrub (summed over the
	// drives), so it does not starve host I/O; 0: unlimited.
	BytesPerSecond int64
	// State keeps the schedule's progress across restarts; nil: memory
	// only (a restart begins a new period).
	State ScrubStateStore
}

// ScrubStateStore persists a Scrubber's state (pkg/node keeps it in a
// file beside the metadata).
type ScrubStateStore interface {
	// LoadScrub returns the saved state; ok false if there is none.
	LoadScrub() (st ScrubState, ok bool, err error)
	// SaveScrub replaces the saved state durably.
	SaveScrub(st ScrubState) error
}

// ScrubCounts count what a scrub found.
type ScrubCounts struct {
	Stripes       uint64 `json:"stripes"`       // stripes checked
	Blocks        uint64 `json:"blocks"`        // blocks read and verified
	Bad           uint64 `json:"bad"`           // blocks found bad on healthy drives
	Repaired      uint64 `json:"repaired"`      // bad blocks rewritten from parity
	Unrecoverable uint64 `json:"unrecoverable"` // stripe rows (or summaries) beyond repair
}

func (c *ScrubCounts) add(sc stripeCheck) {
	c.Stripes++
	c.Blocks += uint64(sc.checked)
	c.Bad += uint64(sc.bad)
	c.Repaired += uint64(sc.repaired)
	c.Unrecoverable += uint64(sc.unrecoverable)
}

// ScrubState is the schedule's persistent state. A pass in progress
// resumes at Cursor, the next segment to scrub, after a restart.
type ScrubState struct {
	// Since is when the schedule began (the first pass is due Interval
	// after it).
	Since time.Time `json:"since"`
	// LastCompleted is when the last pass completed; zero: never.
	LastCompleted time.Time   `json:"last_completed"`
	Last          ScrubCounts `json:"last"` // the last completed pass
	// PassStarted is when the pass in progress began; zero: none.
	PassStarted time.Time   `json:"pass_started"`
	Cursor      int         `json:"cursor"`
	Pass        ScrubCounts `json:"pass"` // the pass in progress, so far
}

// ScrubStatus is what a node reports of its scrub schedule.
type ScrubStatus struct {
	Enabled        bool
	Interval       time.Duration
	BytesPerSecond int64
	InProgress     bool
	Fraction       float64 // of the pass in progress, by segments
	ScrubState
	// NextDue is when the next pass starts (zero while one runs or when
	// disabled).
	NextDue time.Time
	// Total counts every stripe scrubbed since this Scrubber started.
	Total ScrubCounts
	// Passes completed since this Scrubber started.
	Passes uint64
}

// Scrubber scrubs every stripe of a store once per Interval in the
// background, at most BytesPerSecond, one segment after another (doc.go,
// "Scrub"). Its goroutine owns the state; Status reads a copy.
type Scrubber struct {
	s    *Store
	opts ScrubOptions
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	st   ScrubStatus
	once sync.Once
}

// NewScrubber returns the schedule of s, its state loaded from
// opts.State. Start runs it; Close stops it (before closing s).
func NewScrubber(s *Store, opts ScrubOptions) (*Scrubber, error) {
	if opts.Interval < 0 || opts.BytesPerSecond < 0 {
		return nil, fmt.Errorf("%w: scrub interval %v, rate %d", ErrInvalidOptions, opts.Interval, opts.BytesPerSecond)
	}
	sc := &Scrubber{s: s, opts: opts, stop: make(chan struct{}), done: make(chan struct{})}
	sc.st = ScrubStatus{Enabled: opts.Interval > 0, Interval: opts.Interval, BytesPerSecond: opts.BytesPerSecond}
	if opts.State != nil {
		st, ok, err := opts.State.LoadScrub()
		if err != nil {
			return nil, fmt.Errorf("store: loading the scrub state: %w", err)
		}
		if ok {
			sc.st.ScrubState = st
		}
	}
	if sc.st.Since.IsZero() {
		sc.st.Since = s.opts.Clock.Now()
		if opts.State != nil {
			if err := opts.State.SaveScrub(sc.st.ScrubState); err != nil {
				return nil, fmt.Errorf("store: saving the scrub state: %w", err)
			}
		}
	}
	return sc, nil
}

// Start starts the schedule's goroutine; with Interval 0 it does nothing.
func (sc *Scrubber) Start() {
	if !sc.st.Enabled {
		close(sc.done)
		return
	}
	go sc.run()
}

// Close stops the schedule and waits for its goroutine; a pass in
// progress resumes where it stopped at the next Start (with a persistent
// State).
func (sc *Scrubber) Close() {
	sc.once.Do(func() { close(sc.stop) })
	<-sc.done
}

// Status returns a snapshot of the schedule.
func (sc *Scrubber) Status() ScrubStatus {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	st := sc.st
	st.InProgress = !st.PassStarted.IsZero()
	if st.InProgress && len(sc.s.segs) > 0 {
		st.Fraction = float64(st.Cursor) / float64(len(sc.s.segs))
	}
	if st.Enabled && !st.InProgress {
		st.NextDue = sc.dueLocked()
	}
	return st
}

func (sc *Scrubber) dueLocked() time.Time {
	base := sc.st.LastCompleted
	if base.IsZero() {
		base = sc.st.Since
	}
	return base.Add(sc.opts.Interval)
}

func (sc *Scrubber) run() {
	defer close(sc.done)
	clk := sc.s.opts.Clock
	for {
		sc.mu.Lock()
		inPass := !sc.st.PassStarted.IsZero()
		due := sc.dueLocked()
		sc.mu.Unlock()
		if !inPass {
			if !sc.wait(due.Sub(clk.Now())) {
				return
			}
			sc.update(func(st *ScrubState) { st.PassStarted, st.Cursor, st.Pass = clk.Now(), 0, ScrubCounts{} })
			sc.s.log.Info("scrub pass started", "segments", len(sc.s.segs), "rate_bytes_per_s", sc.opts.BytesPerSecond)
		} else {
			sc.s.log.Info("scrub pass resumed", "segment", sc.Status().Cursor, "of", len(sc.s.segs))
		}
		if !sc.pass() {
			return
		}
	}
}

// pass scrubs the segments from the cursor on; false if stopped.
func (sc *Scrubber) pass() bool {
	for {
		sc.mu.Lock()
		id := sc.st.Cursor
		sc.mu.Unlock()
		if id >= len(sc.s.segs) {
			break
		}
		if !sc.scrubSegment(meta.SegmentID(id)) {
			return false
		}
		sc.update(func(st *ScrubState) { st.Cursor = id + 1 })
	}
	now := sc.s.opts.Clock.Now()
	var st ScrubState
	sc.update(func(s *ScrubState) {
		s.LastCompleted, s.Last, s.PassStarted, s.Cursor, s.Pass = now, s.Pass, time.Time{}, 0, ScrubCounts{}
		st = *s
	})
	sc.mu.Lock()
	sc.st.Passes++
	sc.mu.Unlock()
	log := sc.s.log.Info
	if st.Last.Unrecoverable > 0 {
		log = sc.s.log.Error
	}
	log("scrub pass completed", "stripes", st.Last.Stripes, "blocks", st.Last.Blocks, "bad", st.Last.Bad,
		"repaired", st.Last.Repaired, "unrecoverable", st.Last.Unrecoverable)
	return true
}

// scrubSegment scrubs the written stripes of segment id one by one (each
// pinned while it is read), pacing the reads; false if stopped.
func (sc *Scrubber) scrubSegment(id meta.SegmentID) bool {
	s := sc.s
	g := s.segs[id]
	geom := g.geom.Load()
	if geom == nil || g.getState() == meta.SegmentFree {
		return true
	}
	var sum summary
	for j := range int(g.written.Load()) {
		if s.usable() != nil {
			return false
		}
		if !s.pin(id, geom.gen) {
			return true // freed or reopened meanwhile: nothing of this life left
		}
		var res stripeCheck
		if err := s.readSummary(id, geom, j, &sum); err != nil {
			res.unrecoverable = 1
			s.log.Error("scrub: no intact summary", "segment", id, "stripe", j, "err", err)
		} else {
			res = s.checkStripe(id, geom, j, &sum, true /* repair */)
		}
		s.unpin(id)
		s.counters.scrubbed.Add(uint64(res.checked))
		s.counters.repairs.Add(uint64(res.repaired))
		if res.bad > 0 || res.unrecoverable > 0 {
			s.log.Warn("scrub found bad blocks", "segment", id, "stripe", j, "bad", res.bad,
				"repaired", res.repaired, "unrecoverable_rows", res.unrecoverable)
		}
		sc.mu.Lock()
		sc.st.Pass.add(res)
		sc.st.Total.add(res)
		sc.mu.Unlock()
		if !sc.pace(int64(geom.shape.width()) * int64(s.lay.chunkSize)) {
			return false
		}
	}
	return true
}

// pace waits as long as reading n bytes takes at BytesPerSecond; false if
// stopped meanwhile.
func (sc *Scrubber) pace(n int64) bool {
	if sc.opts.BytesPerSecond <= 0 {
		select {
		case <-sc.stop:
			return false
		default:
			return true
		}
	}
	return sc.wait(time.Duration(float64(n) / float64(sc.opts.BytesPerSecond) * float64(time.Second)))
}

// wait waits d on the store's clock; false if stopped first.
func (sc *Scrubber) wait(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-sc.stop:
			return false
		default:
			return true
		}
	}
	t := sc.s.opts.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-sc.stop:
		return false
	}
}

// update changes the state and saves it (a failed save is logged: the
// schedule goes on, and a restart may repeat some work).
func (sc *Scrubber) update(fn func(*ScrubState)) {
	sc.mu.Lock()
	fn(&sc.st.ScrubState)
	st := sc.st.ScrubState
	sc.mu.Unlock()
	if sc.opts.State != nil {
		if err := sc.opts.State.SaveScrub(st); err != nil {
			sc.s.log.Warn("scrub: could not save the schedule's state", "err", err)
		}
	}
}
