package cluster

import (
	"slices"
	"testing"
)

// TestMetaStep: the metadata group's next change: a removed node goes, a
// registered node that is no member joins as a learner, a learner that has
// caught up (and acknowledged something) is promoted; the leader never
// removes itself.
func TestMetaStep(t *testing.T) {
	s := NewState()
	for _, id := range []NodeID{1, 2, 3, 4} {
		s.Nodes[id] = &Node{ID: id, State: NodeActive}
	}
	voters := Membership{Voters: []NodeID{1, 2, 3}}
	st := GroupStatus{Commit: 100, Progress: map[NodeID]uint64{2: 100, 3: 100}, RecentActive: map[NodeID]bool{2: true, 3: true, 4: true}}
	if ch, _ := metaStep(s, voters, st, 1); !slices.Equal(ch, []MemberChange{{AddLearner, 4}}) {
		t.Errorf("a registered node that is no member: %v, want add learner node4", ch)
	}
	learner := Membership{Voters: []NodeID{1, 2, 3}, Learners: []NodeID{4}}
	if ch, _ := metaStep(s, learner, st, 1); len(ch) != 0 {
		t.Errorf("a learner that acknowledged nothing (commit within the slack): %v, want no change", ch)
	}
	st.Progress[4] = 90
	if ch, _ := metaStep(s, learner, st, 1); !slices.Equal(ch, []MemberChange{{AddVoter, 4}}) {
		t.Errorf("a caught-up learner: %v, want promote node4", ch)
	}
	s.Removed = []NodeID{3, 1}
	delete(s.Nodes, 3)
	if ch, _ := metaStep(s, voters, st, 1); !slices.Equal(ch, []MemberChange{{RemoveMember, 3}}) {
		t.Errorf("a removed voter: %v, want remove node3 (and never the leader itself)", ch)
	}
}
