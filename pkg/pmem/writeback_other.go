//go:build !amd64

package pmem

import "unsafe"

// writeBackMethod is writeBackMsync on architectures without the assembly:
// ModeDAX persists with msync, which on a DAX file writes back the CPU caches
// in the kernel.
var writeBackMethod = writeBackMsync

func writeBackRange(w writeBack, addr unsafe.Pointer, n uintptr) bool { return false }
