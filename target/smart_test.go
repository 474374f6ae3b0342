package target

import (
	"sync"
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
)

// healthBackend is a memBackend that reports a settable backend.Health.
type healthBackend struct {
	*memBackend
	mu sync.Mutex
	h  backend.Health
}

func newHealthBackend(h backend.Health) *healthBackend {
	return &healthBackend{memBackend: newMemBackend(1<<20, 512), h: h}
}

func (b *healthBackend) Health() (backend.Health, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.h, true
}

func (b *healthBackend) set(h backend.Health) {
	b.mu.Lock()
	b.h = h
	b.mu.Unlock()
}

func smartLog(t *testing.T, a *assoc, nsid uint32) nvme.SMARTLog {
	t.Helper()
	_, log := a.admin.mustDo(t, getLogCmd(nvme.LogSMART, 0, false, nsid, nvme.SMARTLogSize, 0), nil)
	return nvme.UnmarshalSMARTLog(log)
}

var healthyStore = backend.Health{Drives: 3, Parity: 1, CapacityBytes: 1000 << 20, UsedBytes: 250 << 20}

// The SMART / Health Information log tells what the namespace's backend
// reports (issue 14 part 8): a healthy store gives no warning, full spare,
// a Kelvin temperature and its fill as Percentage Used; one lost drive of a
// parity-1 store uses up the spare (below the threshold) and degrades
// reliability; unrecovered reads count as media errors; read-only is
// reported; NSID FFFFFFFFh aggregates the controller's namespaces.
func TestSMARTLogReportsBackendHealth(t *testing.T) {
	be := newHealthBackend(healthyStore)
	env := newEnv(t, withNamespace3(be))
	a := env.standard()

	s := smartLog(t, a, 3)
	if s.CriticalWarning != 0 || s.AvailableSpare != 100 || s.SpareThreshold != smartSpareThreshold ||
		s.PercentageUsed != 25 || s.CompositeTemp != smartTemperatureK || s.MediaErrors != 0 {
		t.Fatalf("healthy store: %+v", s)
	}
	if s.CompositeTemp < 273 || s.CompositeTemp >= 343 {
		t.Fatalf("composite temperature %d K: not a plausible reading below the threshold", s.CompositeTemp)
	}

	lost := healthyStore
	lost.FailedDrives = 1
	be.set(lost)
	s = smartLog(t, a, 3)
	if s.CriticalWarning != nvme.SMARTWarnSpare|nvme.SMARTWarnReliability || s.AvailableSpare != 0 ||
		s.AvailableSpare >= s.SpareThreshold {
		t.Fatalf("parity 1, one drive of 3 lost: %+v", s)
	}
	// The controller as a whole: the worst of its namespaces (1 and 2 have
	// no health to report).
	if all := smartLog(t, a, nvme.NSIDAll); all.CriticalWarning != s.CriticalWarning || all.AvailableSpare != 0 {
		t.Fatalf("controller-wide log %+v", all)
	}
	if s1 := smartLog(t, a, 1); s1.CriticalWarning != 0 || s1.AvailableSpare != 100 || s1.PercentageUsed != 0 {
		t.Fatalf("namespace 1 (no health): %+v", s1)
	}

	for _, tc := range []struct {
		name  string
		h     backend.Health
		warn  uint8
		spare uint8
		used  uint8
	}{
		{"parity 2, one lost", backend.Health{Drives: 6, Parity: 2, FailedDrives: 1, CapacityBytes: 100, UsedBytes: 1},
			nvme.SMARTWarnReliability, 50, 1},
		{"parity 2, two lost", backend.Health{Drives: 6, Parity: 2, FailedDrives: 2, CapacityBytes: 100},
			nvme.SMARTWarnReliability | nvme.SMARTWarnSpare, 0, 0},
		{"no parity, healthy", backend.Health{Drives: 1, CapacityBytes: 100, UsedBytes: 100}, 0, 100, 100},
		{"media errors", backend.Health{Drives: 3, Parity: 1, CapacityBytes: 100, MediaErrors: 7},
			nvme.SMARTWarnReliability, 100, 0},
		{"failed store", backend.Health{Drives: 3, Parity: 1, CapacityBytes: 100, Failed: true},
			nvme.SMARTWarnReliability, 100, 0},
		{"read only", backend.Health{ReadOnly: true}, nvme.SMARTWarnReadOnly, 100, 0},
		{"no capacity left", backend.Health{Drives: 3, Parity: 1, FailedDrives: 3}, nvme.SMARTWarnReliability | nvme.SMARTWarnSpare, 0, 100},
	} {
		be.set(tc.h)
		s := smartLog(t, a, 3)
		if s.CriticalWarning != tc.warn || s.AvailableSpare != tc.spare || s.PercentageUsed != tc.used ||
			s.MediaErrors != tc.h.MediaErrors {
			t.Errorf("%s: warning %#x spare %d used %d media errors %d; want %#x %d %d %d", tc.name,
				s.CriticalWarning, s.AvailableSpare, s.PercentageUsed, s.MediaErrors, tc.warn, tc.spare, tc.used, tc.h.MediaErrors)
		}
	}

	// A host-set over-temperature threshold at or below the reading warns.
	be.set(healthyStore)
	a.admin.mustDo(t, setFeatCmd(nvme.FeatTemperatureThresh, smartTemperatureK), nil)
	if s := smartLog(t, a, 3); s.CriticalWarning != nvme.SMARTWarnTemperature {
		t.Fatalf("temperature at the threshold: warning %#x", s.CriticalWarning)
	}
}

// Per-namespace logs count that namespace's I/O (LPA bit 0); the
// controller-wide one counts the controller's; other NSIDs fail as
// §3.2.1.5 says.
func TestSMARTLogPerNamespace(t *testing.T) {
	env := newEnv(t)
	a := env.standard()
	if id := nvme.UnmarshalIdentifyController(func() []byte {
		_, d := a.admin.mustDo(t, identifyCmd(nvme.CNSController, 0, 0), nil)
		return d
	}()); id.LPA&lpaSMARTPerNamespace == 0 {
		t.Fatalf("LPA %#x: per-namespace SMART not advertised", id.LPA)
	}
	a.io[0].mustDo(t, rwCmd(nvme.IOWrite, 1, 0, 7, 512), make([]byte, 4096))
	a.io[1].mustDo(t, rwCmd(nvme.IORead, 1, 0, 7, 512), nil)
	a.io[1].mustDo(t, rwCmd(nvme.IORead, 1, 8, 0, 512), nil)
	a.io[0].mustDo(t, rwCmd(nvme.IORead, 2, 0, 1, 4096), nil)
	// Another controller's I/O counts for the namespace, not for a.
	b := env.connectAdmin(testSubNQN, testHostNQN, env.ports[1], 5000)
	b.connectIO(1, 31)
	b.io[0].mustDo(t, rwCmd(nvme.IOWrite, 1, 0, 0, 512), make([]byte, 512))

	for _, tc := range []struct {
		nsid                   uint32
		reads, writes, unitsRd uint64
	}{
		{1, 2, 2, 1},
		{2, 1, 0, 1},
		{nvme.NSIDAll, 3, 1, 1},
		{0, 3, 1, 1},
	} {
		s := smartLog(t, a, tc.nsid)
		if s.HostReadCommands != tc.reads || s.HostWriteCommands != tc.writes || s.DataUnitsRead != tc.unitsRd {
			t.Errorf("NSID %#x: reads %d writes %d units read %d; want %d %d %d", tc.nsid,
				s.HostReadCommands, s.HostWriteCommands, s.DataUnitsRead, tc.reads, tc.writes, tc.unitsRd)
		}
	}
	for _, tc := range []struct {
		nsid uint32
		want nvme.Status
	}{{3, nvme.StatusInvalidField}, {env.tgt.cfg.MaxNamespaces + 1, nvme.StatusInvalidNamespace}} {
		cpl, _ := a.admin.do(t, getLogCmd(nvme.LogSMART, 0, false, tc.nsid, nvme.SMARTLogSize, 0), nil)
		expectStatus(t, "SMART log of NSID", cpl, tc.want)
	}
}
