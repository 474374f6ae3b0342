package replication

import (
	"context"

	"basalt/pkg/clock"
)

// What a state machine built on a group (pkg/volume) needs beyond Propose:
// to build its entries in place, to attach itself to a group added without
// one, and the host's clock and write-buffer headroom.

// ProposalHeaderSize is how many bytes at the start of an entry passed to
// ProposeEntry or ProposeEntryAsync are reserved for the group (the
// proposal ID, doc.go, "Log records"); the payload the state machine's
// Apply sees follows them.
const ProposalHeaderSize = proposalIDSize

// ProposeEntry is Propose for a caller that built the entry itself: its
// first ProposalHeaderSize bytes are reserved for the group, the rest is
// the payload. The group owns entry afterwards (the caller must not touch
// it again), which saves the copy Propose makes.
func (g *Group) ProposeEntry(ctx context.Context, entry []byte) error {
	return g.proposeEntry(ctx, entry)
}

// ProposeEntryAsync is ProposeAsync for an entry built as ProposeEntry
// takes it; the group owns entry afterwards. done is called once, as
// ProposeAsync says.
func (g *Group) ProposeEntryAsync(entry []byte, done func(error)) {
	g.proposeEntryAsync(entry, done)
}

// Attach makes sm the state machine of g, a group added with a nil one
// (Host.AddGroup(id, members, nil)), and starts it. It fails if g already
// has a state machine (ErrConfig), if g was stopped, or as AddGroup fails
// to start a group (ErrOrphanReplica, an invariant violation in Raft); g is
// then left without one.
func (g *Group) Attach(sm StateMachine) error { return g.attach(sm) }

// Host returns the host that runs g.
func (g *Group) Host() *Host { return g.host }

// Clock returns the host's clock (Config.Clock).
func (h *Host) Clock() clock.Clock { return h.clock }

// AdmissionLimit returns the bytes of entries the host's write buffer may
// hold admitted at once (doc.go, "Buffer space"): the most a node may have
// in flight, proposed but not yet applied, over all its groups. A state
// machine that must not fill up when its entries apply keeps that much
// headroom free when it accepts a proposal.
func (h *Host) AdmissionLimit() int64 { return h.space.limit }
