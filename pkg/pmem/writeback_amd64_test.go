package pmem

import (
	"testing"
	"unsafe"
)

func TestChooseWriteBackPrefersCLWB(t *testing.T) {
	tests := []struct {
		clflush, clflushopt, clwb bool
		want                      writeBack
	}{
		{true, true, true, writeBackCLWB},
		{true, true, false, writeBackCLFLUSHOPT},
		{true, false, false, writeBackCLFLUSH},
		{false, false, false, writeBackMsync},
		{false, false, true, writeBackCLWB},
	}
	for _, tt := range tests {
		if got := chooseWriteBack(tt.clflush, tt.clflushopt, tt.clwb); got != tt.want {
			t.Errorf("chooseWriteBack(%v, %v, %v) = %v, want %v", tt.clflush, tt.clflushopt, tt.clwb, got, tt.want)
		}
	}
}

// supportedWriteBacks lists the instructions this CPU can execute, weakest
// first, so the test runs each one the CPU offers.
func supportedWriteBacks() []writeBack {
	_, _, _, edx1 := cpuid(1, 0)
	_, ebx7, _, _ := cpuid(7, 0)
	var methods []writeBack
	if edx1&(1<<19) != 0 {
		methods = append(methods, writeBackCLFLUSH)
	}
	if ebx7&(1<<23) != 0 {
		methods = append(methods, writeBackCLFLUSHOPT)
	}
	if ebx7&(1<<24) != 0 {
		methods = append(methods, writeBackCLWB)
	}
	return methods
}

// TestWriteBackRangeKeepsMemoryIntact runs every supported instruction over
// unaligned ranges of ordinary memory: the loops must visit only the lines of
// the range (no fault past its end) and must not change a byte.
func TestWriteBackRangeKeepsMemoryIntact(t *testing.T) {
	methods := supportedWriteBacks()
	if len(methods) == 0 {
		t.Skip("CPU reports no cache-line write-back instruction")
	}
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for _, method := range methods {
		for _, r := range []struct{ off, n int }{{0, 1}, {0, 64}, {1, 64}, {63, 2}, {100, 1000}, {4095, 1}} {
			if !writeBackRange(method, unsafe.Pointer(&buf[r.off]), uintptr(r.n)) {
				t.Fatalf("%v: writeBackRange reported no instruction", method)
			}
		}
	}
	for i := range buf {
		if buf[i] != byte(i*7) {
			t.Fatalf("byte %d changed to %d", i, buf[i])
		}
	}
	if writeBackRange(writeBackMsync, unsafe.Pointer(&buf[0]), 1) {
		t.Error("writeBackRange(writeBackMsync) claimed to write back")
	}
	t.Logf("this CPU: %v (supported: %v)", writeBackMethod, methods)
}
