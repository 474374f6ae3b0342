package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"basalt/pkg/bench"
)

// prefillBlock is the prefill's transfer size (clamped to the device's).
const prefillBlock = 128 << 10

func newPrefillCommand() *cobra.Command {
	var w workloadFlags
	cmd := &cobra.Command{
		Use:   "prefill",
		Short: "write the whole region once, sequentially, with a progress bar",
		RunE: func(cmd *cobra.Command, _ []string) error {
			w.qds = []int{16}
			specs, err := w.specs()
			if err != nil {
				return err
			}
			s := specs[0]
			dev, err := w.open(cmd.Context(), s.Jobs, 16)
			if err != nil {
				return err
			}
			defer dev.Close()
			v, err := w.verifier(cmd.Context(), dev, s, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if v != nil {
				defer v.Close()
			}
			return prefill(cmd.Context(), dev, s, v, w.progress, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	w.register(cmd)
	f := cmd.Flags()
	f.IntVar(&w.jobs, "jobs", 1, "jobs writing disjoint parts in parallel")
	f.StringVar(&w.offset, "offset", "0", "start of the region")
	f.StringVar(&w.size, "size", "0", "length of the region (0: to the end)")
	f.BoolVar(&w.verify, "verify", false, "write verification stamps (so later verified runs can check every block)")
	f.StringVar(&w.journal, "journal", "", "journal file (implies --verify)")
	f.Uint64Var(&w.seed, "seed", 0, "seed (default: from the clock)")
	f.StringVar(&w.progress, "progress", "auto", "progress display: auto, on, off")
	w.bs, w.read, w.random = "4k", 0, 0
	return cmd
}

// prefill writes s's region once with large sequential writes.
func prefill(ctx context.Context, dev bench.Device, s bench.Spec, v *bench.Verifier, mode string, out, stderr io.Writer) error {
	bs := prefillBlock
	if mt := dev.MaxTransfer(); mt > 0 && mt < bs {
		bs = mt &^ (bench.VerifyUnit - 1)
	}
	p := bench.Spec{Name: "prefill", BlockSize: bs, QueueDepth: 16, Jobs: s.Jobs, Once: true,
		Offset: s.Offset, Size: s.Size, Verify: s.Verify, Seed: s.Seed}
	fmt.Fprintf(stderr, "basalt-bench: prefill of %s: %d KiB sequential writes, QD 16 x %d jobs\n", dev.Describe(), bs>>10, s.Jobs)
	prog, finish := progressFor(mode, stderr, "prefill")
	res, err := bench.Run(ctx, dev, p, bench.Options{Verifier: v, Progress: prog})
	finish()
	if err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	fmt.Fprintf(out, "prefill: %d MiB in %.1f s (%.0f MiB/s)\n", int64(res.Write.IOs)*int64(bs)>>20, res.Seconds, res.Write.MiBps)
	return nil
}
