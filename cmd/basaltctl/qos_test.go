package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"basalt/pkg/qos"
)

func TestCLIVolumeQoS(t *testing.T) {
	ac := newAPICluster(t, 1, 3*time.Second)
	base := ac.Nodes[0].Server.URL
	out, errs, code := ctl(t, base, "volume", "create", "db1", "--size", "4MiB", "--rf", "1",
		"--max-iops", "20000", "--max-mbps", "400")
	if code != 0 || !strings.Contains(out, "20000 IOPS (burst 20000), 400 MB/s (burst 400 MB)") {
		t.Fatalf("create: %d %s%s", code, out, errs)
	}
	out, errs, code = ctl(t, base, "volume", "qos", "set", "db1", "--max-read-iops", "500", "--max-write-mbps", "2.5",
		"--burst", "200ms", "--max-mbps", "0")
	if code != 0 || !strings.Contains(out, "20000 IOPS (burst 20000), 500 IOPS read (burst 100), 2.5 MB/s write (burst 0.5 MB)") {
		t.Fatalf("set: %d %s%s", code, out, errs)
	}
	out, _, code = ctl(t, base, "-o", "json", "volume", "qos", "show", "db1")
	var l qos.Limits
	want := qos.Limits{IOPS: qos.Limit{Rate: 20000}, ReadIOPS: qos.Limit{Rate: 500, Burst: 100},
		WriteBytes: qos.Limit{Rate: 2_500_000, Burst: 500_000}}
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l != want {
		t.Fatalf("show -o json: %d %s, want %v", code, out, want)
	}
	for _, args := range [][]string{
		{"volume", "qos", "set", "db1"},
		{"volume", "qos", "set", "db1", "--burst", "1s"},
		{"volume", "qos", "set", "db1", "--max-mbps", "-1"},
		{"volume", "qos", "set", "db1", "--max-iops", "5", "--burst", "-1s"},
		{"volume", "qos", "set", "db1", "--max-iops", "lots"},
		{"volume", "create", "x", "--size", "4MiB", "--max-iops", "2000000000000000"},
	} {
		if _, errs, code := ctl(t, base, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2 (usage)", args, code, errs)
		}
	}
}
