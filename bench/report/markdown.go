package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// cephRef is the system every row is compared with.
const cephRef = "ceph-size3"

func writeMarkdown(path string, rows []Row, meta Meta) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Basalt vs Ceph RBD vs the raw disk\n\n")
	if meta.Small {
		fmt.Fprintf(&b, "> **SMALL mode** (quick run, short points, small volume): indicative only.\n\n")
	}
	fmt.Fprintf(&b, "- date: %s\n- machine: %s\n- configuration: %s\n", meta.Date, meta.Machine, meta.Config)
	fmt.Fprintf(&b, "- systems: %s\n", strings.Join(systems(rows), ", "))
	fmt.Fprintf(&b, "- load generator: `tool` column — basalt-bench drives Basalt (NVMe/TCP) and Ceph (librbd) alike; "+
		"`ceph-size3-fio` is fio's rbd engine against the same image as a cross-check; the disk is fio.\n")
	if slices.Contains(systems(rows), "socket") {
		fmt.Fprintf(&b, "- socket: basalt-bench against an echo server over loopback TCP, no storage: one round trip per I/O, "+
			"the floor of any networked storage here (a replicated write takes two).\n")
	}
	fmt.Fprintf(&b, "- CPU µs/IO: user+system CPU time of the system's daemons (Ceph: mon, mgr, 3 OSDs; Basalt: basaltd; socket: the echo server) "+
		"over the measured window divided by the I/Os in it; the client's own CPU is not counted.\n")
	fmt.Fprintf(&b, "- ratios: IOPS ×Ceph = IOPS / %s IOPS; lat ÷Ceph and CPU ÷Ceph = value / %s value (smaller is better).\n", cephRef, cephRef)
	fmt.Fprintf(&b, "- fio rows of mixed workloads report the larger of the read and write p99.\n\n")
	fmt.Fprintf(&b, "![IOPS per workload](workloads.png)\n\n![QD 1 latency](qd1-latency.png)\n\n![CPU per I/O](cpu.png)\n\n")
	fmt.Fprintf(&b, "![4 KiB random read sweep](sweep-read.png) ![4 KiB random write sweep](sweep-write.png)\n\n")
	fmt.Fprintf(&b, "| workload | system | tool | IOPS | MiB/s | mean µs | p99 µs | CPU µs/IO | IOPS ×Ceph | lat ÷Ceph | CPU ÷Ceph |\n")
	fmt.Fprintf(&b, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	ref := map[string]Row{}
	for _, r := range rows {
		if r.System == cephRef {
			ref[r.Workload] = r
		}
	}
	last := ""
	for _, r := range rows {
		w := r.Workload
		if w == last {
			w = ""
		}
		last = r.Workload
		c, ok := ref[r.Workload]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %s |\n", w, r.System, r.Tool,
			thousands(r.IOPS), r.MiBps, num(r.LatMeanUS), num(r.LatP99US), cpu(r.CPUUSPerIO),
			ratio(ok, r.IOPS, c.IOPS, "×"), ratio(ok, r.LatMeanUS, c.LatMeanUS, ""), cpuRatio(ok, r.CPUUSPerIO, c.CPUUSPerIO))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func systems(rows []Row) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.System] {
			seen[r.System] = true
			out = append(out, r.System)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int {
		if d := systemOrder(a) - systemOrder(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return out
}

func num(x float64) string {
	if x >= 100 {
		return thousands(x)
	}
	return fmt.Sprintf("%.1f", x)
}

func cpu(p *float64) string {
	if p == nil {
		return "–"
	}
	return num(*p)
}

func ratio(ok bool, v, ref float64, suffix string) string {
	if !ok || ref <= 0 || v <= 0 {
		return "–"
	}
	q := v / ref
	if q >= 10 {
		return fmt.Sprintf("%.0f%s", q, suffix)
	}
	return fmt.Sprintf("%.2f%s", q, suffix)
}

func cpuRatio(ok bool, v, ref *float64) string {
	if v == nil || ref == nil {
		return "–"
	}
	return ratio(ok, *v, *ref, "")
}

func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
