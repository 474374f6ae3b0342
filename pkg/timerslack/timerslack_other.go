//go:build !linux

package timerslack

import "time"

// Get returns ErrUnsupported: timer slack is a Linux attribute.
func Get() (time.Duration, error) { return 0, ErrUnsupported }

func reexec(time.Duration) error { return ErrUnsupported }
