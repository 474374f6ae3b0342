package pmem

import (
	"errors"
	"testing"
)

func TestModeString(t *testing.T) {
	tests := []struct {
		mode    Mode
		want    string
		durable bool
	}{
		{ModeDAX, "dax (MAP_SYNC, " + writeBackMethod.String() + ")", true},
		{ModeMsync, "msync", true},
		{ModeVolatile, "tmpfs (no persistence, lost on power loss)", false},
		{ModeMemory, "memory (volatile, lost when the process ends)", false},
		{ModeFake, "fake (simulated persistence)", true},
		{Mode(0), "Mode(0)", false},
	}
	for _, tt := range tests {
		if got := tt.mode.String(); got != tt.want {
			t.Errorf("Mode(%d).String() = %q, want %q", uint8(tt.mode), got, tt.want)
		}
		if got := tt.mode.Durable(); got != tt.durable {
			t.Errorf("%v.Durable() = %v, want %v", tt.mode, got, tt.durable)
		}
	}
}

func TestWriteBackString(t *testing.T) {
	for w, want := range map[writeBack]string{
		writeBackCLWB: "clwb", writeBackCLFLUSHOPT: "clflushopt",
		writeBackCLFLUSH: "clflush", writeBackMsync: "msync",
	} {
		if got := w.String(); got != want {
			t.Errorf("writeBack(%d).String() = %q, want %q", w, got, want)
		}
	}
}

func TestCheckRangeRejectsRangesOutsideTheRegion(t *testing.T) {
	tests := []struct {
		off, n int
		ok     bool
	}{
		{0, 0, true}, {0, 100, true}, {99, 1, true}, {100, 0, true},
		{-1, 1, false}, {0, -1, false}, {0, 101, false}, {101, 0, false},
		{50, 51, false}, {1, int(^uint(0) >> 1), false},
	}
	for _, tt := range tests {
		err := checkRange(tt.off, tt.n, 100)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrRange)) {
			t.Errorf("checkRange(%d, %d, 100) = %v, want ok=%v", tt.off, tt.n, err, tt.ok)
		}
	}
}
