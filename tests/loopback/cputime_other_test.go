//go:build !unix

package loopback

import "time"

// processCPU returns 0: the CPU time is not read on this system.
func processCPU() time.Duration { return 0 }
