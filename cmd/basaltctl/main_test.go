package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster/clustertest"
)

func ctl(t *testing.T, base string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"--api", base, "--timeout", "5s"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func TestCLIVolumeLifecycle(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 3, 3*time.Second)
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
	ac := clustertest.NewAPICluster(t, 1, time.Second)
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

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 4096: "4 KiB", 4 << 30: "4 GiB", 1536 << 20: "1.5 GiB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
