package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// clampLog is a log scale on which values at or below the axis minimum sit
// on the axis (bars start from the bottom of a log axis).
type clampLog struct{}

func (clampLog) Normalize(min, max, x float64) float64 {
	min = math.Max(min, 1e-12)
	return plot.LogScale{}.Normalize(min, math.Max(max, min*10), math.Max(x, min))
}

func plotAll(out string, rows []Row, meta Meta) error {
	sub := meta.Date
	if meta.Small {
		sub += " (SMALL run)"
	}
	ws := []string{"W1", "W2", "W3", "W4", "W5"}
	if err := bars(filepath.Join(out, "workloads.png"), rows, ws, "IOPS per workload, QD 32, log scale — "+sub, "IOPS",
		func(r Row) (float64, bool) { return r.IOPS, r.IOPS > 0 }); err != nil {
		return err
	}
	if err := bars(filepath.Join(out, "qd1-latency.png"), rows, []string{"QD1-read", "QD1-write"},
		"4 KiB latency at QD 1 (mean), log scale — "+sub, "mean latency (µs)",
		func(r Row) (float64, bool) { return r.LatMeanUS, r.LatMeanUS > 0 }); err != nil {
		return err
	}
	if err := bars(filepath.Join(out, "cpu.png"), rows, append(ws, "QD1-read", "QD1-write"),
		"daemon CPU time per I/O, log scale — "+sub, "CPU µs per I/O",
		func(r Row) (float64, bool) { return deref(r.CPUUSPerIO), r.CPUUSPerIO != nil && *r.CPUUSPerIO > 0 }); err != nil {
		return err
	}
	for _, dir := range []string{"read", "write"} {
		if err := sweep(filepath.Join(out, "sweep-"+dir+".png"), rows, dir, sub); err != nil {
			return err
		}
	}
	return nil
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// bars draws one group of bars per workload, one bar per system.
func bars(path string, rows []Row, workloads []string, title, ylabel string, val func(Row) (float64, bool)) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Scale = clampLog{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	var syss []string
	for _, s := range systems(rows) {
		for _, r := range rows {
			if _, ok := val(r); ok && r.System == s && contains(workloads, r.Workload) {
				syss = append(syss, s)
				break
			}
		}
	}
	if len(syss) == 0 {
		return nil
	}
	width := vg.Points(min(60/float64(len(syss)), 18))
	lo, hi := math.Inf(1), 0.0
	all := systems(rows)
	for i, s := range syss {
		vals := make(plotter.Values, len(workloads))
		for j, w := range workloads {
			for _, r := range rows {
				if v, ok := val(r); ok && r.System == s && r.Workload == w {
					vals[j] = v
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		b.LineStyle.Width = 0
		b.Color = plotutil.Color(slices.Index(all, s)) // one color per system in every plot
		b.Offset = width * vg.Length(float64(i)-float64(len(syss)-1)/2)
		p.Add(b)
		p.Legend.Add(s, b)
	}
	p.NominalX(workloads...)
	p.X.Min, p.X.Max = -0.5, float64(len(workloads))-0.5
	p.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)))
	p.Y.Max = math.Pow(10, math.Ceil(math.Log10(hi))+1) // room for the legend
	p.Add(plotter.NewGrid())
	return p.Save(vg.Length(120+90*len(workloads))*vg.Points(1)+4*vg.Inch, 4.5*vg.Inch, path)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sweep draws latency against IOPS for the queue-depth sweep, one curve per
// system, each point labelled with its queue depth.
func sweep(path string, rows []Row, dir, sub string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("4 KiB random %s, QD 1..128: mean latency vs IOPS — %s", dir, sub)
	p.X.Label.Text = "IOPS"
	p.Y.Label.Text = "mean latency (µs)"
	p.X.Scale, p.Y.Scale = clampLog{}, clampLog{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	prefix := "sweep-" + dir + "-qd"
	lo, hi := [2]float64{math.Inf(1), math.Inf(1)}, [2]float64{}
	n := 0
	for i, s := range systems(rows) {
		var pts plotter.XYs
		var labels []string
		for _, r := range rows {
			q, ok := strings.CutPrefix(r.Workload, prefix)
			if !ok || r.System != s || r.IOPS <= 0 || r.LatMeanUS <= 0 {
				continue
			}
			pts = append(pts, plotter.XY{X: r.IOPS, Y: r.LatMeanUS})
			labels = append(labels, q)
			lo = [2]float64{math.Min(lo[0], r.IOPS), math.Min(lo[1], r.LatMeanUS)}
			hi = [2]float64{math.Max(hi[0], r.IOPS), math.Max(hi[1], r.LatMeanUS)}
		}
		if len(pts) == 0 {
			continue
		}
		n++
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		sc.Shape = plotutil.Shape(i)
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: labels})
		if err != nil {
			return err
		}
		for j := range lb.TextStyle {
			lb.TextStyle[j].Font.Size = vg.Points(7)
			lb.TextStyle[j].Color = plotutil.Color(i)
		}
		lb.Offset = vg.Point{X: 3, Y: 3}
		p.Add(l, sc, lb)
		p.Legend.Add(s, l, sc)
	}
	if n == 0 {
		return nil
	}
	p.X.Min, p.X.Max = math.Pow(10, math.Floor(math.Log10(lo[0]))), math.Pow(10, math.Ceil(math.Log10(hi[0]*1.2)))
	p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(lo[1]))), math.Pow(10, math.Ceil(math.Log10(hi[1]*1.2)))
	p.Add(plotter.NewGrid())
	p.Legend.Add("labels: queue depth")
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}
