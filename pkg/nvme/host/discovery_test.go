package host

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"basalt/pkg/nvme"
)

func discoveryEntries(n int) []nvme.DiscoveryLogEntry {
	es := make([]nvme.DiscoveryLogEntry, n)
	for i := range es {
		es[i] = nvme.DiscoveryLogEntry{
			TRTYPE: nvme.TransportTypeTCP, ADRFAM: nvme.AddressFamilyIPv4, SUBTYPE: nvme.SubtypeNVM,
			PORTID: uint16(i + 1), CNTLID: 0xFFFF, ASQSZ: 32, TRSVCID: "4420",
			SUBNQN: "nqn.2026-01.io.basalt:vol", TRADDR: fmt.Sprintf("10.0.0.%d", i+1),
		}
	}
	return es
}

// As `nvme discover` does, the host connects with KATO 0, reads 256 bytes of
// header, then header+entries in 4 KiB chunks at increasing offsets (RAE on
// all but the last), then the full header again to compare GENCTR.
func TestDiscoveryLogReadInChunks(t *testing.T) {
	entries := discoveryEntries(5)
	f := newFakeTarget(t, fakeConfig{Discovery: entries})
	c, err := DialDiscovery(testContext(t), f.addr(), "nqn.2026-01.io.basalt:host")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.DiscoveryLog(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, entries) {
		t.Errorf("entries:\n got %+v\nwant %+v", got, entries)
	}
	var logReads []string
	for _, s := range f.traceSnapshot() {
		if strings.Contains(s, "lid=0x70") {
			logReads = append(logReads, s)
		}
	}
	want := []string{
		"0:GetLog lid=0x70 len=256 off=0 rae=true",
		"0:GetLog lid=0x70 len=4096 off=0 rae=true",
		"0:GetLog lid=0x70 len=2048 off=4096 rae=false",
		"0:GetLog lid=0x70 len=1024 off=0 rae=true",
	}
	if !slices.Equal(logReads, want) {
		t.Errorf("log reads:\n got %q\nwant %q", logReads, want)
	}
	tr := f.traceSnapshot()
	if tr[0] != "0:Connect sqsize=31 kato=0 cntlid=0xffff" || slices.ContainsFunc(tr, func(s string) bool {
		return strings.HasPrefix(s, "1:") || strings.Contains(s, "fid=0x7")
	}) {
		t.Errorf("discovery controller got I/O queue setup: %q", tr)
	}
	if !slices.Contains(tr, "0:SetFeatures fid=0xb cdw11=0x80000000") || !slices.Contains(tr, "0:AER") {
		t.Errorf("discovery-log-change events not enabled: %q", tr)
	}
	f.checkClean(t)
}

func TestDiscoveryLogRetriesWhileGenctrChanges(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{Discovery: discoveryEntries(2), GenctrBumps: 2})
	c, err := DialDiscovery(testContext(t), f.addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.DiscoveryLog(testContext(t))
	if err != nil || len(got) != 2 {
		t.Fatalf("DiscoveryLog = %d entries, %v", len(got), err)
	}
	full := 0
	for _, s := range f.traceSnapshot() {
		if strings.HasPrefix(s, "0:GetLog lid=0x70 len=3072 off=0") {
			full++
		}
	}
	if full != 3 {
		t.Errorf("the log was read %d times, want 3 (two GENCTR changes)", full)
	}
}

func TestDiscoveryLogGivesUpAfterTenChanges(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{Discovery: discoveryEntries(1), GenctrBumps: 100})
	c, err := DialDiscovery(testContext(t), f.addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DiscoveryLog(testContext(t)); !errors.Is(err, ErrDiscoveryChanged) {
		t.Fatalf("DiscoveryLog = %v, want ErrDiscoveryChanged", err)
	}
}

func TestDiscoveryControllerHasNoIO(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{Discovery: discoveryEntries(1)})
	c, err := DialDiscovery(testContext(t), f.addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Read(testContext(t), 1, 0, make([]byte, 4096)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Read on a discovery controller = %v", err)
	}
	if c.QueueDepth() != 0 || len(c.Namespaces()) != 0 {
		t.Errorf("discovery controller has queues %d / namespaces %d", c.QueueDepth(), len(c.Namespaces()))
	}
}
