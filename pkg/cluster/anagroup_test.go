package cluster

import (
	"testing"

	"basalt/target"
)

// Every ANA group ID the cluster hands out is one the target accepts and
// reports within ANAGRPMAX; the cluster holds at least 4096 volumes.
func TestMaxANAGroupsFitTheTarget(t *testing.T) {
	if MaxANAGroups < 4096 || MaxANAGroups > target.DefaultMaxANAGroupID {
		t.Fatalf("MaxANAGroups %d: want 4096..%d (the target's ANAGRPMAX)", MaxANAGroups, target.DefaultMaxANAGroupID)
	}
}
