package cluster

import (
	"fmt"

	"basalt/pkg/qos"
)

// Quality of service: a volume's I/O limits (package qos) are part of its
// metadata (Volume.QoS), set when it is created (CreateVolume.QoS) and
// changed online by OpSetQoS. Every node holding a replica puts them in
// force on its replicated volume when it applies the change (reconcile,
// updateQoS), so the leader enforces them and a new leader does at once.

// OpSetQoS changes some of a volume's limits: Volume, QoS.
const OpSetQoS Op = "set_qos"

// QoSChange is the body of OpSetQoS: the limits it names are replaced (a
// zero Limit removes one), the others stay. It is applied to the volume's
// limits as they are when the command applies, so two changes of
// different limits never undo one another.
type QoSChange struct {
	IOPS       *qos.Limit `json:"iops,omitempty"`
	ReadIOPS   *qos.Limit `json:"read_iops,omitempty"`
	WriteIOPS  *qos.Limit `json:"write_iops,omitempty"`
	Bytes      *qos.Limit `json:"bytes_per_second,omitempty"`
	ReadBytes  *qos.Limit `json:"read_bytes_per_second,omitempty"`
	WriteBytes *qos.Limit `json:"write_bytes_per_second,omitempty"`
}

// fields pairs the change's fields with the limits they replace.
func (ch *QoSChange) fields(l *qos.Limits) []struct {
	change **qos.Limit
	limit  *qos.Limit
} {
	return []struct {
		change **qos.Limit
		limit  *qos.Limit
	}{{&ch.IOPS, &l.IOPS}, {&ch.ReadIOPS, &l.ReadIOPS}, {&ch.WriteIOPS, &l.WriteIOPS},
		{&ch.Bytes, &l.Bytes}, {&ch.ReadBytes, &l.ReadBytes}, {&ch.WriteBytes, &l.WriteBytes}}
}

// Apply returns l with the change's limits in place of its own.
func (ch *QoSChange) Apply(l qos.Limits) qos.Limits {
	for _, f := range ch.fields(&l) {
		if *f.change != nil {
			*f.limit = **f.change
		}
	}
	return l
}

// Empty reports whether the change names no limit.
func (ch *QoSChange) Empty() bool {
	for _, f := range ch.fields(&qos.Limits{}) {
		if *f.change != nil {
			return false
		}
	}
	return true
}

// ValidateQoS checks limits for a volume; the error wraps ErrInvalid.
func ValidateQoS(l qos.Limits) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// validateQoS checks OpSetQoS's fields.
func (c *Command) validateQoS() error {
	if err := ValidateVolumeName(c.Volume); err != nil {
		return err
	}
	if c.QoS == nil || c.QoS.Empty() {
		return fmt.Errorf("%w: %s names no limit to change", ErrInvalid, c.Op)
	}
	return ValidateQoS(c.QoS.Apply(qos.Limits{}))
}
