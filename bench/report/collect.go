package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Row is one entry of docs/bench/results.json.
type Row struct {
	System     string   `json:"system"`
	Workload   string   `json:"workload"`
	IOPS       float64  `json:"iops"`
	MiBps      float64  `json:"mib_s"`
	LatMeanUS  float64  `json:"lat_mean_us"`
	LatP99US   float64  `json:"lat_p99_us"`
	CPUUSPerIO *float64 `json:"cpu_us_per_io"`
	Date       string   `json:"date"`
	Config     string   `json:"config"`
	// Tool says what generated the load: basalt-bench or fio.
	Tool string `json:"tool"`
}

// Meta is what compare.sh records about the run.
type Meta struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Config  string `json:"config"`
	Small   bool   `json:"small"`
}

// bbResult is the part of basalt-bench's JSON the report needs.
type bbResult struct {
	Workload string `json:"workload"`
	All      struct {
		IOPS    float64 `json:"iops"`
		MiBps   float64 `json:"mib_s"`
		Latency struct {
			Mean float64 `json:"mean_us"`
			P99  float64 `json:"p99_us"`
		} `json:"latency"`
	} `json:"all"`
	CPU *float64 `json:"cpu_us_per_io"`
}

// fioOp is one direction of a fio job.
type fioOp struct {
	IOPS     float64 `json:"iops"`
	BWBytes  float64 `json:"bw_bytes"`
	TotalIOs float64 `json:"total_ios"`
	Lat      fioLat  `json:"lat_ns"`
	CLat     fioLat  `json:"clat_ns"`
}

type fioLat struct {
	Mean       float64            `json:"mean"`
	Percentile map[string]float64 `json:"percentile"`
}

// p99 is the total latency's p99 (fio --lat_percentiles=1), else the
// completion latency's.
func (o fioOp) p99() float64 {
	if v, ok := o.Lat.Percentile["99.000000"]; ok {
		return v
	}
	return o.CLat.Percentile["99.000000"]
}

type fioOut struct {
	Jobs []struct {
		Read  fioOp `json:"read"`
		Write fioOp `json:"write"`
	} `json:"jobs"`
}

// collect reads every raw result in dir.
func collect(dir string, meta Meta) ([]Row, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, f := range files {
		base := filepath.Base(f)
		parts := strings.SplitN(strings.TrimSuffix(base, ".json"), ".", 3)
		if len(parts) != 3 {
			continue // meta.json
		}
		sys, kind, name := parts[0], parts[1], parts[2]
		var add []Row
		switch kind {
		case "bb":
			add, err = readBB(f, sys)
		case "fio":
			add, err = readFio(f, sys, name)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", base, err)
		}
		for i := range add {
			add[i].Date, add[i].Config = meta.Date, meta.Config
		}
		rows = append(rows, add...)
	}
	sortRows(rows)
	return rows, nil
}

func readBB(path, sys string) ([]Row, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rs []bbResult
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, err
	}
	var out []Row
	for _, r := range rs {
		out = append(out, Row{System: sys, Workload: r.Workload, IOPS: r.All.IOPS, MiBps: r.All.MiBps,
			LatMeanUS: r.All.Latency.Mean, LatP99US: r.All.Latency.P99, CPUUSPerIO: r.CPU, Tool: "basalt-bench"})
	}
	return out, nil
}

// readFio combines a fio job's reads and writes: IOPS and bandwidth add up,
// the mean latency is weighted by I/O count, p99 is the larger of the two
// directions' (fio keeps no combined histogram in its JSON).
func readFio(path, sys, workload string) ([]Row, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f fioOut
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if len(f.Jobs) == 0 {
		return nil, fmt.Errorf("no jobs")
	}
	r, w := f.Jobs[0].Read, f.Jobs[0].Write
	row := Row{System: sys, Workload: workload, IOPS: r.IOPS + w.IOPS, MiBps: (r.BWBytes + w.BWBytes) / (1 << 20), Tool: "fio"}
	if n := r.TotalIOs + w.TotalIOs; n > 0 {
		row.LatMeanUS = (r.Lat.Mean*r.TotalIOs + w.Lat.Mean*w.TotalIOs) / n / 1e3
		row.LatP99US = max(r.p99(), w.p99()) / 1e3
		if c, err := os.ReadFile(strings.TrimSuffix(path, ".json") + ".cpu"); err == nil {
			ticks, err := strconv.ParseFloat(strings.TrimSpace(string(c)), 64)
			if err == nil {
				// utime+stime ticks (1/100 s) over the measured window.
				v := round2(ticks * 1e4 / (row.IOPS * measuredSeconds(path)))
				row.CPUUSPerIO = &v
			}
		}
	}
	row.IOPS, row.MiBps, row.LatMeanUS, row.LatP99US = round2(row.IOPS), round2(row.MiBps), round2(row.LatMeanUS), round2(row.LatP99US)
	return []Row{row}, nil
}

// measuredSeconds is fio's runtime for the job in path (ms in the JSON).
func measuredSeconds(path string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 1
	}
	var f struct {
		Jobs []struct {
			JobRuntime float64 `json:"job_runtime"`
		} `json:"jobs"`
	}
	if json.Unmarshal(b, &f) != nil || len(f.Jobs) == 0 || f.Jobs[0].JobRuntime <= 0 {
		return 1
	}
	return f.Jobs[0].JobRuntime / 1e3
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// workloadOrder sorts W1..W5, QD1, then the sweeps by queue depth.
func workloadOrder(w string) (int, int) {
	fixed := []string{"W1", "W2", "W3", "W4", "W5", "QD1-read", "QD1-write"}
	if i := slices.Index(fixed, w); i >= 0 {
		return i, 0
	}
	for i, p := range []string{"sweep-read-qd", "sweep-write-qd"} {
		if q, ok := strings.CutPrefix(w, p); ok {
			n, _ := strconv.Atoi(q)
			return 10 + i, n
		}
	}
	return 100, 0
}

// systemOrder puts the baselines (the raw disk, the raw socket) first, then
// Ceph, then Basalt.
func systemOrder(s string) int {
	switch {
	case s == "disk" || s == "socket":
		return 0
	case strings.HasPrefix(s, "ceph"):
		return 1
	}
	return 2
}

func sortRows(rows []Row) {
	slices.SortStableFunc(rows, func(a, b Row) int {
		a1, a2 := workloadOrder(a.Workload)
		b1, b2 := workloadOrder(b.Workload)
		if a1 != b1 {
			return a1 - b1
		}
		if a2 != b2 {
			return a2 - b2
		}
		if d := systemOrder(a.System) - systemOrder(b.System); d != 0 {
			return d
		}
		return strings.Compare(a.System, b.System)
	})
}
