package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/config"
)

func volumeCmd(o *options) *cobra.Command {
	return group("volume", "Replicated volumes",
		volumeCreateCmd(o), volumeListCmd(o), volumeShowCmd(o), volumeDeleteCmd(o), volumeResizeCmd(o), volumeSetCmd(o),
		volumeQoSCmd(o),      // qos.go
		volumeRollbackCmd(o)) // snapshot.go
}

func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, usageError{fmt.Errorf("--size is required (like 4GiB or 512MiB)")}
	}
	v, err := config.ParseSize(s)
	if err != nil {
		return 0, usageError{fmt.Errorf("--size %q: want a size like 4GiB, 512MiB or a byte count", s)}
	}
	return v, nil
}

func volumeCreateCmd(o *options) *cobra.Command {
	var size string
	var rf int
	var hosts []string
	var anyHost bool
	var q *qosFlags // qos.go
	var compression string
	var encryption string
	c := &cobra.Command{
		Use: "create NAME --size SIZE",
		Short: "Create a volume replicated on --rf nodes (default 3); it admits no host until one is listed " +
			"(--host, or basaltctl host add)",
		Args: exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			n, err := parseSize(size)
			if err != nil {
				return err
			}
			limits, err := q.limits()
			if err != nil {
				return err
			}
			if err := cluster.ValidateCompression(compression); err != nil {
				return usageError{fmt.Errorf("--compression %q: want lz4, zstd or none", compression)}
			}
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().CreateVolume(ctx, api.CreateVolumeRequest{Name: args[0], Size: api.Size(n), RF: rf, Hosts: hosts,
				AllowAnyHost: anyHost, QoS: limits, Compression: compression, Encryption: encryption})
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printVolume(w, v, "") })
		},
	}
	c.Flags().StringVar(&size, "size", "", "size, like 4GiB (required)")
	c.Flags().IntVar(&rf, "rf", 0, "replication factor 1..3 (default: 3, or the number of nodes if fewer)")
	c.Flags().StringArrayVar(&hosts, "host", nil, "host NQN allowed to connect (repeat for several; "+
		"give it credentials with basaltctl host add)")
	c.Flags().BoolVar(&anyHost, "allow-any-host", false, allowAnyHostHelp)
	q = addQoSFlags(c)
	c.Flags().StringVar(&compression, "compression", "none", "inline compression of the volume's blocks on "+
		"the nodes' drives: lz4, zstd or none (not with --encryption)")
	c.Flags().StringVar(&encryption, "encryption", "none", encryptionHelp) // encryption.go
	return c
}

// allowAnyHostHelp says plainly what --allow-any-host does.
const allowAnyHostHelp = "let ANY host that can reach a node's NVMe port read and write the volume, " +
	"listed or not (only for a trusted network)"

func volumeSetCmd(o *options) *cobra.Command {
	var anyHost bool
	c := &cobra.Command{
		Use:   "set NAME --allow-any-host=true|false",
		Short: "Change a volume's settings: --allow-any-host=false admits only its listed hosts again",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("allow-any-host") {
				return usageError{fmt.Errorf("nothing to change: give --allow-any-host=true or --allow-any-host=false")}
			}
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().SetAllowAnyHost(ctx, args[0], anyHost)
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printVolume(w, v, "") })
		},
	}
	c.Flags().BoolVar(&anyHost, "allow-any-host", false, allowAnyHostHelp+"; false: only the listed hosts")
	return c
}

func volumeListCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "List the volumes", Args: exactArgs(),
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().Volumes(ctx)
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printVolumes(w, v) })
		},
	}
}

func volumeShowCmd(o *options) *cobra.Command {
	var via string
	c := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a volume: replicas, leader, ANA state per node, and the nvme-cli commands to attach it",
		Args:  exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().Volume(ctx, args[0])
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printVolume(w, v, via) })
		},
	}
	c.Flags().StringVar(&via, "via", "", "print the connect commands for a host that reaches the nodes at this address "+
		"(a qemu VM with user networking: 10.0.2.2)")
	return c
}

func volumeDeleteCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "delete NAME", Short: "Delete a volume and all its data on every node", Args: exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			if err := o.client().DeleteVolume(ctx, args[0]); err != nil {
				return err
			}
			v := map[string]string{"deleted": args[0]}
			return o.print(v, func(w io.Writer) { fmt.Fprintf(w, "volume %s deleted\n", args[0]) })
		},
	}
}

func volumeResizeCmd(o *options) *cobra.Command {
	var size string
	c := &cobra.Command{
		Use: "resize NAME --size SIZE", Short: "Grow a volume (hosts see the new size once every replica has grown)",
		Args: exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			n, err := parseSize(size)
			if err != nil {
				return err
			}
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().ResizeVolume(ctx, args[0], n)
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printVolume(w, v, "") })
		},
	}
	c.Flags().StringVar(&size, "size", "", "new size, like 8GiB (required)")
	return c
}
