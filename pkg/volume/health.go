package volume

import "basalt/pkg/backend"

// Health implements backend.HealthReporter: the health of the local
// replica's storage (this node's drives, which serve this node's reads),
// or false when the replica has none to report. The other replicas'
// storage is theirs to report, on their nodes' paths.
func (v *Volume) Health() (backend.Health, bool) { return backend.HealthOf(v.local) }

var _ backend.HealthReporter = (*Volume)(nil)
