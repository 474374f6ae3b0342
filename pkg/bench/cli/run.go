package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"basalt/pkg/bench"
	"basalt/pkg/clock"
)

// workloadFlags are the fio-shaped knobs shared by run and prefill.
type workloadFlags struct {
	deviceFlags
	presets  []string
	bs       string
	read     int
	random   int
	qds      []int
	jobs     int
	ramp     time.Duration
	runtime  time.Duration
	offset   string
	size     string
	prefill  bool
	verify   bool
	journal  string
	resume   bool
	seed     uint64
	jsonOut  string
	cpuPIDs  []int
	progress string
	label    string
}

func newRunCommand() *cobra.Command {
	var w workloadFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "run one or more workloads (presets W1-W5, QD1-read, QD1-write, or --bs/--read/--random)",
		Example: `  basalt-bench run --addr 127.0.0.1:4420 --preset W1,W2 --qd 32 --runtime 30s --json out.json
  basalt-bench run --addr 10.0.0.1:4420,10.0.0.2:4420 --bs 8k --read 70 --random 100 --qd 1,4,16
  basalt-bench run --addr 127.0.0.1:4420 --preset W4 --verify --journal /var/tmp/j --runtime 1h`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return w.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	w.register(cmd)
	f := cmd.Flags()
	f.StringSliceVar(&w.presets, "preset", nil, "workload presets, run one after the other (see 'presets')")
	f.StringVar(&w.bs, "bs", "4k", "block size (without --preset)")
	f.IntVar(&w.read, "read", 100, "percentage of reads (without --preset)")
	f.IntVar(&w.random, "random", 100, "percentage of random offsets; the rest continue sequentially (without --preset)")
	f.IntSliceVar(&w.qds, "qd", []int{32}, "queue depth per job; several values run a sweep")
	f.IntVar(&w.jobs, "jobs", 1, "jobs, each with its own NVMe I/O queue")
	f.DurationVar(&w.ramp, "ramp", 5*time.Second, "warm-up before measuring")
	f.DurationVar(&w.runtime, "runtime", 30*time.Second, "measured time per workload")
	f.StringVar(&w.offset, "offset", "0", "start of the region")
	f.StringVar(&w.size, "size", "0", "length of the region (0: to the end)")
	f.BoolVar(&w.prefill, "prefill", false, "write the whole region sequentially first")
	f.BoolVar(&w.verify, "verify", false, "stamp every 4 KiB written and check every read")
	f.StringVar(&w.journal, "journal", "", "journal file for crash-consistent verification (implies --verify)")
	f.BoolVar(&w.resume, "resume", false, "continue an existing --journal: check the device against it first")
	f.Uint64Var(&w.seed, "seed", 0, "seed for offsets and data (default: from the clock)")
	f.StringVar(&w.jsonOut, "json", "", "write results as JSON to this file ('-': stdout, the table then goes to stderr)")
	f.IntSliceVar(&w.cpuPIDs, "cpu-pid", nil, "processes whose CPU time per I/O is reported (the system's daemons)")
	f.StringVar(&w.progress, "progress", "auto", "progress display: auto, on, off")
	f.StringVar(&w.label, "label", "", "workload name in the output (default: the preset or a description)")
	return cmd
}

// specs expands presets x queue depths (or the explicit shape) into specs.
func (w *workloadFlags) specs() ([]bench.Spec, error) {
	if w.seed == 0 {
		w.seed = uint64(clock.Real().Now().UnixNano())
	}
	bs, err := parseSize(w.bs)
	if err != nil {
		return nil, err
	}
	off, err := parseSize(w.offset)
	if err != nil {
		return nil, err
	}
	size, err := parseSize(w.size)
	if err != nil {
		return nil, err
	}
	base := bench.Spec{BlockSize: int(bs), ReadPct: w.read, RandomPct: w.random, Jobs: w.jobs, Ramp: w.ramp,
		Runtime: w.runtime, Offset: off, Size: size, Verify: w.verify || w.journal != "", Seed: w.seed}
	var out []bench.Spec
	add := func(s bench.Spec, name string) {
		if presetFixesQD(name) {
			s.Name = w.nameFor(name, s, false)
			out = append(out, s)
			return
		}
		for _, qd := range w.qds {
			c := s
			c.QueueDepth = qd
			c.Name = w.nameFor(name, c, len(w.qds) > 1)
			out = append(out, c)
		}
	}
	if len(w.presets) == 0 {
		add(base, "")
		return out, nil
	}
	for _, n := range w.presets {
		p, err := bench.LookupPreset(n)
		if err != nil {
			return nil, err
		}
		s := base
		p.Apply(&s)
		add(s, p.Name)
	}
	return out, nil
}

func presetFixesQD(name string) bool {
	p, err := bench.LookupPreset(name)
	return err == nil && p.QueueDepth != 0
}

func (w *workloadFlags) nameFor(preset string, s bench.Spec, sweep bool) string {
	name := w.label
	if name == "" {
		name = preset
	}
	if name == "" {
		name = fmt.Sprintf("%dk-%dr-%drand", s.BlockSize>>10, s.ReadPct, s.RandomPct)
	}
	if sweep {
		name = fmt.Sprintf("%s-qd%d", name, s.QueueDepth)
	}
	return name
}

func (w *workloadFlags) run(ctx context.Context, stdout, stderr io.Writer) error {
	specs, err := w.specs()
	if err != nil {
		return err
	}
	maxQD := 1
	for _, s := range specs {
		maxQD = max(maxQD, s.QueueDepth)
	}
	dev, err := w.open(ctx, w.jobs, max(maxQD, 16))
	if err != nil {
		return err
	}
	defer dev.Close()
	v, err := w.verifier(ctx, dev, specs[0], stderr)
	if err != nil {
		return err
	}
	if v != nil {
		defer v.Close()
	}
	if w.prefill {
		if err := prefill(ctx, dev, specs[0], v, w.progress, stderr, stderr); err != nil {
			return err
		}
	}
	var results []*bench.Result
	var runErr error
	for _, s := range specs {
		fmt.Fprintf(stderr, "basalt-bench: %s on %s: bs %d, %d%% read, %d%% random, QD %d x %d jobs, %v + %v\n",
			s.Name, dev.Describe(), s.BlockSize, s.ReadPct, s.RandomPct, s.QueueDepth, s.Jobs, s.Ramp, s.Runtime)
		prog, finish := progressFor(w.progress, stderr, s.Name)
		res, err := bench.Run(ctx, dev, s, bench.Options{Verifier: v, Progress: prog, CPUPIDs: w.cpuPIDs})
		finish()
		if res != nil {
			results = append(results, res)
		}
		if err != nil {
			runErr = fmt.Errorf("%s: %w", s.Name, err)
			break
		}
	}
	return errors.Join(runErr, w.output(results, stdout, stderr))
}

// verifier returns the run's Verifier: none, in memory, a new journal, or
// a resumed one.
func (w *workloadFlags) verifier(ctx context.Context, dev bench.Device, s bench.Spec, stderr io.Writer) (*bench.Verifier, error) {
	if !s.Verify {
		return nil, nil
	}
	if w.engine == "socket" {
		return nil, fmt.Errorf("--engine socket stores nothing: there is nothing to verify")
	}
	size := s.Size
	if size == 0 {
		size = dev.Size() - s.Offset
	}
	switch {
	case w.journal == "":
		return bench.NewVerifier(dev.LBASize(), s.Offset, size, s.Seed)
	case w.resume:
		v, rep, err := bench.ResumeVerifier(ctx, dev, w.journal)
		if rep != nil {
			fmt.Fprintf(stderr, "basalt-bench: resumed %s: %d units checked, %d newer (in flight), %d failed\n",
				w.journal, rep.Checked, rep.Newer, rep.Failed)
		}
		return v, err
	}
	if _, err := os.Stat(w.journal); err == nil {
		return nil, fmt.Errorf("journal %s exists: use --resume to continue it, or remove it", w.journal)
	}
	return bench.NewJournaledVerifier(w.journal, dev.LBASize(), s.Offset, size, s.Seed)
}

func (w *workloadFlags) output(results []*bench.Result, stdout, stderr io.Writer) error {
	table := stdout
	if w.jsonOut == "-" {
		table = stderr
	}
	if err := bench.WriteTable(table, results...); err != nil {
		return err
	}
	if w.jsonOut == "" {
		return nil
	}
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if w.jsonOut == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(w.jsonOut, b, 0o644)
}
