package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"basalt/pkg/config"
	"basalt/pkg/nvme/host"
)

// TestEveryNodeExportsTheSamePaths checks what the Linux host needs to merge
// the paths into one multipath device: every node's discovery log lists every
// node's port for the volume, with distinct port IDs; the controllers of all
// nodes report the same subsystem, serial, model and namespace identifiers,
// controller IDs from disjoint ranges, and exactly one optimized path.
func TestEveryNodeExportsTheSamePaths(t *testing.T) {
	tc := startCluster(t, opts{nodes: 3})
	v := tc.createVolume("paths", 16<<20, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range tc.nodes {
		d, err := host.DialDiscovery(ctx, n.nvme, hostNQN)
		if err != nil {
			t.Fatal(err)
		}
		ents, err := d.DiscoveryLog(ctx)
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		ports := map[uint16]string{}
		for _, e := range ents {
			if e.SUBNQN == v.NQN {
				ports[e.PORTID] = e.TRADDR + ":" + e.TRSVCID
			}
		}
		for _, o := range tc.nodes {
			if ports[uint16(o.id)] != o.nvme {
				t.Errorf("node%d's discovery log: port %d is %q, want %s (all: %v)", n.id, o.id, ports[uint16(o.id)], o.nvme, ports)
			}
		}
	}
	var first host.NSIdentifiers
	var firstSN, firstMN string
	optimized := 0
	for i, n := range tc.nodes {
		c, err := dial(ctx, n, v.NQN)
		if err != nil {
			t.Fatal(err)
		}
		id := c.Identify()
		lo, hi := config.CNTLIDRange(uint64(n.id))
		if c.CNTLID() < lo || c.CNTLID() > hi {
			t.Errorf("node%d handed out CNTLID %#x, outside %#x..%#x", n.id, c.CNTLID(), lo, hi)
		}
		if id.CMIC&0x0B != 0x0B {
			t.Errorf("node%d: CMIC %#x lacks multi-controller/ANA bits", n.id, id.CMIC)
		}
		ids, err := c.NSDescriptors(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first, firstSN, firstMN = ids, id.SN, id.MN
		} else if ids != first || id.SN != firstSN || id.MN != firstMN {
			t.Errorf("node%d's identity (SN %q MN %q %+v) differs from node1's (SN %q MN %q %+v)",
				n.id, id.SN, id.MN, ids, firstSN, firstMN, first)
		}
		if fmt.Sprintf("%x", ids.UUID) != fmt.Sprintf("%x", v.UUID[:]) {
			t.Errorf("node%d: UUID %x, metadata says %x", n.id, ids.UUID, v.UUID[:])
		}
		if st, _ := c.ANAState(1); st == 1 {
			optimized++
		}
		c.Close()
	}
	if optimized != 1 {
		t.Errorf("%d optimized paths, want exactly 1", optimized)
	}
}
