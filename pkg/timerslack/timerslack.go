// Package timerslack sets the Linux timer slack of the whole process: how
// late the kernel may fire a thread's timers (nanosleep, futex and epoll
// timeouts) so that it can coalesce their wake-ups.
//
// Why a storage daemon cares: the Go runtime's monitor thread (sysmon) sleeps
// 20 µs between rounds while the process keeps going idle and busy again, as
// a node serving I/O does thousands of times a second. Under the kernel's
// default slack of 50 µs that is up to ~14,000 timer wake-ups a second per
// process, and on a virtual machine every one costs a timer reprogramming and
// a context switch. A slack of a millisecond lets those rounds run about a
// millisecond apart: the monitor's duties (taking a processor back from a
// thread blocked in a system call, preempting a goroutine after 10 ms) are
// all measured in milliseconds anyway. Timers of the program itself
// (time.Sleep, tickers) may fire up to the slack late.
//
// The slack is a per-thread attribute that a new thread inherits from the
// thread that creates it, and the runtime starts its threads before main
// runs; an unprivileged process can only set its calling thread's. So
// [Ensure] sets it on its own thread and executes the program again from that
// thread: execve keeps the slack, and every thread of the new image inherits
// it. The process keeps its PID, arguments and environment.
//
// Linux only: elsewhere Get and Ensure return ErrUnsupported.
package timerslack

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// envMarker is set in the environment of the re-executed image so that a
// kernel that does not keep the slack across execve cannot cause a loop.
const envMarker = "BASALT_TIMER_SLACK_EXEC"

// ErrUnsupported: the kernel refused to set or report the timer slack.
var ErrUnsupported = errors.New("timerslack: not supported")

// Ensure makes slack the timer slack of every thread of the process. If the
// calling thread already has it (the process was executed again by an earlier
// Ensure, or started by a parent with that slack) it returns nil at once.
// Otherwise it executes the program again with the slack set and does not
// return, unless that fails: then it returns the error and the process goes
// on with the slack it had. slack must be positive. Call it first thing in
// main, before any goroutine or file is opened: descriptors without
// close-on-exec would survive into the new image.
func Ensure(slack time.Duration) error {
	if slack <= 0 {
		return fmt.Errorf("timerslack: slack %v is not positive", slack)
	}
	cur, err := Get()
	if err != nil {
		return err
	}
	if cur == slack {
		return os.Unsetenv(envMarker)
	}
	if os.Getenv(envMarker) != "" {
		_ = os.Unsetenv(envMarker)
		return fmt.Errorf("%w: the slack is %v after executing again, not %v", ErrUnsupported, cur, slack)
	}
	return reexec(slack)
}
