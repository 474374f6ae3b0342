package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"basalt/pkg/api"
)

// driveCmd mirrors /v1/drives of the node --api names: drives are a
// node's own, not the cluster's.
func driveCmd(o *options) *cobra.Command {
	return group("drive", "The drives of the node --api names", driveListCmd(o), driveFailCmd(o), driveReplaceCmd(o))
}

func driveListCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "List the node's drive slots: path, UUID, size, state, errors, and the rebuild's progress",
		Args: exactArgs(),
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().Drives(ctx)
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printDrives(w, v) })
		},
	}
}

func parseSlot(s string) (int, error) {
	slot, err := strconv.Atoi(s)
	if err != nil || slot < 0 {
		return 0, usageError{fmt.Errorf("SLOT %q: want a slot number from basaltctl drive list", s)}
	}
	return slot, nil
}

func driveFailCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "fail SLOT",
		Short: "Take a drive out: its data is served from parity and rebuilt onto the others",
		Args:  exactArgs("SLOT"),
		RunE: func(_ *cobra.Command, args []string) error {
			slot, err := parseSlot(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().FailDrive(ctx, slot)
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printDrives(w, v) })
		},
	}
}

func driveReplaceCmd(o *options) *cobra.Command {
	var wait bool
	var every time.Duration
	c := &cobra.Command{
		Use:   "replace SLOT PATH",
		Short: "Put the drive file or device at PATH into a failed slot and rebuild onto it",
		Args:  exactArgs("SLOT", "PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			slot, err := parseSlot(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := o.ctx()
			v, err := o.client().ReplaceDrive(ctx, slot, args[1])
			cancel()
			if err != nil {
				return err
			}
			if wait {
				if v, err = o.waitRebuilt(cmd.ErrOrStderr(), slot, every); err != nil {
					return err
				}
			}
			return o.print(v, func(w io.Writer) { printDrives(w, v) })
		},
	}
	c.Flags().BoolVar(&wait, "wait", false, "wait until the rebuild is done, printing its progress to stderr")
	c.Flags().DurationVar(&every, "every", 2*time.Second, "with --wait, how often to print the progress")
	return c
}

// waitRebuilt polls the node's drives until slot is rebuilt (or lost
// again), printing a progress line at each poll; --timeout bounds each
// poll, not the wait.
func (o *options) waitRebuilt(progress io.Writer, slot int, every time.Duration) (api.DrivesView, error) {
	for {
		ctx, cancel := o.ctx()
		v, err := o.client().Drives(ctx)
		cancel()
		if err != nil {
			return v, err
		}
		if slot >= len(v.Drives) {
			return v, fmt.Errorf("the node no longer lists drive slot %d", slot)
		}
		switch st := v.Drives[slot].State; st {
		case "healthy":
			fmt.Fprintf(progress, "drive %d rebuilt\n", slot)
			return v, nil
		case "failed", "evacuated":
			return v, fmt.Errorf("drive %d is %s again: the replacement failed; see basaltctl drive list and the node's log",
				slot, st)
		}
		fmt.Fprintf(progress, "drive %d: %s\n", slot, rebuildProgress(v.Rebuild))
		time.Sleep(every)
	}
}

// rebuildProgress is one line: segments, bytes, rate and time left.
func rebuildProgress(r api.RebuildView) string {
	if !r.Running {
		if r.LastError != "" {
			return "rebuild waiting to retry: " + r.LastError
		}
		return "rebuild pending"
	}
	pct := 0.0
	if r.BytesTotal > 0 {
		pct = 100 * float64(r.BytesDone) / float64(r.BytesTotal)
	}
	s := fmt.Sprintf("rebuilding %.0f%%: %d of %d segments, %s of %s at %s/s", pct, r.SegmentsDone, r.SegmentsTotal,
		humanSize(r.BytesDone), humanSize(r.BytesTotal), humanSize(int64(r.BytesPerSecond)))
	if r.ETASeconds > 0 {
		s += ", " + (time.Duration(r.ETASeconds) * time.Second).String() + " left"
	}
	return s
}

func printDrives(w io.Writer, v api.DrivesView) {
	fmt.Fprintln(w, "SLOT\tPATH\tUUID\tSIZE\tSTATE\tREADS\tWRITES\tERRORS")
	for _, d := range v.Drives {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", d.Slot, d.Path, d.UUID, humanSize(d.Size), d.State, d.Reads,
			d.Writes, d.Errors)
	}
	r := v.Rebuild
	switch {
	case r.Running:
		fmt.Fprintf(w, "Rebuild:\t%s\n", rebuildProgress(r))
	case r.LastError != "":
		fmt.Fprintf(w, "Rebuild:\tstopped: %s\n", r.LastError)
	case r.Passes > 0:
		fmt.Fprintf(w, "Rebuild:\tlast pass done %s: %d segments, %s\n", r.Finished.UTC().Format("2006-01-02 15:04 UTC"),
			r.SegmentsDone, humanSize(r.BytesDone))
	}
	if v.Note != "" {
		fmt.Fprintf(w, "Note:\t%s\n", v.Note)
	}
}
