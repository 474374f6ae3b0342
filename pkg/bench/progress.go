package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// ProgressReporter renders Progress snapshots: a progress bar on a
// terminal, else a plain line every LineEvery.
type ProgressReporter struct {
	w         io.Writer
	bar       *progressbar.ProgressBar
	label     string
	tty       bool
	lineEvery time.Duration
	lastLine  time.Duration
	once      bool
}

// NewProgressReporter returns a reporter for one run named label; tty
// selects the bar, else lines every lineEvery.
func NewProgressReporter(w io.Writer, label string, tty bool, lineEvery time.Duration) *ProgressReporter {
	return &ProgressReporter{w: w, label: label, tty: tty, lineEvery: lineEvery}
}

// Update renders p.
func (r *ProgressReporter) Update(p Progress) {
	if !r.tty {
		if p.Elapsed-r.lastLine >= r.lineEvery {
			r.lastLine = p.Elapsed
			fmt.Fprintln(r.w, r.line(p))
		}
		return
	}
	if r.bar == nil {
		r.start(p)
	}
	r.bar.Describe(r.describe(p))
	if r.once {
		r.bar.Set64(p.Bytes) //nolint:errcheck // rendering only
	} else {
		r.bar.Set64(p.Elapsed.Milliseconds()) //nolint:errcheck
	}
}

func (r *ProgressReporter) start(p Progress) {
	r.once = p.Phase == "once"
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(r.w), progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100 * time.Millisecond), progressbar.OptionClearOnFinish(),
		progressbar.OptionSetPredictTime(r.once), progressbar.OptionShowElapsedTimeOnFinish(),
	}
	max := p.Total.Milliseconds()
	if r.once {
		max = p.Target
		opts = append(opts, progressbar.OptionShowBytes(true))
	}
	r.bar = progressbar.NewOptions64(max, opts...)
}

func (r *ProgressReporter) describe(p Progress) string {
	return fmt.Sprintf("%-10s %-4s %9s IOPS", r.label, p.Phase, thousands(p.IOPS))
}

func (r *ProgressReporter) line(p Progress) string {
	if p.Phase == "once" {
		return fmt.Sprintf("%s: %d of %d MiB written, %s IOPS", r.label, p.Bytes>>20, p.Target>>20, thousands(p.IOPS))
	}
	return fmt.Sprintf("%s: %s %.0f/%.0f s, %s IOPS", r.label, p.Phase, p.Elapsed.Seconds(), p.Total.Seconds(), thousands(p.IOPS))
}

// Finish clears the bar.
func (r *ProgressReporter) Finish() {
	if r.bar != nil {
		r.bar.Finish() //nolint:errcheck
		r.bar.Clear()  //nolint:errcheck
	}
}
