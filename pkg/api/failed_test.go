package api_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster/clustertest"
)

// TestFailedReplicaIsReported fails a volume's group on one node, as a
// drive error under its replica would: the volume view shows that path
// failed with the reason and inaccessible, the volume degraded, the
// cluster view lists the failed replica, and that node's metrics mark the
// volume failed.
func TestFailedReplicaIsReported(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 3, 5*time.Second)
	cl := ac.Client(0)
	v, err := cl.CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "vol1", Size: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ac.Eventually("the volume is healthy", func() bool {
		v, err = cl.Volume(ctx(t), "vol1")
		return err == nil && v.Health == "healthy"
	})
	failed := v.Replicas[0]
	if failed == v.Leader {
		failed = v.Replicas[1]
	}
	const reason = "replication: g2: applying entry 9: store: drive 0 failed"
	ac.Net.FailGroup(v.ID, failed, reason)
	var path api.PathView
	ac.Eventually("the failed path is reported", func() bool {
		v, err = cl.Volume(ctx(t), "vol1")
		for _, p := range v.Paths {
			if p.Node == failed {
				path = p
			}
		}
		return err == nil && path.Failed != ""
	})
	if path.Failed != reason || path.Error != "failed: "+reason || path.ANAState != "inaccessible" || v.Health != "degraded" {
		t.Errorf("volume health %q, failed path %+v", v.Health, path)
	}
	cv, err := cl.Cluster(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(cv.Failed) != 1 || cv.Failed[0].Volume != "vol1" || cv.Failed[0].Node != failed || cv.Failed[0].Reason != reason ||
		cv.Health != "degraded" {
		t.Errorf("cluster view: health %q, failed %+v", cv.Health, cv.Failed)
	}
	resp, err := ac.Get(ac.Nodes[failed-1].Server.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `basalt_volume_failed{volume="vol1"} 1`) {
		t.Errorf("the failed node's metrics do not mark the volume failed:\n%s", body)
	}
}
