package volume

import (
	"context"
	"fmt"

	"basalt/pkg/qos"
	"basalt/replication"
)

// Quality of service: a volume's limits (package qos) are enforced where
// this node leads the volume's group, before a command reaches Raft. A
// write waits before it is proposed, so while it waits it holds no room in
// the write buffer (replication.Host.AdmissionLimit) and costs the group's
// loop nothing; a read waits before its read barrier. The asynchronous
// paths the target uses (WriteAtAsync, TrimAsync, ReadAtAsync) never block
// their caller, the connection's receive goroutine: a throttled command is
// held in the throttle's queue (qos.Throttle.Defer) and proposed, or its
// barrier started, from the throttle's goroutine when it may go. The
// blocking paths (ReadAt, WriteAt, Trim, WriteZeroes) wait on their
// caller's goroutine (a target worker). A held write keeps its proposal
// (the copy WriteAtAsync makes of its data, as for any write) in memory
// until it goes: at most the host's outstanding commands, which the
// target's queue depth bounds, and for at most qos.MaxWait; then every
// held command completes, so a volume's teardown waits for none of them
// longer than that. A node that does not lead refuses
// the command as before, without waiting: the host's retry on another path
// is not delayed by a limit. Flush is not limited (it moves no data).
//
// A command counts once against the IOPS limits, however many proposals a
// large write becomes, and its length against the bandwidth limits; trims
// and write-zeroes are writes of no bytes. A throttled command's latency,
// as Counters record it, includes its wait.

// SetQoS puts l in force for every later command (qos.Throttle.Set). It is
// set on every replica's node, so that a new leader limits at once. An
// invalid l is refused with an error wrapping qos.ErrInvalid.
func (v *Volume) SetQoS(l qos.Limits) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("volume: %w", err)
	}
	v.throttle.Set(l)
	return nil
}

// QoS returns the limits in force.
func (v *Volume) QoS() qos.Limits { return v.throttle.Limits() }

// throttleWait waits, where this node leads g, until a command of n bytes
// in direction d may go (qos.Throttle.Wait).
func (v *Volume) throttleWait(ctx context.Context, g *replication.Group, d qos.Dir, n int) error {
	if !g.IsLeader() {
		return nil
	}
	return v.throttle.Wait(ctx, d, n)
}

// deferPropose proposes entry, a command of n bytes, completing c, at once
// or, where this node leads g and the volume's limits hold the command
// back, from the throttle's goroutine once it may go.
func (v *Volume) deferPropose(g *replication.Group, c *completion, entry []byte, n int) {
	if g.IsLeader() {
		// c is the throttle's once Defer holds it: fill it in first.
		c.g, c.entry = g, entry
		if v.throttle.Defer(qos.Write, n, c.resumeFn) {
			return
		}
		c.g, c.entry = nil, nil
	}
	g.ProposeEntryAsync(entry, c.fn)
}

// deferRead starts c's read barrier on g, at once or, where this node
// leads g and the limits hold the read back, once it may go.
func (v *Volume) deferRead(g *replication.Group, c *completion) {
	if g.IsLeader() {
		c.g = g
		if v.throttle.Defer(qos.Read, len(c.read), c.resumeFn) {
			return
		}
		c.g = nil
	}
	g.ReadBarrierAsync(c.readFn)
}

// resume is what a deferred command does once the throttle lets it go: a
// write's proposal, or a read's barrier. A proposal may wait for room in
// the group's queue (replication's back-pressure); only this volume's held
// commands wait behind it.
func (c *completion) resume() {
	g, entry := c.g, c.entry
	c.g, c.entry = nil, nil
	if entry != nil {
		g.ProposeEntryAsync(entry, c.fn)
		return
	}
	g.ReadBarrierAsync(c.readFn)
}

// QoS returns the volume's throttling counts (qos.Counters): zero for a
// backend that is not a Volume, which has no limits.
func (c *Counters) QoS() *qos.Counters { return &c.qos }
