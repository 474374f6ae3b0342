package nvme

import "testing"

// The SMART / Health log round-trips through Marshal at the offsets of
// NVMe Base 2.0 Figure 207.
func TestSMARTLogRoundTrip(t *testing.T) {
	s := SMARTLog{
		CriticalWarning: SMARTWarnSpare | SMARTWarnReliability, CompositeTemp: 300, AvailableSpare: 33,
		SpareThreshold: 50, PercentageUsed: 77, DataUnitsRead: 1, DataUnitsWritten: 2, HostReadCommands: 3,
		HostWriteCommands: 4, PowerOnHours: 5, UnsafeShutdowns: 6, MediaErrors: 7, ErrorLogEntriesNum: 8,
	}
	b := make([]byte, SMARTLogSize)
	for i := range b {
		b[i] = 0xEE // Marshal clears what it does not set
	}
	s.Marshal(b)
	if got := UnmarshalSMARTLog(b); got != s {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, s)
	}
	for off, want := range map[int]byte{0: 0x05, 1: 0x2C, 2: 0x01, 3: 33, 4: 50, 5: 77, 6: 0, 32: 1, 160: 7, 176: 8, 511: 0} {
		if b[off] != want {
			t.Errorf("byte %d = %#x, want %#x", off, b[off], want)
		}
	}
}
