package replication

// compactStep is how many entries past the margin a group lets accumulate
// before it compacts: each compaction costs a state record, so it is
// batched.
func (c *core) compactStep() uint64 {
	return max(c.h.cfg.CompactionMargin/4, 16)
}

// maybeCompact compacts the log behind the applied index (doc.go, "Log
// compaction"): normally it keeps CompactionMargin applied entries for
// followers that lag a little; under write-buffer pressure, when this
// iteration held entries back for lack of space (starved), or when the
// releaser asks this group to checkpoint, it keeps none. It never compacts
// past the state machine's durable applied index (asking a Checkpointer to
// make it durable first), nor, unless the buffer is under pressure, past a
// snapshot that is streaming. A requested checkpoint then rewrites the
// entries still needed into a new record if they sit in old ones.
func (c *core) maybeCompact() error {
	force := c.g.checkpoint.Swap(false)
	pressure := c.h.releaser.pressure.Load() || c.starved
	urgent := force || c.starved
	margin := c.h.cfg.CompactionMargin
	if urgent || pressure {
		margin = 0
	}
	target := c.applied - min(margin, c.applied)
	if !pressure { // under pressure a streaming follower may need a new snapshot
		for _, index := range c.snapshotsOut {
			target = min(target, index)
		}
	}
	due := target >= c.s.snapIndex+c.compactStep() || (pressure && target >= c.s.snapIndex+16) ||
		(urgent && target > c.s.snapIndex)
	compacted := false
	if due {
		durable, err := c.durableApplied(urgent && c.sm.AppliedIndex() < target || c.flushDue(pressure))
		if err != nil {
			return err
		}
		if target = min(target, durable); target > c.s.snapIndex {
			if err := c.s.compact(c.ctx, target); err != nil {
				return err
			}
			compacted = true
			c.h.releaser.wake()
		}
	}
	// A compaction that left no entry in an older record already moved the
	// pin to its new state record; otherwise rewrite what is needed.
	if force && !(compacted && (len(c.s.ents) == 0 || c.s.ents[0].seq > c.s.stateSeq)) {
		c.checkpoint()
	}
	return nil
}

// checkpoint rewrites the log into one new record if the write buffer has
// room for it (space.go): a checkpoint only moves this group's pin, so when
// the buffer is too full it waits for compaction, which needs no room.
func (c *core) checkpoint() {
	cost := c.s.checkpointCost()
	if cost > int64(c.s.buf.Stats().MaxPayload) {
		c.h.log.Debug("the log is too large to checkpoint; it waits for compaction", "group", c.g.id, "bytes", cost)
		return
	}
	if n, _ := c.h.space.admitUpTo(func(int) int64 { return cost }, 1); n == 0 {
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
