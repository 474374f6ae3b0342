package cluster

import (
	"testing"

	"basalt/pkg/backend"
)

type healthBackend struct{ backend.Backend }

func (healthBackend) Health() (backend.Health, bool) { return backend.Health{Drives: 2}, true }

// A volume's export forwards the replicated volume's health.
func TestExportForwardsHealth(t *testing.T) {
	mem, err := backend.NewMemory(1<<20, BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := backend.HealthOf(newExport(mem, 1<<20)); ok {
		t.Fatal("health reported over a backend without any")
	}
	if h, ok := backend.HealthOf(newExport(healthBackend{mem}, 1<<20)); !ok || h.Drives != 2 {
		t.Fatalf("HealthOf = %+v, %v", h, ok)
	}
}
