package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/clock"
)

// rebuilder runs rebuild passes in the background: one when it starts if a
// slot needs it (a restart that finds a failed or rebuilding slot), one
// after every drive failure and replacement (a pass in progress is
// stopped and planned again), and again RetryInterval after a pass that
// failed. Its passes are paced at RebuildOptions.BytesPerSecond on the
// store's clock.
type rebuilder struct {
	s     *Store
	opts  RebuildOptions
	pacer pacer
	kick  chan struct{} // capacity 1
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	mu     sync.Mutex
	cancel context.CancelFunc // of the pass in progress, or nil
}

// StartRebuilder starts the store's background rebuild. Close stops it
// (a pass in progress resumes at the next start: what it finished stays
// done). It fails if one was started already or with invalid options.
func (s *Store) StartRebuilder(opts RebuildOptions) error {
	if err := s.usable(); err != nil {
		return err
	}
	if opts.BytesPerSecond == 0 {
		opts.BytesPerSecond = DefaultRebuildRate
	}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = time.Minute
	}
	if opts.RetryInterval < 0 {
		return fmt.Errorf("%w: rebuild retry interval %v", ErrInvalidOptions, opts.RetryInterval)
	}
	r := &rebuilder{s: s, opts: opts, kick: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{})}
	r.pacer = pacer{clock: s.clock, rate: opts.BytesPerSecond}
	if !s.reb.runner.CompareAndSwap(nil, r) {
		return fmt.Errorf("%w: the background rebuild runs already", ErrInvalidOptions)
	}
	go r.run()
	return nil
}

// kickRebuild tells the background rebuild that the drives changed: a
// pass in progress stops and the next one plans again.
func (s *Store) kickRebuild() {
	r := s.reb.runner.Load()
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.cancel != nil {
		r.cancel()
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// stopRebuilder stops the background rebuild, if any, and waits for it.
func (s *Store) stopRebuilder() {
	r := s.reb.runner.Load()
	if r == nil {
		return
	}
	r.once.Do(func() {
		close(r.stop)
		r.mu.Lock()
		if r.cancel != nil {
			r.cancel()
		}
		r.mu.Unlock()
	})
	<-r.done
}

func (r *rebuilder) run() {
	defer close(r.done)
	for {
		if !r.s.rebuildNeeded() {
			if !r.wait(nil) {
				return
			}
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		r.mu.Lock()
		r.cancel = cancel
		r.mu.Unlock()
		select {
		case <-r.kick: // this pass plans after it
		default:
		}
		err := r.s.rebuild(ctx, r.pacer.pace, nil)
		r.mu.Lock()
		r.cancel = nil
		r.mu.Unlock()
		cancel()
		if err == nil || ctx.Err() != nil { // done, or stopped to plan again
			if r.stopped() {
				return
			}
			continue
		}
		r.s.log.Warn("rebuild failed; retrying later", "retry_in", r.opts.RetryInterval, "err", err)
		t := r.s.clock.NewTimer(r.opts.RetryInterval)
		ok := r.wait(t.C())
		t.Stop()
		if !ok {
			return
		}
	}
}

// wait waits for a kick or for timer (nil: none); false once stopped.
func (r *rebuilder) wait(timer <-chan time.Time) bool {
	select {
	case <-r.kick:
	case <-timer:
	case <-r.stop:
		return false
	}
	return true
}

func (r *rebuilder) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// pacer spaces I/O to rate bytes per second on clock: an amount of I/O is
// charged after it is allowed, and the next waits until the charge is paid
// (no burst is saved up while idle). One goroutine uses it at a time.
type pacer struct {
	clock clock.Clock
	rate  int64 // bytes per second; <= 0: unlimited
	next  time.Time
	// waits counts the waits, so that a test can tell the pacer is blocked.
	waits atomic.Int64
}

// pace waits until the I/O charged before is paid for, then charges n.
func (p *pacer) pace(ctx context.Context, n int64) error {
	if p.rate <= 0 {
		return ctx.Err()
	}
	now := p.clock.Now()
	if p.next.Before(now) {
		p.next = now
	}
	wait := p.next.Sub(now)
	p.next = p.next.Add(time.Duration(float64(n) / float64(p.rate) * float64(time.Second)))
	if wait <= 0 {
		return ctx.Err()
	}
	p.waits.Add(1)
	t := p.clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
