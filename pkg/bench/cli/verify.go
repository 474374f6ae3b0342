package cli

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"basalt/pkg/bench"
	"basalt/pkg/clock"
)

func newVerifyCommand() *cobra.Command {
	var t deviceFlags
	var journal, jsonOut string
	cmd := &cobra.Command{
		Use:   "verify --journal FILE",
		Short: "check every acknowledged write recorded in a journal (after a crash or kill)",
		Long: `verify reads back every 4 KiB unit the journal has a record for. A unit must
hold the generation last acknowledged to the writer, or a newer one that was
in flight when the writer stopped, never an older one, with a valid checksum
and its own address. Exit status 1 if any unit fails.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if journal == "" {
				return fmt.Errorf("--journal is required")
			}
			dev, err := t.open(cmd.Context(), 1, 16)
			if err != nil {
				return err
			}
			defer dev.Close()
			clk := clock.Real()
			start := clk.Now()
			rep, err := bench.VerifyJournal(cmd.Context(), dev, journal)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "verify %s against %s in %.1f s:\n", journal, dev.Describe(), clk.Since(start).Seconds())
			fmt.Fprintf(out, "  journal: %d records, %d torn bytes ignored, %d writes in flight at the end\n", rep.Records, rep.TornBytes, rep.InFlight)
			fmt.Fprintf(out, "  units:   %d checked, %d acknowledged generation, %d newer (in flight), %d never acknowledged, %d FAILED\n",
				rep.Checked, rep.OK, rep.Newer, rep.Unknown, rep.Failed)
			for _, e := range rep.Errors {
				fmt.Fprintf(out, "  %v\n", e)
			}
			if jsonOut != "" {
				b, _ := json.MarshalIndent(rep, "", "  ")
				if err := os.WriteFile(jsonOut, append(b, '\n'), 0o644); err != nil {
					return err
				}
			}
			if rep.Failed > 0 {
				return fmt.Errorf("%w: %d units failed", bench.ErrVerify, rep.Failed)
			}
			return nil
		},
	}
	t.register(cmd)
	cmd.Flags().StringVar(&journal, "journal", "", "journal written by 'run --journal'")
	cmd.Flags().StringVar(&jsonOut, "json", "", "also write the report as JSON to this file")
	return cmd
}
