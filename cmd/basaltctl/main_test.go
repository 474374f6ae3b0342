package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster/clustertest"
)

// secured maps the API URLs of the test clusters (which serve HTTPS with
// tokens) to their security, so that ctl passes --ca and --token.
var secured sync.Map

// newAPICluster is clustertest.NewAPICluster, its nodes registered in
// secured.
func newAPICluster(t *testing.T, n int, timeout time.Duration) *clustertest.APICluster {
	ac := clustertest.NewAPICluster(t, n, timeout)
	for _, nd := range ac.Nodes {
		secured.Store(nd.Server.URL, ac.Sec)
		t.Cleanup(func() { secured.Delete(nd.Server.URL) })
	}
	return ac
}

// ctl runs basaltctl against base: with the admin token and the CA when
// base is a test cluster's.
func ctl(t *testing.T, base string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	pre := []string{"--api", base, "--timeout", "5s"}
	if sec, ok := secured.Load(base); ok {
		pre = append(pre, "--ca", sec.(*clustertest.TestSecurity).CAFile, "--token", sec.(*clustertest.TestSecurity).AdminToken)
	}
	return ctlArgs(append(pre, args...)...)
}

func ctlArgs(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestCLIVolumeLifecycle(t *testing.T) {
	ac := newAPICluster(t, 3, 3*time.Second)
	base := ac.Nodes[1].Server.URL

	out, errs, code := ctl(t, base, "volume", "create", "vol1", "--size", "4MiB", "--host", "nqn.2014-08.org.nvmexpress:uuid:h1")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	for _, want := range []string{"Volume:", "vol1", "nqn.2026-11.io.basalt:vol1", "4 MiB", "nvme connect-all -t tcp -a 127.0.0.1 -s 4420",
		"nqn.2014-08.org.nvmexpress:uuid:h1", "must connect as one of the allowed host NQNs"} {
		if !strings.Contains(out, want) {
			t.Errorf("create output lacks %q:\n%s", want, out)
		}
	}
	ac.Eventually("healthy", func() bool {
		out, _, _ := ctl(t, base, "volume", "list")
		return strings.Contains(out, "healthy")
	})

	out, _, code = ctl(t, base, "volume", "show", "vol1", "--via", "10.0.2.2")
	if code != 0 || !strings.Contains(out, "nvme connect -t tcp -a 10.0.2.2 -s 4421 -n nqn.2026-11.io.basalt:vol1") ||
		!strings.Contains(out, "optimized") || !strings.Contains(out, "inaccessible") {
		t.Errorf("show --via:\n%s", out)
	}

	out, _, code = ctl(t, base, "-o", "json", "volume", "show", "vol1")
	var v api.VolumeView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Name != "vol1" || len(v.Paths) != 3 {
		t.Fatalf("show -o json: %d %s", code, out)
	}

	for _, args := range [][]string{
		{"host", "add", "vol1", "nqn.2014-08.org.nvmexpress:uuid:h2"},
		{"host", "remove", "vol1", "nqn.2014-08.org.nvmexpress:uuid:h1"},
		{"volume", "resize", "vol1", "--size", "8MiB"},
		{"cluster", "status"},
		{"node", "list"},
	} {
		if out, errs, code := ctl(t, base, args...); code != 0 {
			t.Errorf("%v: %d\n%s%s", args, code, out, errs)
		}
	}
	out, _, _ = ctl(t, base, "node", "list")
	if !strings.Contains(out, "metadata leader") || strings.Count(out, "yes") != 3 {
		t.Errorf("node list:\n%s", out)
	}
	if out, errs, code := ctl(t, base, "volume", "delete", "vol1"); code != 0 || !strings.Contains(out, "deleted") {
		t.Errorf("delete: %d %s %s", code, out, errs)
	}
	out, _, _ = ctl(t, base, "volume", "list")
	if !strings.Contains(out, "no volumes") {
		t.Errorf("list after delete:\n%s", out)
	}
}

func TestCLIErrors(t *testing.T) {
	ac := newAPICluster(t, 1, time.Second)
	base := ac.Nodes[0].Server.URL
	if _, errs, code := ctl(t, base, "volume", "create", "a", "--size", "1MiB"); code != 0 {
		t.Fatal(errs)
	}
	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"volume", "create", "a", "--size", "1MiB"}, 1, []string{"already exists", "hint: choose another name"}},
		{[]string{"volume", "create", "b", "--size", "1MiB", "--rf", "2"}, 1, []string{"needs 2 nodes", "hint: use a smaller --rf"}},
		{[]string{"volume", "create", "b"}, 2, []string{"--size is required"}},
		{[]string{"volume", "create", "b", "--size", "big"}, 2, []string{"--size \"big\""}},
		{[]string{"volume", "create", "b", "--size", "1000"}, 1, []string{"multiple of 4096"}},
		{[]string{"volume", "show", "nope"}, 1, []string{"not found", "hint: list what exists"}},
		{[]string{"volume", "resize", "a", "--size", "4KiB"}, 1, []string{"shrinking", "volumes only grow"}},
		{[]string{"volume", "show"}, 2, []string{"want 1 argument"}},
		{[]string{"volume", "explode"}, 2, []string{"unknown command \"explode\""}},
		{[]string{"host", "add", "a", "not-an-nqn"}, 1, []string{"host NQN"}},
		{[]string{"-o", "yaml", "volume", "list"}, 2, []string{"want table or json"}},
		{[]string{"--bogus"}, 2, []string{"unknown flag"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, errs, code := ctl(t, base, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d: %s", code, tt.code, errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q: %s", w, errs)
				}
			}
		})
	}
	// An unreachable API.
	_, errs, code := ctl(t, "http://127.0.0.1:1", "cluster", "status")
	if code != 3 || !strings.Contains(errs, "cannot reach") || !strings.Contains(errs, "--api") {
		t.Errorf("unreachable: %d %s", code, errs)
	}
}

func TestCLINodeListShowsScrub(t *testing.T) {
	ac := newAPICluster(t, 3, time.Second)
	last := time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)
	ac.Nodes[0].Scrub.Store(&api.ScrubView{Enabled: true, Interval: "168h0m0s", InProgress: true, Fraction: 0.42,
		LastCompleted: last, Last: api.ScrubCounts{Repaired: 3}, Pass: &api.ScrubCounts{Repaired: 1, Unrecoverable: 2}})
	ac.Nodes[1].Scrub.Store(&api.ScrubView{Enabled: true, Interval: "24h0m0s", NextDue: last.Add(24 * time.Hour)})
	ac.Nodes[2].Scrub.Store(&api.ScrubView{Interval: "0s"})
	out, errs, code := ctl(t, ac.Nodes[0].Server.URL, "node", "list")
	if code != 0 {
		t.Fatalf("node list: %d %s", code, errs)
	}
	lines := strings.Split(out, "\n")
	want := map[string][]string{ // the scrub line of each node
		"SCRUB": {"STATE", "EVERY", "LAST COMPLETED", "NEXT DUE", "REPAIRED", "UNRECOVERABLE"},
		"node1": {"running 42%", "168h", "2026-03-01 02:00 UTC", "3 +1", "0 +2"},
		"node2": {"idle", "24h", "never", "2026-03-02 02:00 UTC"},
		"node3": {"off", "never"},
	}
	for prefix, fields := range want {
		var line string
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) { // the scrub table's lines begin with the name
				line = l
			}
		}
		for _, f := range fields {
			if !strings.Contains(line, f) {
				t.Errorf("scrub line %q lacks %q:\n%s", prefix, f, out)
			}
		}
	}

	out, _, code = ctl(t, ac.Nodes[0].Server.URL, "-o", "json", "node", "list")
	var nodes []api.NodeView
	if code != 0 || json.Unmarshal([]byte(out), &nodes) != nil || len(nodes) != 3 || nodes[0].Scrub == nil ||
		nodes[0].Scrub.Fraction != 0.42 || nodes[1].Scrub.NextDue != last.Add(24*time.Hour) || nodes[2].Scrub.Enabled {
		t.Errorf("node list -o json: %d %s", code, out)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 4096: "4 KiB", 4 << 30: "4 GiB", 1536 << 20: "1.5 GiB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestShortDuration(t *testing.T) {
	for in, want := range map[string]string{"168h0m0s": "168h", "1h30m0s": "1h30m", "30m0s": "30m", "45s": "45s",
		"1h0m5s": "1h0m5s", "soon": "soon"} {
		if got := shortDuration(in); got != want {
			t.Errorf("shortDuration(%q) = %q, want %q", in, got, want)
		}
	}
}
