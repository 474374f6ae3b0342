package replication

import "context"

// A group that fails on this node (a storage or state-machine error, or a
// broken invariant its loop contained) is fenced: it stops, and it must not
// hold anything the node's other groups need. The one thing it held is its
// pin on the shared write buffer (release.go): the releaser frees the buffer
// only up to the smallest pin, and, under pressure, asks the pinning group
// to checkpoint; a loop that has stopped never does, so the buffer would
// fill and every other group's writes would wait for ever.
//
// fence persists the group's removal first, so that a restart does not find
// a log the releaser has freed in part (recovery would refuse it), then
// drops the pin. The removal is a tombstone (tombstone.go): it keeps the
// group's term, its vote and the end of its log, which Raft's safety still
// needs. The Group stays registered, failed, with its error: Status reports
// it, Watch is closed (the volume's path turns inaccessible), and a later
// RemoveGroup, then AddGroup, works. After a restart the group has no log
// on this node: adding it again bootstraps an empty log in the tombstone's
// term, with its vote, which catches up from the leader.

// fence lets go of the shared log. It runs once, on the loop, when the
// group fails.
func (g *Group) fence() {
	h := g.host
	g.releaseLog()
	if err := h.writeTombstone(g.storage); err != nil {
		h.log.Error("persisting a failed group's removal failed; its log is released anyway", "group", g.id, "err", err)
	}
	g.storage.pin.Store(0)
	g.fenced.Store(true)
	h.releaser.wake()
	h.log.Warn("failed group fenced: its log is released, it serves nothing here until removed and added again",
		"group", g.id, "term", g.storage.hard.Term)
}

// Fenced reports whether the group failed on this node and was fenced
// (Status().Err says why).
func (g *Group) Fenced() bool { return g.fenced.Load() }

// releaseLog tells a state machine that keeps references into the log
// (LogRetainer) to let go of them, before the group drops its log other
// than by compaction. It runs on the loop, or once the loop has stopped. A
// failure is logged: the state machine has then stopped serving what it
// could not make durable, and the log goes anyway.
func (g *Group) releaseLog() {
	if g.c == nil {
		return
	}
	r, ok := g.c.sm.(LogRetainer)
	if !ok {
		return
	}
	if err := r.ReleaseLog(context.Background()); err != nil {
		g.host.log.Error("the state machine could not let go of the log it references", "group", g.id, "err", err)
	}
}
