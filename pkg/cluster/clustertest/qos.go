package clustertest

import (
	"sync"

	"basalt/pkg/qos"
)

// qosLimits are the limits set on a fake volume: it records them (so tests
// see what each node put in force) and enforces nothing.
type qosLimits struct {
	mu sync.Mutex
	l  qos.Limits
}

// SetQoS records l (cluster's qosSetter).
func (v *volume) SetQoS(l qos.Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	v.limits.mu.Lock()
	defer v.limits.mu.Unlock()
	v.limits.l = l
	return nil
}

// QoS returns the limits last set.
func (v *volume) QoS() qos.Limits {
	v.limits.mu.Lock()
	defer v.limits.mu.Unlock()
	return v.limits.l
}
