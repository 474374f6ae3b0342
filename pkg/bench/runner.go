package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/clock"
)

// Options are the parts of a run that are not the workload.
type Options struct {
	// Clock defaults to clock.Real().
	Clock clock.Clock
	// Verifier is required with Spec.Verify when several runs must share
	// what they know (or a journal); without it a verified run uses a fresh
	// in-memory one.
	Verifier *Verifier
	// Progress, if set, is called about every ProgressEvery (default 200 ms)
	// from Run's goroutine.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// CPUPIDs are processes (the system under test's daemons) whose CPU time
	// over the measured window is divided by the I/Os in the window.
	CPUPIDs []int
}

// Progress is a snapshot of a running workload.
type Progress struct {
	Phase   string        // "ramp", "run" or "once"
	Elapsed time.Duration // since the start
	Total   time.Duration // ramp + runtime (0 for a once-over run)
	Ops     int64         // I/Os completed since the start
	Bytes   int64         // bytes transferred since the start
	Target  int64         // bytes a once-over run must write
	IOPS    float64       // over the last interval
}

// Run drives spec against dev and returns the measured result. It stops
// early, with an error, on the first I/O error or verification failure, or
// when ctx ends.
func Run(ctx context.Context, dev Device, spec Spec, opts Options) (*Result, error) {
	if err := spec.Validate(dev.LBASize(), dev.Size(), dev.MaxTransfer()); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	v, err := runVerifier(dev, &spec, opts.Verifier)
	if err != nil {
		return nil, err
	}
	r := &run{spec: spec, dev: dev, opts: opts, clk: opts.Clock, v: v}
	defer r.release()
	if err := r.open(); err != nil {
		return nil, err
	}
	return r.execute(ctx)
}

func runVerifier(dev Device, spec *Spec, v *Verifier) (*Verifier, error) {
	if !spec.Verify {
		return nil, nil
	}
	if v == nil {
		return NewVerifier(dev.LBASize(), spec.Offset, spec.Size, spec.Seed)
	}
	if !v.covers(dev.LBASize(), spec.Offset, spec.Size) {
		return nil, fmt.Errorf("%w: the verifier does not cover the region [%d, +%d)", ErrInvalidSpec, spec.Offset, spec.Size)
	}
	return v, nil
}

// run is one execution of Run.
type run struct {
	spec Spec
	dev  Device
	opts Options
	clk  clock.Clock
	v    *Verifier
	jobs []*job
	stop atomic.Bool

	start, measureStart, measureEnd time.Time
}

func (r *run) open() error {
	for i := range r.spec.Jobs {
		j, err := newJob(r, i)
		if err != nil {
			return err
		}
		r.jobs = append(r.jobs, j)
	}
	return nil
}

func (r *run) release() {
	for _, j := range r.jobs {
		j.close()
	}
}

// execute starts the jobs, samples CPU and progress, and collects the result.
func (r *run) execute(ctx context.Context) (*Result, error) {
	r.start = r.clk.Now()
	r.measureStart = r.start.Add(r.spec.Ramp)
	r.measureEnd = r.measureStart.Add(r.spec.Runtime)
	if r.spec.Once {
		r.measureStart, r.measureEnd = r.start, r.start.Add(100*365*24*time.Hour)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for _, j := range r.jobs {
		wg.Add(1)
		go func() { defer wg.Done(); j.err = j.loop() }()
	}
	go func() { wg.Wait(); close(done) }()
	cpu, err := r.monitor(ctx, done)
	end := r.clk.Now()
	if r.spec.Once {
		r.measureEnd = end
	}
	if jerr := r.jobErrors(); jerr != nil {
		err = errors.Join(jerr, err)
	}
	res := r.result(end, cpu)
	if r.v != nil && r.v.journal != nil {
		if jerr := r.v.journal.Sync(); jerr != nil {
			err = errors.Join(err, jerr)
		}
	}
	return res, err
}

// monitor reports progress and samples CPU at the window's edges until the
// jobs are done.
func (r *run) monitor(ctx context.Context, done <-chan struct{}) (cpuWindow, error) {
	every := r.opts.ProgressEvery
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	tick := r.clk.NewTicker(every)
	defer tick.Stop()
	var cpu cpuWindow
	var cpuErr error
	var startC, endC <-chan time.Time
	if r.spec.Once {
		cpuErr = cpu.begin(r.opts.CPUPIDs)
	} else {
		startTimer := r.clk.NewTimer(r.spec.Ramp)
		defer startTimer.Stop()
		endTimer := r.clk.NewTimer(r.spec.Ramp + r.spec.Runtime)
		defer endTimer.Stop()
		startC, endC = startTimer.C(), endTimer.C()
	}
	var lastOps int64
	lastT := r.start
	ctxDone := ctx.Done()
	for {
		select {
		case <-done:
			// The jobs stop at the window's end, possibly just before the
			// end timer fires.
			return cpu, errors.Join(cpuErr, cpu.end(r.opts.CPUPIDs))
		case <-ctxDone:
			r.stop.Store(true)
			ctxDone = nil
		case <-startC:
			cpuErr = errors.Join(cpuErr, cpu.begin(r.opts.CPUPIDs))
		case <-endC:
			cpuErr = errors.Join(cpuErr, cpu.end(r.opts.CPUPIDs))
		case now := <-tick.C():
			if r.opts.Progress != nil {
				p := r.progress(now)
				p.IOPS = float64(p.Ops-lastOps) / now.Sub(lastT).Seconds()
				lastOps, lastT = p.Ops, now
				r.opts.Progress(p)
			}
		}
	}
}

func (r *run) progress(now time.Time) Progress {
	p := Progress{Phase: "run", Elapsed: now.Sub(r.start), Total: r.spec.Ramp + r.spec.Runtime}
	switch {
	case r.spec.Once:
		p.Phase, p.Total, p.Target = "once", 0, r.spec.Size
	case now.Before(r.measureStart):
		p.Phase = "ramp"
	}
	for _, j := range r.jobs {
		p.Ops += j.doneOps.Load()
		p.Bytes += j.doneBytes.Load()
	}
	return p
}

func (r *run) jobErrors() error {
	var errs []error
	for _, j := range r.jobs {
		if j.err != nil {
			errs = append(errs, fmt.Errorf("job %d: %w", j.id, j.err))
		}
	}
	return errors.Join(errs...)
}

// result merges the jobs' measurements.
func (r *run) result(end time.Time, cpu cpuWindow) *Result {
	var st [2]opStats
	for _, j := range r.jobs {
		for i := range st {
			st[i].merge(&j.stats[i])
		}
	}
	window := r.measureEnd.Sub(r.measureStart)
	if end.Before(r.measureEnd) {
		window = max(end.Sub(r.measureStart), 0)
	}
	return newResult(r, st, window, cpu)
}
