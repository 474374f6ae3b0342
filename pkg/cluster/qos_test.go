package cluster_test

import (
	"testing"

	"basalt/pkg/cluster"
	"basalt/pkg/qos"
)

// TestQoSReachesEveryReplica: the limits set at create time and changed
// online are put in force on every node holding a replica (the fake
// replicated volume records them), so whichever node leads enforces them.
func TestQoSReachesEveryReplica(t *testing.T) {
	tc := newTestCluster(t, 3)
	c := createCmd("db1", 1<<20, 3)
	c.Create.QoS = qos.Limits{WriteIOPS: qos.Limit{Rate: 100}}
	if _, err := tc.submit(1, c); err != nil {
		t.Fatal(err)
	}
	inForce := func(want qos.Limits) func() bool {
		return func() bool {
			for _, tn := range tc.nodes {
				st := tn.c.Local()
				if len(st.Volumes) != 1 || st.Volumes[0].QoS == nil || *st.Volumes[0].QoS != want {
					return false
				}
			}
			return true
		}
	}
	tc.eventually("the create's limits on every replica", inForce(c.Create.QoS))
	_, err := tc.submit(2, cluster.Command{Op: cluster.OpSetQoS, Volume: "db1",
		QoS: &cluster.QoSChange{Bytes: &qos.Limit{Rate: 1 << 20, Burst: 1 << 16}}})
	if err != nil {
		t.Fatal(err)
	}
	tc.eventually("the change on every replica", inForce(qos.Limits{WriteIOPS: qos.Limit{Rate: 100},
		Bytes: qos.Limit{Rate: 1 << 20, Burst: 1 << 16}}))
}
