package cluster

import "basalt/pkg/qos"

// qosSetter is a replicated volume that enforces I/O limits where it leads
// (volume.Volume).
type qosSetter interface {
	SetQoS(qos.Limits) error
	QoS() qos.Limits
}

// updateQoS puts the volume's limits in force on this node's replicated
// volume, on every node that holds a replica: only the leader's are ever
// asked, and a node that becomes the leader has them already. A replicated
// backend without limits (a test's stand-in) serves unlimited, which is
// logged when limits are set.
func (r *reconciler) updateQoS(lv *localVolume, v *Volume) {
	s, ok := lv.repl.(qosSetter)
	if !ok {
		if !v.QoS.IsZero() && !lv.qosUnsupported {
			lv.qosUnsupported = true
			r.c.log.Warn("volume limits not enforced: the replicated backend has none", "volume", v.Name)
		}
		return
	}
	if s.QoS() == v.QoS {
		return
	}
	if err := s.SetQoS(v.QoS); err != nil {
		r.c.log.Warn("volume limits not set", "volume", v.Name, "err", err)
		return
	}
	r.c.log.Info("volume limits set", "volume", v.Name, "qos", v.QoS.String())
}

// qosInForce returns the limits in force on this node's replicated volume,
// or nil if it has none (LocalStatus).
func (lv *localVolume) qosInForce() *qos.Limits {
	s, ok := lv.repl.(qosSetter)
	if !ok {
		return nil
	}
	l := s.QoS()
	return &l
}
