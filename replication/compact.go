package replication

// compactStep is how many entries past the margin a group lets accumulate
// before it compacts: each compaction costs a state record, so it is
// batched.
func (c *core) compactStep() uint64 {
	return max(c.h.cfg.CompactionMargin/4, 16)
}

// maybeCompact compacts the log behind the applied index (doc.go, "Log
// compaction"): normally it keeps CompactionMargin applied entries for
// followers that lag a little, and on a leader the entries back to the
// slowest follower's match index within RetainBytes (retainTarget); under
// write-buffer pressure, when this iteration held entries back for lack of
// space (starved), or when the releaser asks this group to checkpoint, it
// keeps none. It never compacts
// past the state machine's durable applied index (asking a Checkpointer to
// make it durable first), nor, unless the buffer is under pressure, past a
// snapshot that is streaming. A requested checkpoint then rewrites the
// entries still needed into a new record if they sit in old ones.
//
// The releaser asks once per pin, so a request stands until this group's
// pin has moved: one that could not be served (no room for the record, a
// failed write) is tried again on the next iteration.
func (c *core) maybeCompact() error {
	force := c.g.checkpoint.Swap(false)
	pin := c.s.pin.Load()
	pressure := c.h.releaser.pressure.Load() || c.starved
	urgent := force || c.starved
	margin := c.h.cfg.CompactionMargin
	if urgent || pressure {
		margin = 0
	}
	target := c.applied - min(margin, c.applied)
	if !urgent && !pressure { // keep what lagging followers need, within RetainBytes
		target = c.retainTarget(target)
	}
	if !pressure { // under pressure a streaming follower may need a new snapshot
		for _, index := range c.snapshotsOut {
			target = min(target, index)
		}
	}
	due := target >= c.s.snapIndex+c.compactStep() || (pressure && target >= c.s.snapIndex+16) ||
		(urgent && target > c.s.snapIndex)
	if due {
		durable, err := c.durableApplied(urgent && c.sm.AppliedIndex() < target || c.flushDue(pressure))
		if err != nil {
			return err
		}
		if target = min(target, durable); target > c.s.snapIndex {
			if err := c.s.compact(c.ctx, target); err != nil {
				return err
			}
			c.h.releaser.wake()
		}
	}
	// A compaction that left no entry in an older record already moved the
	// pin to its new state record; otherwise rewrite what is needed.
	if force && c.s.pin.Load() == pin {
		c.checkpoint()
	}
	if force && c.s.pin.Load() == pin {
		c.g.checkpoint.Store(true) // not served: the next iteration tries again
	}
	return nil
}

// checkpoint rewrites the log into one new record if the write buffer has
// room for it: the record moves this group's pin, which is what lets the
// releaser free the buffer, so it may use the reserve the admission limit
// keeps below the buffer's size (space.go, admitState). Without room, or
// when the log is larger than one record can hold, it waits for compaction;
// the caller keeps the request.
func (c *core) checkpoint() {
	if _, ok := c.sm.(LogRetainer); ok && c.s.snapIndex < c.applied {
		// The state machine may reference applied entries where they lie:
		// a rewrite would move them and free their records. The request
		// stands until compaction reaches the applied index.
		return
	}
	cost := c.s.checkpointCost()
	if cost > int64(c.s.buf.Stats().MaxPayload) {
		c.h.log.Debug("the log is too large to checkpoint; it waits for compaction", "group", c.g.id, "bytes", cost)
		return
	}
	if !c.h.space.admitState(cost) {
		c.starve()
		return
	}
	c.admitted += cost
	if err := c.s.checkpoint(c.ctx); err != nil {
		c.h.log.Warn("checkpointing the log failed", "group", c.g.id, "err", err)
		return
	}
	c.h.releaser.wake()
}

// flushStep is how many applied entries may wait to become durable in the
// state machine before a routine compaction asks a Checkpointer to make them
// durable: a checkpoint may cost a drive write and sync (a store replica on a
// volatile buffer pads and writes a partial stripe), and it runs on the loop,
// so routine compactions use the durable index the state machine already has
// and checkpoint only every flushStep entries (every compactStep under
// pressure). The releaser's requests still checkpoint at once.
func (c *core) flushStep() uint64 {
	return max(c.h.cfg.CompactionMargin, c.compactStep())
}

// flushDue reports whether the applied entries not yet known durable are
// flushStep or more (compactStep or more under pressure).
func (c *core) flushDue(pressure bool) bool {
	step := c.flushStep()
	if pressure {
		step = c.compactStep()
	}
	return c.applied >= c.sm.AppliedIndex()+step
}

// durableApplied returns the highest applied index whose effect is
// durable: the state machine's durable index (with checkpoint, a
// Checkpointer is asked to make its applied entries durable first), or the
// applied index itself when the state machine has made durable everything it
// was given, since the entries after (empty and configuration entries)
// change nothing in it.
func (c *core) durableApplied(checkpoint bool) (uint64, error) {
	var durable uint64
	if cp, ok := c.sm.(Checkpointer); ok && checkpoint {
		d, err := cp.Checkpoint(c.ctx)
		if err != nil {
			return 0, err
		}
		durable = d
	} else {
		durable = c.sm.AppliedIndex()
	}
	if durable >= c.lastSMIndex {
		return c.applied, nil
	}
	return durable, nil
}
