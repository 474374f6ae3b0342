package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/cluster/clustertest"
	"basalt/pkg/qos"
)

func TestQoSThroughTheAPI(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 3, 5*time.Second)
	cl := ac.Client(2)
	limits := qos.Limits{IOPS: qos.Limit{Rate: 20000}, Bytes: qos.Limit{Rate: 400_000_000}}
	v, err := cl.CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "db1", Size: 4 << 20, QoS: limits})
	if err != nil || v.QoS != limits {
		t.Fatalf("create: %v, limits %v", err, v.QoS)
	}
	v, err = cl.SetQoS(ctx(t), "db1", cluster.QoSChange{WriteIOPS: &qos.Limit{Rate: 500, Burst: 50}, Bytes: &qos.Limit{}})
	want := qos.Limits{IOPS: qos.Limit{Rate: 20000}, WriteIOPS: qos.Limit{Rate: 500, Burst: 50}}
	if err != nil || v.QoS != want || !strings.Contains(v.Note, "write_iops=500/50") {
		t.Fatalf("set: %v, limits %v, note %q", err, v.QoS, v.Note)
	}
	// Every node holding a replica has them in force.
	ac.Eventually("the limits on every node", func() bool {
		for i := range 3 {
			l, err := ac.Client(i).Local(ctx(t))
			if err != nil || len(l.Volumes) != 1 || l.Volumes[0].QoS == nil || *l.Volumes[0].QoS != want {
				return false
			}
		}
		return true
	})
	base := ac.Nodes[0].Server.URL
	for _, tt := range []struct {
		name, path, body string
		status           int
	}{
		{"burst without rate", "/v1/volumes/db1/qos", `{"iops":{"burst":10}}`, 400},
		{"no limit named", "/v1/volumes/db1/qos", `{}`, 400},
		{"unknown limit", "/v1/volumes/db1/qos", `{"iops":{"rate":1,"peak":2}}`, 400},
		{"negative rate", "/v1/volumes/db1/qos", `{"iops":{"rate":-1}}`, 400},
		{"missing volume", "/v1/volumes/zz/qos", `{"iops":{"rate":1}}`, 404},
		{"bad create limits", "/v1/volumes", `{"name":"b","size":"1MiB","qos":{"read_iops":{"rate":1125899906842625}}}`, 400},
	} {
		req, _ := http.NewRequest("POST", base+tt.path, strings.NewReader(tt.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := ac.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d (%s), want %d", tt.name, resp.StatusCode, b, tt.status)
		}
	}
}
