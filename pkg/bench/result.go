package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// OpResult is the measurement of one operation (or all) in the window.
type OpResult struct {
	IOs     int64          `json:"ios"`
	IOPS    float64        `json:"iops"`
	MiBps   float64        `json:"mib_s"`
	Latency LatencySummary `json:"latency"`
}

// Result is one workload's measurement. JSON field names are stable.
type Result struct {
	Workload   string    `json:"workload"`
	Device     string    `json:"device"`
	Started    time.Time `json:"started"`
	BlockSize  int       `json:"block_size"`
	ReadPct    int       `json:"read_pct"`
	RandomPct  int       `json:"random_pct"`
	QueueDepth int       `json:"queue_depth"`
	Jobs       int       `json:"jobs"`
	RampS      float64   `json:"ramp_s"`
	Seconds    float64   `json:"seconds"` // measured window
	Verify     bool      `json:"verify"`
	All        OpResult  `json:"all"`
	Read       OpResult  `json:"read"`
	Write      OpResult  `json:"write"`
	// CPUUSPerIO is the CPU time of the processes named by Options.CPUPIDs
	// per I/O of the window, in microseconds; absent when none were named.
	CPUUSPerIO *float64 `json:"cpu_us_per_io,omitempty"`
	// ClientCPUUSPerIO is the load generator's own CPU time per I/O.
	ClientCPUUSPerIO float64 `json:"client_cpu_us_per_io"`
}

func opResult(s *opStats, secs float64) OpResult {
	r := OpResult{IOs: s.ios, Latency: s.hist.Summary()}
	if secs > 0 {
		r.IOPS = round2(float64(s.ios) / secs)
		r.MiBps = round2(float64(s.bytes) / secs / (1 << 20))
	}
	return r
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

func newResult(r *run, st [2]opStats, window time.Duration, cpu cpuWindow) *Result {
	s := r.spec
	secs := window.Seconds()
	var all opStats
	all.merge(&st[0])
	all.merge(&st[1])
	res := &Result{Workload: s.Name, Device: r.dev.Describe(), Started: r.start.UTC(),
		BlockSize: s.BlockSize, ReadPct: s.ReadPct, RandomPct: s.RandomPct, QueueDepth: s.QueueDepth,
		Jobs: s.Jobs, RampS: s.Ramp.Seconds(), Seconds: round2(secs), Verify: s.Verify,
		All: opResult(&all, secs), Read: opResult(&st[0], secs), Write: opResult(&st[1], secs)}
	if cpu.ended && all.ios > 0 {
		res.ClientCPUUSPerIO = round2(float64(cpu.self.Microseconds()) / float64(all.ios))
		if cpu.daemonsMeasured {
			v := round2(float64(cpu.daemons.Microseconds()) / float64(all.ios))
			res.CPUUSPerIO = &v
		}
	}
	return res
}

// WriteTable writes results as a human-readable table.
func WriteTable(w io.Writer, results ...*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tbs\trd%\trand%\tQD\tjobs\tIOPS\tMiB/s\tmean µs\tp50 µs\tp99 µs\tp99.9 µs\tmax µs\tCPU µs/IO\t")
	for _, r := range results {
		l := r.All.Latency
		cpu := "-"
		if r.CPUUSPerIO != nil {
			cpu = fmt.Sprintf("%.1f", *r.CPUUSPerIO)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n",
			r.Workload, sizeString(int64(r.BlockSize)), r.ReadPct, r.RandomPct, r.QueueDepth, r.Jobs,
			thousands(r.All.IOPS), r.All.MiBps, l.MeanUS, l.P50US, l.P99US, l.P999US, l.MaxUS, cpu)
		for _, op := range []struct {
			name string
			o    OpResult
		}{{"  read", r.Read}, {"  write", r.Write}} {
			if op.o.IOs == 0 || op.o.IOs == r.All.IOs {
				continue
			}
			ol := op.o.Latency
			fmt.Fprintf(tw, "%s\t\t\t\t\t\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\t\n",
				op.name, thousands(op.o.IOPS), op.o.MiBps, ol.MeanUS, ol.P50US, ol.P99US, ol.P999US, ol.MaxUS)
		}
	}
	return tw.Flush()
}

// thousands formats a rate with thousands separators.
func thousands(x float64) string {
	s := fmt.Sprintf("%d", int64(math.Round(x)))
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// sizeString prints 4096 as "4k", 1048576 as "1m".
func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dm", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dk", n>>10)
	}
	return fmt.Sprintf("%d", n)
}
