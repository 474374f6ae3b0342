// Package clock is the only source of time for Basalt's storage and replication
// code. Production code receives a Clock and never calls time.Now, time.Sleep
// or time.After directly; tests pass a *Manual so that timeouts, tickers and
// latencies are driven deterministically by Advance.
//
// Two implementations exist: Real, backed by package time, and Manual, whose
// time only moves when a test calls Advance. Manual fires due timers and
// tickers in time order (ties in creation order), so a test run is a function
// of its inputs alone.
package clock

import "time"

// Clock tells the time and makes timers and tickers. Implementations are safe
// for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns the time elapsed since t; it is shorthand for
	// Now().Sub(t).
	Since(t time.Time) time.Duration
	// NewTicker returns a Ticker that delivers the time on its channel every
	// d. Like time.NewTicker it panics when d <= 0, because a non-positive
	// period is a programming error. Slow receivers miss ticks; ticks are
	// never queued.
	NewTicker(d time.Duration) Ticker
	// NewTimer returns a Timer that delivers the time on its channel once,
	// after at least d. A timer with d <= 0 fires at once.
	NewTimer(d time.Duration) Timer
}

// Ticker delivers ticks at a fixed period until stopped.
type Ticker interface {
	// C returns the channel on which ticks are delivered. It is the same
	// channel for the life of the Ticker.
	C() <-chan time.Time
	// Stop turns the ticker off. No tick is delivered after Stop returns
	// (Go 1.23 semantics: a tick that was pending is discarded). Stop does
	// not close the channel.
	Stop()
}

// Timer delivers a single event after a duration, unless stopped.
type Timer interface {
	// C returns the channel on which the event is delivered. It is the same
	// channel for the life of the Timer.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It returns true if the call
	// stopped an active timer and false if the timer had already fired or
	// been stopped. After Stop returns no stale value is received from C.
	Stop() bool
	// Reset makes the timer fire after d, discarding any pending value. It
	// returns true if the timer was active before the call.
	Reset(d time.Duration) bool
}

// Real returns the Clock backed by package time. It is stateless; every call
// returns an equivalent value.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                  { return time.Now() }
func (realClock) Since(t time.Time) time.Duration { return time.Since(t) }

func (realClock) NewTicker(d time.Duration) Ticker {
	return realTicker{ticker: time.NewTicker(d)}
}

func (realClock) NewTimer(d time.Duration) Timer {
	return realTimer{timer: time.NewTimer(d)}
}

type realTicker struct{ ticker *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.ticker.C }
func (t realTicker) Stop()               { t.ticker.Stop() }

type realTimer struct{ timer *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.timer.C }
func (t realTimer) Stop() bool                 { return t.timer.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.timer.Reset(d) }
