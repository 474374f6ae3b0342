package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/cluster/clustertest"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestVolumeAPIThroughAFollower(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 3, 5*time.Second)
	cl := ac.Client(2) // node 3; node 1 leads the metadata
	v, err := cl.CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "vol1", Size: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if v.RF != 3 || len(v.Replicas) != 3 || v.AllowAnyHost || v.NQN != "nqn.2026-11.io.basalt:vol1" ||
		v.Connect.Note != api.NoHostNote("vol1") {
		t.Fatalf("created %+v", v)
	}
	ac.Eventually("the volume is healthy", func() bool {
		v, err = cl.Volume(ctx(t), "vol1")
		return err == nil && v.Health == "healthy"
	})
	optimized := 0
	for _, p := range v.Paths {
		if p.ANAState == "optimized" {
			optimized++
			if p.Node != v.Leader {
				t.Errorf("optimized path on %v, leader %v", p.Node, v.Leader)
			}
		} else if p.ANAState != "inaccessible" {
			t.Errorf("path %v: ANA %q", p.Node, p.ANAState)
		}
	}
	if optimized != 1 || len(v.Connect.Connect) != 3 || !strings.HasPrefix(v.Connect.ConnectAll, "nvme connect-all -t tcp -a 127.0.0.1 -s ") {
		t.Errorf("paths %+v connect %+v", v.Paths, v.Connect)
	}

	list, err := ac.Client(1).Volumes(ctx(t))
	if err != nil || len(list) != 1 || list[0].Name != "vol1" {
		t.Fatalf("list: %v %+v", err, list)
	}

	v, err = cl.AddHost(ctx(t), "vol1", "nqn.2014-08.org.nvmexpress:uuid:1234")
	if err != nil || v.AllowAnyHost || len(v.Hosts) != 1 || v.Connect.Note == "" {
		t.Fatalf("add host: %v %+v", err, v)
	}
	v, err = cl.RemoveHost(ctx(t), "vol1", "nqn.2014-08.org.nvmexpress:uuid:1234")
	if err != nil || v.Note == "" {
		t.Fatalf("remove last host: %v, note %q", err, v.Note)
	}

	v, err = cl.ResizeVolume(ctx(t), "vol1", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	ac.Eventually("the resize completes", func() bool {
		v, err = cl.Volume(ctx(t), "vol1")
		return err == nil && v.Size == 8<<20 && v.PendingSize == 0
	})

	cv, err := cl.Cluster(ctx(t))
	if err != nil || cv.Health != "healthy" || cv.Leader != 1 || cv.NodesUp != 3 || cv.Volumes != 1 {
		t.Fatalf("cluster: %v %+v", err, cv)
	}
	nodes, err := cl.Nodes(ctx(t))
	if err != nil || len(nodes) != 3 || !nodes[0].MetadataLeader || nodes[1].Replicas != 1 {
		t.Fatalf("nodes: %v %+v", err, nodes)
	}

	if err := cl.DeleteVolume(ctx(t), "vol1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Volume(ctx(t), "vol1"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("show after delete: %v", err)
	}
}

func TestAPIErrors(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 2, 300*time.Millisecond)
	cl := ac.Client(1)
	if _, err := cl.CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "a", Size: 1 << 20, RF: 2}); err != nil {
		t.Fatal(err)
	}
	base := ac.Nodes[1].Server.URL
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"bad json", "POST", "/v1/volumes", `{"name":`, 400, "invalid"},
		{"unknown field", "POST", "/v1/volumes", `{"name":"b","size":4096,"colour":"red"}`, 400, "invalid"},
		{"trailing data", "POST", "/v1/volumes", `{"name":"b","size":4096} {}`, 400, "invalid"},
		{"bad size", "POST", "/v1/volumes", `{"name":"b","size":"lots"}`, 400, "invalid"},
		{"misaligned size", "POST", "/v1/volumes", `{"name":"b","size":1000}`, 400, "invalid"},
		{"bad name", "POST", "/v1/volumes", `{"name":"B/../c","size":"1GiB"}`, 400, "invalid"},
		{"rf too big", "POST", "/v1/volumes", `{"name":"b","size":"1GiB","rf":4}`, 400, "invalid"},
		{"rf above nodes", "POST", "/v1/volumes", `{"name":"b","size":"1GiB","rf":3}`, 409, "no_capacity"},
		{"bad host", "POST", "/v1/volumes", `{"name":"b","size":"1GiB","hosts":["me"]}`, 400, "invalid"},
		{"exists", "POST", "/v1/volumes", `{"name":"a","size":"1GiB"}`, 409, "exists"},
		{"shrink", "POST", "/v1/volumes/a/resize", `{"size":4096}`, 409, "conflict"},
		{"resize missing", "POST", "/v1/volumes/zz/resize", `{"size":"2GiB"}`, 404, "not_found"},
		{"show missing", "GET", "/v1/volumes/zz", ``, 404, "not_found"},
		{"delete missing", "DELETE", "/v1/volumes/zz", ``, 404, "not_found"},
		{"remove absent host", "DELETE", "/v1/volumes/a/hosts/nqn.x", ``, 404, "not_found"},
		{"bad host nqn", "POST", "/v1/volumes/a/hosts/host1", ``, 400, "invalid"},
		{"wrong method", "PUT", "/v1/volumes", ``, 405, "invalid"},
		{"unknown endpoint", "GET", "/v2/volumes", ``, 404, "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			resp, err := ac.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e api.Error
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("body is not a JSON error: %s", b)
			}
			if resp.StatusCode != tt.status || e.Code != tt.code || e.Message == "" || e.Hint == "" && tt.status != 405 {
				t.Errorf("HTTP %d %+v, want %d %s with a message and a hint", resp.StatusCode, e, tt.status, tt.code)
			}
		})
	}

	// Without a metadata leader, changes fail with 503 and Retry-After.
	ac.Net.SetMetadataLeader(0)
	req, _ := http.NewRequest("POST", base+"/v1/volumes", strings.NewReader(`{"name":"c","size":"1GiB"}`))
	resp, err := ac.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("no leader: HTTP %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	cv, err := cl.Cluster(ctx(t))
	if err != nil || cv.Health != "unavailable" || !cv.Stale {
		t.Errorf("cluster without leader: %v %+v", err, cv)
	}
}

func TestNodeDownIsReported(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 3, time.Second)
	ac.Nodes[2].Server.Close()
	nodes, err := ac.Client(0).Nodes(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !nodes[0].Up || !nodes[1].Up || nodes[2].Up || nodes[2].Error == "" {
		t.Errorf("nodes %+v", nodes)
	}
	cv, err := ac.Client(0).Cluster(ctx(t))
	if err != nil || cv.Health != "degraded" || cv.NodesUp != 2 {
		t.Errorf("cluster %v %+v", err, cv)
	}
}

func TestNodesShowTheScrubSchedule(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 3, time.Second)
	last := time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)
	ac.Nodes[1].Scrub.Store(&api.ScrubView{Enabled: true, Interval: "168h0m0s", RateBytesPerSecond: 64 << 20,
		InProgress: true, Fraction: 0.4, PassStarted: last.Add(168 * time.Hour), LastCompleted: last,
		Last:  api.ScrubCounts{Stripes: 900, Blocks: 28800, Bad: 2, Repaired: 2},
		Pass:  &api.ScrubCounts{Stripes: 360, Blocks: 11520, Bad: 1, Repaired: 0, Unrecoverable: 1},
		Total: api.ScrubCounts{Stripes: 1260, Repaired: 2, Unrecoverable: 1}})
	ac.Nodes[2].Scrub.Store(&api.ScrubView{Enabled: true, Interval: "24h0m0s", NextDue: last.Add(24 * time.Hour)})
	// Node 1 answers: node 2's and 3's schedules come from their /v1/local.
	nodes, err := ac.Client(0).Nodes(ctx(t))
	if err != nil || len(nodes) != 3 {
		t.Fatalf("nodes: %v %+v", err, nodes)
	}
	tests := []struct {
		node int
		want *api.ScrubView
	}{
		{0, nil}, // no store: no scrub
		{1, ac.Nodes[1].Scrub.Load()},
		{2, ac.Nodes[2].Scrub.Load()},
	}
	for _, tt := range tests {
		got := nodes[tt.node].Scrub
		switch {
		case tt.want == nil && got != nil:
			t.Errorf("node %d: scrub %+v, want none", tt.node+1, got)
		case tt.want == nil:
		case got == nil:
			t.Errorf("node %d: no scrub, want %+v", tt.node+1, tt.want)
		default:
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tt.want)
			if string(gj) != string(wj) {
				t.Errorf("node %d: scrub\n%s\nwant\n%s", tt.node+1, gj, wj)
			}
		}
	}

	// /v1/local carries the schedule beside the cluster status; absent
	// times and a pass not in progress are left out.
	local, err := ac.Client(0).Local(ctx(t))
	if err != nil || local.Node.ID != 1 || local.Scrub != nil {
		t.Errorf("node 1 local: %v %+v", err, local)
	}
	resp, err := ac.Get(ac.Nodes[2].Server.URL + "/v1/local")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`"node": {`, `"volumes":`, `"scrub": {`, `"next_due": "2026-03-02T02:00:00Z"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/v1/local lacks %s:\n%s", want, b)
		}
	}
	for _, absent := range []string{`"last_completed"`, `"pass_started"`, `"pass":`} {
		if strings.Contains(string(b), absent) {
			t.Errorf("/v1/local has %s for a schedule that never ran:\n%s", absent, b)
		}
	}

	// A node that does not answer has no schedule in the list.
	ac.Nodes[2].Server.Close()
	nodes, err = ac.Client(0).Nodes(ctx(t))
	if err != nil || nodes[2].Up || nodes[2].Scrub != nil || nodes[1].Scrub == nil {
		t.Errorf("with node 3 down: %v %+v", err, nodes)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 1, time.Second)
	cl := ac.Client(0)
	if _, err := cl.CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "m", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	ac.Eventually("exported", func() bool { return ac.Nodes[0].Target.Subsystem("nqn.2026-11.io.basalt:m") != nil })
	be := ac.Nodes[0].Target.Subsystem("nqn.2026-11.io.basalt:m").Namespace(1).Backend()
	if err := be.WriteAt(context.Background(), make([]byte, 8192), 0, 0); err != nil {
		t.Fatal(err)
	}
	resp, err := ac.Get(ac.Nodes[0].Server.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`basalt_volume_ops_total{op="write",volume="m"} 1`,
		`basalt_volume_bytes_total{op="write",volume="m"} 8192`,
		`basalt_volume_latency_seconds_count{op="write",volume="m"} 1`,
		`basalt_raft_leader{group="2",volume="m"} 1`,
		`basalt_volume_ana_state{state="optimized",volume="m"} 1`,
		`basalt_nvme_subsystems 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
