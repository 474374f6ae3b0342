package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCollectAndRender(t *testing.T) {
	raw, out := t.TempDir(), t.TempDir()
	files := map[string]string{
		"meta.json": `{"date":"2026-11-30T00:00:00Z","machine":"m","config":"c","small":true}`,
		"ceph-size3.bb.main.json": `[{"workload":"W2","all":{"iops":1000,"mib_s":3.9,"latency":{"mean_us":32000,"p99_us":90000}},"cpu_us_per_io":1500},
			{"workload":"QD1-read","all":{"iops":900,"mib_s":3.5,"latency":{"mean_us":1100,"p99_us":3000}},"cpu_us_per_io":400}]`,
		"socket.bb.main.json": `[{"workload":"QD1-read","all":{"iops":15000,"mib_s":58.6,"latency":{"mean_us":66,"p99_us":120}},"cpu_us_per_io":20},
			{"workload":"W2","all":{"iops":90000,"mib_s":351,"latency":{"mean_us":350,"p99_us":700}},"cpu_us_per_io":8}]`,
		"socket.server.log":        "listening on 127.0.0.1:40000\n",
		"basalt-node.bb.main.json": `[{"workload":"W2","all":{"iops":40000,"mib_s":156,"latency":{"mean_us":800,"p99_us":2000}},"cpu_us_per_io":30}]`,
		"basalt-node.bb.sweep-read.json": `[{"workload":"sweep-read-qd1","all":{"iops":9000,"mib_s":35,"latency":{"mean_us":110,"p99_us":200}}},
			{"workload":"sweep-read-qd4","all":{"iops":30000,"mib_s":117,"latency":{"mean_us":130,"p99_us":300}}}]`,
		"disk.fio.W2.json": `{"jobs":[{"job_runtime":10000,"read":{"iops":0,"bw_bytes":0,"total_ios":0,"lat_ns":{"mean":0}},
			"write":{"iops":50000,"bw_bytes":204800000,"total_ios":500000,"lat_ns":{"mean":640000,"percentile":{"99.000000":1500000}}}}]}`,
		"ceph-size3-fio.fio.W2.json": `{"jobs":[{"job_runtime":10000,"read":{"iops":0,"total_ios":0},
			"write":{"iops":800,"bw_bytes":3276800,"total_ios":8000,"lat_ns":{"mean":40000000},"clat_ns":{"percentile":{"99.000000":120000000}}}}]}`,
		"ceph-size3-fio.fio.W2.cpu": "1200\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(raw, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(raw, "", out); err != nil {
		t.Fatal(err)
	}
	var rows []Row
	if err := readJSON(filepath.Join(out, "results.json"), &rows); err != nil {
		t.Fatal(err)
	}
	want := []string{"W2/disk", "W2/socket", "W2/ceph-size3", "W2/ceph-size3-fio", "W2/basalt-node",
		"QD1-read/socket", "QD1-read/ceph-size3", "sweep-read-qd1/basalt-node", "sweep-read-qd4/basalt-node"}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, r := range rows {
		if got := r.Workload + "/" + r.System; got != want[i] || r.Date == "" || r.Config != "c" {
			t.Errorf("row %d = %s (%q, %q), want %s", i, got, r.Date, r.Config, want[i])
		}
	}
	fio := rows[3]
	// 1200 ticks = 12 s of CPU over 10 s at 800 IOPS = 8000 I/Os: 1500 µs per I/O.
	if fio.IOPS != 800 || fio.LatMeanUS != 40000 || fio.LatP99US != 120000 || fio.CPUUSPerIO == nil || *fio.CPUUSPerIO != 1500 {
		t.Errorf("fio row %+v (cpu %v)", fio, fio.CPUUSPerIO)
	}
	if rows[0].CPUUSPerIO != nil {
		t.Error("the disk has no daemon CPU")
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| basalt-node | basalt-bench | 40,000 | 156.0 | 800 | 2,000 | 30.0 | 40× | 0.03 | 0.02 |") {
		t.Errorf("results.md lacks the basalt row with its ratios:\n%s", md)
	}
	for _, line := range []string{"| QD1-read | socket | basalt-bench | 15,000 | 58.6 | 66.0 | 120 | 20.0 | 17× | 0.06 | 0.05 |",
		"- systems: disk, socket, ceph-size3, ceph-size3-fio, basalt-node\n", "- socket: basalt-bench against an echo server over loopback TCP"} {
		if !strings.Contains(string(md), line) {
			t.Errorf("results.md lacks %q:\n%s", line, md)
		}
	}
	for _, png := range []string{"workloads.png", "qd1-latency.png", "cpu.png", "sweep-read.png"} {
		if st, err := os.Stat(filepath.Join(out, png)); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v", png, err)
		}
	}
	if err := run("", filepath.Join(out, "results.json"), out); err != nil {
		t.Fatalf("re-render: %v", err)
	}
}
