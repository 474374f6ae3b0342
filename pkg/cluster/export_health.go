package cluster

import "basalt/pkg/backend"

// Health implements backend.HealthReporter: as the replicated volume.
func (e *export) Health() (backend.Health, bool) { return backend.HealthOf(e.Backend) }
