//go:build linux

package timerslack

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Get returns the calling thread's timer slack.
func Get() (time.Duration, error) {
	r, _, errno := unix.Syscall(unix.SYS_PRCTL, unix.PR_GET_TIMERSLACK, 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("%w: PR_GET_TIMERSLACK: %w", ErrUnsupported, errno)
	}
	return time.Duration(r), nil
}

// reexec sets slack on a locked thread and executes /proc/self/exe from it.
func reexec(slack time.Duration) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0); err != nil {
		return fmt.Errorf("%w: PR_SET_TIMERSLACK %v: %w", ErrUnsupported, slack, err)
	}
	env := append(os.Environ(), envMarker+"="+strconv.FormatInt(int64(slack), 10))
	err := syscall.Exec("/proc/self/exe", os.Args, env)
	// Still here: the exec failed. Put the thread back as it was; the rest
	// of the process never had the new slack.
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0)
	return fmt.Errorf("timerslack: executing the program again: %w", err)
}
