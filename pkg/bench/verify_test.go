package bench

import (
	"encoding/binary"
	"testing"
)

func TestUnitStampAndJudge(t *testing.T) {
	b := make([]byte, VerifyUnit)
	stampUnit(b, 77, 5, 99)
	if gen, reason := readUnit(b, 77, 99); gen != 5 || reason != "" {
		t.Fatalf("readUnit = %d, %q", gen, reason)
	}
	older := make([]byte, VerifyUnit)
	stampUnit(older, 77, 3, 99)
	newer := make([]byte, VerifyUnit)
	stampUnit(newer, 77, 8, 99)
	corrupt := clone(b)
	corrupt[1000] ^= 0x40
	zero := make([]byte, VerifyUnit)
	foreign := make([]byte, VerifyUnit)
	stampUnit(foreign, 77, 5, 100)
	elsewhere := make([]byte, VerifyUnit)
	stampUnit(elsewhere, 78, 5, 99)
	badHeader := clone(b)
	binary.LittleEndian.PutUint64(badHeader[16:], 6) // generation changed, CRC not
	cases := []struct {
		name     string
		data     []byte
		acked    uint64
		inflight []uint64
		reason   string
	}{
		{"acked", b, 5, nil, ""},
		{"newer in flight", newer, 5, []uint64{8}, ""},
		{"newer unknown", newer, 5, []uint64{7}, reasonUnknown},
		{"older", older, 5, []uint64{8}, reasonOlder},
		{"in flight but older than acked", older, 5, []uint64{3}, reasonOlder},
		{"corrupt payload", corrupt, 5, nil, reasonChecksum},
		{"corrupt header", badHeader, 5, nil, reasonChecksum},
		{"zeros", zero, 5, nil, reasonNotStamped},
		{"other run", foreign, 5, nil, reasonSeed},
		{"misdirected", elsewhere, 5, nil, reasonLBA},
		{"nothing acked, zeros", zero, 0, nil, ""},
		{"nothing acked, in flight landed", b, 0, []uint64{5}, ""},
		{"nothing acked, unknown generation", b, 0, []uint64{4}, reasonUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := judgeUnit(c.data, 77, 99, c.acked, c.inflight)
			switch {
			case c.reason == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case c.reason != "" && (err == nil || err.Reason != c.reason):
				t.Fatalf("got %v, want reason %q", err, c.reason)
			}
		})
	}
}

func TestStampDoesNotAllocate(t *testing.T) {
	b := make([]byte, VerifyUnit)
	if n := testing.AllocsPerRun(100, func() {
		stampUnit(b, 1, 2, 3)
		readUnit(b, 1, 3)
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func BenchmarkStampUnit(b *testing.B) {
	buf := make([]byte, VerifyUnit)
	b.SetBytes(VerifyUnit)
	b.ReportAllocs()
	for i := uint64(0); b.Loop(); i++ {
		stampUnit(buf, i, i, 1)
	}
}

func TestParseProcStat(t *testing.T) {
	line := []byte("1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 20 0 1 0")
	d, err := parseProcStat(line)
	if err != nil || d.Milliseconds() != 2000 {
		t.Fatalf("parseProcStat = %v, %v; want 2 s", d, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 -1 5", "1 (x) S 1 2 3 4 5 6 7 8 9 10 a 5"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
