package target

import (
	"fmt"
	"time"
)

// DefaultDrainTimeout bounds how long a namespace or subsystem removal
// waits for the commands in flight on it (Config.DrainTimeout).
const DefaultDrainTimeout = 5 * time.Second

// drain waits, after nss were made inactive, until no command holds them,
// for at most Config.DrainTimeout, and never later than DrainTimeout after
// Close (so that a node's shutdown removing many volumes waits
// DrainTimeout in all, not once per volume). Commands that resolved a
// namespace either finish in the backend, or wait for host data or a
// transport buffer: the connections holding them are ended by destroying
// the subsystem's controllers (already done when gone is true) once half
// the time has passed, and the transport then aborts them. What is still
// in the backend at the deadline is reported as ErrDrainTimeout; those
// commands release their namespace when the backend returns.
func (t *Target) drain(s *Subsystem, nss []*Namespace, gone bool) error {
	for _, ns := range nss {
		ns.markRemoved()
	}
	now := t.clock.Now()
	deadline := t.drainDeadline(now)
	if !gone {
		if t.waitDrained(nss, now.Add(deadline.Sub(now)/2)) == 0 {
			return nil
		}
		ctrls := s.controllers()
		t.log.Warn("namespace removal: commands still in flight; closing the subsystem's controllers",
			"subnqn", s.nqn, "controllers", len(ctrls))
		for _, c := range ctrls {
			c.destroy(ErrNamespaceRemoved)
		}
	}
	if n := t.waitDrained(nss, deadline); n > 0 {
		t.log.Warn("namespace removal: commands still in the backend after the drain timeout",
			"subnqn", s.nqn, "in_flight", n, "timeout", t.cfg.DrainTimeout)
		return fmt.Errorf("%w: %s: %d commands in flight", ErrDrainTimeout, s.nqn, n)
	}
	return nil
}

// drainDeadline is when a removal starting at now stops waiting.
func (t *Target) drainDeadline(now time.Time) time.Time {
	deadline := now.Add(t.cfg.DrainTimeout)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		if d := t.mu.closedAt.Add(t.cfg.DrainTimeout); d.Before(deadline) {
			deadline = d
		}
	}
	return deadline
}

// waitDrained waits until no command holds any of nss, or until deadline;
// it returns how many commands still hold them.
func (t *Target) waitDrained(nss []*Namespace, deadline time.Time) int64 {
	for _, ns := range nss {
		select {
		case <-ns.drained:
			continue
		default:
		}
		if wait := deadline.Sub(t.clock.Now()); wait > 0 {
			timer := t.clock.NewTimer(wait)
			select {
			case <-ns.drained:
			case <-timer.C():
			}
			timer.Stop()
		}
	}
	var n int64
	for _, ns := range nss {
		n += ns.inflight.Load()
	}
	return n
}
