package replication

import (
	"encoding/binary"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/clock"
)

// TestAnotherEntryWithTheSameProposalIDDoesNotCompleteAProposal: proposal
// IDs are unique per node and incarnation only, so an entry another leader
// proposed (or this node in an earlier run) may carry the ID of one of this
// leader's pending proposals. Applying that entry must not complete the
// proposal: its write would be acknowledged before it is committed (the
// simulation lost such a write, seed 975428676244 at 3554482). Only the
// entry at the term and index Raft gave the proposal completes it.
func TestAnotherEntryWithTheSameProposalIDDoesNotCompleteAProposal(t *testing.T) {
	clk := clock.NewManual(testEpoch)
	c := &core{h: &Host{clock: clk}, g: &Group{id: 1}, pending: map[uint64]*proposal{}, smApplied: 100}
	const id = 1<<40 + 1
	completed := 0
	data := make([]byte, proposalIDSize+8)
	binary.LittleEndian.PutUint64(data, id)
	c.pending[id] = &proposal{data: data, done: func(error) { completed++ }, start: clk.Now(), term: 3, index: 12}
	old := raftpb.Entry{Term: 2, Index: 10, Type: raftpb.EntryNormal, Data: append([]byte(nil), data...)}
	if err := c.applyNormal(&old); err != nil {
		t.Fatal(err)
	}
	if completed != 0 {
		t.Fatal("an older leader's entry carrying the same proposal ID completed this leader's proposal")
	}
	own := raftpb.Entry{Term: 3, Index: 12, Type: raftpb.EntryNormal, Data: data}
	if err := c.applyNormal(&own); err != nil {
		t.Fatal(err)
	}
	if completed != 1 || len(c.pending) != 0 {
		t.Fatalf("the proposal's own entry: completed %d times, %d pending", completed, len(c.pending))
	}
}
