package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"basalt/pkg/api"
)

// Snapshots on the command line, mirroring the API's snapshot routes
// (pkg/api, snapshots.go): snapshot create|list|delete and volume rollback.

func snapshotCmd(o *options) *cobra.Command {
	return group("snapshot", "Crash-consistent snapshots of a volume",
		snapshotVerb(o, "create VOLUME NAME", "Take a snapshot of a volume (thin and instant: no data is copied)",
			func(ctx context.Context, c *api.Client, args []string) (any, func(io.Writer), error) {
				sv, err := c.CreateSnapshot(ctx, args[0], args[1])
				return sv, func(w io.Writer) {
					fmt.Fprintf(w, "Snapshot %s@%s taken (number %d of the volume's).\n", sv.Volume, sv.Name, sv.Order)
				}, err
			}, "VOLUME", "NAME"),
		snapshotVerb(o, "list VOLUME", "List a volume's snapshots, the oldest first, with the space each alone pins",
			listed(func(ctx context.Context, c *api.Client, args []string) (api.SnapshotsView, error) {
				return c.Snapshots(ctx, args[0])
			}), "VOLUME"),
		snapshotVerb(o, "delete VOLUME NAME", "Delete a snapshot (its space returns in the background)",
			listed(func(ctx context.Context, c *api.Client, args []string) (api.SnapshotsView, error) {
				return c.DeleteSnapshot(ctx, args[0], args[1])
			}), "VOLUME", "NAME"))
}

// volumeRollbackCmd is volume rollback VOLUME SNAP [--force].
func volumeRollbackCmd(o *options) *cobra.Command {
	var force bool
	c := snapshotVerb(o, "rollback VOLUME SNAP",
		"Make a volume read as one of its snapshots (refused while a host is connected, unless --force)",
		listed(func(ctx context.Context, c *api.Client, args []string) (api.SnapshotsView, error) {
			return c.Rollback(ctx, args[0], args[1], force)
		}), "VOLUME", "SNAP")
	c.Flags().BoolVar(&force, "force", false, "roll back even while hosts are connected (they see the data change under them)")
	return c
}

// snapshotOp runs a snapshot call and returns its answer with its table.
type snapshotOp func(context.Context, *api.Client, []string) (any, func(io.Writer), error)

// listed is a snapshotOp of a call that answers the volume's snapshots.
func listed(call func(context.Context, *api.Client, []string) (api.SnapshotsView, error)) snapshotOp {
	return func(ctx context.Context, c *api.Client, args []string) (any, func(io.Writer), error) {
		v, err := call(ctx, c, args)
		return v, func(w io.Writer) { printSnapshots(w, v) }, err
	}
}

// snapshotVerb is a command of the positional arguments names that runs op
// and prints its answer.
func snapshotVerb(o *options, use, short string, op snapshotOp, names ...string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: exactArgs(names...),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, table, err := op(ctx, o.client(), args)
			if err != nil {
				return err
			}
			return o.print(v, table)
		},
	}
}

// printSnapshots is the table of a volume's snapshots.
func printSnapshots(w io.Writer, v api.SnapshotsView) {
	if len(v.Snapshots) == 0 {
		fmt.Fprintf(w, "volume %s has no snapshots; take one with: basaltctl snapshot create %s NAME\n", v.Volume, v.Volume)
		return
	}
	fmt.Fprintln(w, "#\tSNAPSHOT\tPINNED")
	for _, sn := range v.Snapshots {
		fmt.Fprintf(w, "%d\t%s@%s\t%s\n", sn.Order, v.Volume, sn.Name, humanSize(sn.PinnedBytes))
	}
}
