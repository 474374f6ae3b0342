package config

import (
	"strings"
	"testing"
)

// Every node ID 1..MaxNodeID gets a controller ID range of its own: the
// ranges are disjoint, within the dynamic CNTLIDs (1..0xFFEF), and each
// holds at least 1007 IDs. Nodes 1..14, the IDs a cluster could have
// before, keep a part of the range they had (id*0x1000+1 ..
// id*0x1000+0xFFF), and nodes 15 and 16 lie outside all of those, so
// those nodes never overlap a node that runs the old scheme.
func TestCNTLIDRangesDisjoint(t *testing.T) {
	if MaxNodeID < 64 {
		t.Fatalf("MaxNodeID %d, want at least 64", MaxNodeID)
	}
	owner := make(map[uint16]uint64)
	for id := uint64(1); id <= MaxNodeID; id++ {
		lo, hi := CNTLIDRange(id)
		if lo < 1 || hi > 0xFFEF || lo > hi || int(hi-lo)+1 < 1007 {
			t.Fatalf("node %d: range %#x..%#x", id, lo, hi)
		}
		for c := int(lo); c <= int(hi); c++ {
			if o, ok := owner[uint16(c)]; ok {
				t.Fatalf("CNTLID %#x in the ranges of nodes %d and %d", c, o, id)
			}
			owner[uint16(c)] = id
		}
		oldLo, oldHi := uint16(id*0x1000+1), uint16(id*0x1000+0xFFF)
		switch {
		case id <= 14 && (lo < oldLo || hi > oldHi):
			t.Errorf("node %d: %#x..%#x leaves its old range %#x..%#x", id, lo, hi, oldLo, oldHi)
		case id == 15 || id == 16:
			if lo <= 14*0x1000+0xFFF && hi >= 0x1001 {
				t.Errorf("node %d: %#x..%#x overlaps the old ranges of nodes 1..14", id, lo, hi)
			}
		}
	}
}

// A cluster of node IDs up to 64 loads, node 64 gets the last slot.
func TestNodeID64(t *testing.T) {
	text := strings.ReplaceAll(clusterFile, "node_id = 2", "node_id = 64")
	text = strings.ReplaceAll(text, "id = 2\n", "id = 64\n")
	c, err := Load(write(t, text))
	if err != nil {
		t.Fatal(err)
	}
	if c.NVMe.PortID != 64 || c.NVMe.CNTLIDMin != 0xFC01 || c.NVMe.CNTLIDMax != 0xFFEF {
		t.Fatalf("node 64: port %d CNTLIDs %#x..%#x", c.NVMe.PortID, c.NVMe.CNTLIDMin, c.NVMe.CNTLIDMax)
	}
}
