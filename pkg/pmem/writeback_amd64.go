package pmem

import "unsafe"

// writeBackMethod is the best cache-line write-back instruction this CPU has,
// chosen once at start-up from CPUID.
var writeBackMethod = detectWriteBack()

// cpuid executes CPUID with the given leaf (EAX) and sub-leaf (ECX).
//
//go:noescape
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

// The *Range functions write back every 64-byte cache line that holds a
// byte of [addr, addr+n) and then execute SFENCE, so that the write-backs are
// ordered before any later store. n must be greater than zero.

//go:noescape
func clwbRange(addr unsafe.Pointer, n uintptr)

//go:noescape
func clflushoptRange(addr unsafe.Pointer, n uintptr)

//go:noescape
func clflushRange(addr unsafe.Pointer, n uintptr)

func detectWriteBack() writeBack {
	maxLeaf, _, _, _ := cpuid(0, 0)
	_, _, _, edx1 := cpuid(1, 0)
	var ebx7 uint32
	if maxLeaf >= 7 {
		_, ebx7, _, _ = cpuid(7, 0)
	}
	return chooseWriteBack(edx1&(1<<19) != 0, ebx7&(1<<23) != 0, ebx7&(1<<24) != 0)
}

// chooseWriteBack prefers CLWB (writes back and keeps the line cached), then
// CLFLUSHOPT (weakly ordered flush), then CLFLUSH (serialising flush).
func chooseWriteBack(hasCLFLUSH, hasCLFLUSHOPT, hasCLWB bool) writeBack {
	switch {
	case hasCLWB:
		return writeBackCLWB
	case hasCLFLUSHOPT:
		return writeBackCLFLUSHOPT
	case hasCLFLUSH:
		return writeBackCLFLUSH
	default:
		return writeBackMsync
	}
}

// writeBackRange writes back [addr, addr+n) with method w and fences. It
// returns false if w needs a system call instead (writeBackMsync).
func writeBackRange(w writeBack, addr unsafe.Pointer, n uintptr) bool {
	switch w {
	case writeBackCLWB:
		clwbRange(addr, n)
	case writeBackCLFLUSHOPT:
		clflushoptRange(addr, n)
	case writeBackCLFLUSH:
		clflushRange(addr, n)
	default:
		return false
	}
	return true
}
