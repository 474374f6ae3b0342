package volume

import (
	"testing"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
)

type healthReplica struct{ backend.Backend }

func (healthReplica) Health() (backend.Health, bool) {
	return backend.Health{Drives: 3, FailedDrives: 1, Parity: 1}, true
}

// A replicated volume reports its local replica's health, and none when
// the replica has none.
func TestVolumeHealthIsTheLocalReplicas(t *testing.T) {
	mem, err := backend.NewMemory(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := backend.HealthOf(newVolume(mem, clock.Real())); ok {
		t.Fatal("health reported over a replica without any")
	}
	h, ok := backend.HealthOf(newVolume(healthReplica{mem}, clock.Real()))
	if !ok || h.FailedDrives != 1 || h.Drives != 3 {
		t.Fatalf("HealthOf = %+v, %v", h, ok)
	}
}
