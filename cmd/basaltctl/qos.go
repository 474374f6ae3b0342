package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/qos"
)

// A volume's I/O limits on the command line: the flags of volume create
// and of volume qos set (qosFlags). IOPS are commands per second;
// bandwidth is in MB/s (10^6 bytes per second, the API's unit is bytes per
// second); --burst is how long the limits given in the same command may
// be exceeded from idle, as tokens: rate × burst (default 1s, one second's
// worth). 0 removes a limit.

// qosFlags are the limit flags of one command.
type qosFlags struct {
	cmd                       *cobra.Command
	iops, readIOPS, writeIOPS uint64
	mbps, readMBps, writeMBps float64
	burst                     time.Duration
}

// addQoSFlags registers the limit flags on c. Another verb that changes a
// volume (volume set) can take them the same way and call change.
func addQoSFlags(c *cobra.Command) *qosFlags {
	q := &qosFlags{cmd: c}
	f := c.Flags()
	f.Uint64Var(&q.iops, "max-iops", 0, "limit on reads and writes together, commands per second (0: none)")
	f.Uint64Var(&q.readIOPS, "max-read-iops", 0, "limit on reads, commands per second")
	f.Uint64Var(&q.writeIOPS, "max-write-iops", 0, "limit on writes (trims, write-zeroes included), commands per second")
	f.Float64Var(&q.mbps, "max-mbps", 0, "limit on reads and writes together, MB/s (10^6 bytes per second)")
	f.Float64Var(&q.readMBps, "max-read-mbps", 0, "limit on reads, MB/s")
	f.Float64Var(&q.writeMBps, "max-write-mbps", 0, "limit on writes, MB/s")
	f.DurationVar(&q.burst, "burst", 0, "how much above the limits given here a volume may go from idle, as time at the rate (default 1s)")
	return q
}

// change returns the limits the flags name (nil: none named), or a usage
// error.
func (q *qosFlags) change() (*cluster.QoSChange, error) {
	if q.burst < 0 || (q.cmd.Flags().Changed("burst") && q.burst == 0) {
		return nil, usageError{fmt.Errorf("--burst %v: want a positive duration, like 500ms or 2s", q.burst)}
	}
	ch := &cluster.QoSChange{}
	for _, f := range []struct {
		name string
		to   **qos.Limit
		rate func() (uint64, error)
	}{
		{"max-iops", &ch.IOPS, count(q.iops)},
		{"max-read-iops", &ch.ReadIOPS, count(q.readIOPS)},
		{"max-write-iops", &ch.WriteIOPS, count(q.writeIOPS)},
		{"max-mbps", &ch.Bytes, megabytes("max-mbps", q.mbps)},
		{"max-read-mbps", &ch.ReadBytes, megabytes("max-read-mbps", q.readMBps)},
		{"max-write-mbps", &ch.WriteBytes, megabytes("max-write-mbps", q.writeMBps)},
	} {
		if !q.cmd.Flags().Changed(f.name) {
			continue
		}
		rate, err := f.rate()
		if err != nil {
			return nil, err
		}
		lim := qos.Limit{Rate: rate}
		if q.burst > 0 && rate > 0 {
			lim.Burst = max(1, uint64(math.Round(float64(rate)*q.burst.Seconds())))
		}
		*f.to = &lim
	}
	if ch.Empty() {
		if q.cmd.Flags().Changed("burst") {
			return nil, usageError{fmt.Errorf("--burst applies to the limits given with it: give at least one --max-… flag")}
		}
		return nil, nil
	}
	if err := cluster.ValidateQoS(ch.Apply(qos.Limits{})); err != nil {
		return nil, usageError{err}
	}
	return ch, nil
}

func count(n uint64) func() (uint64, error) { return func() (uint64, error) { return n, nil } }

func megabytes(flag string, mbps float64) func() (uint64, error) {
	return func() (uint64, error) {
		if mbps < 0 || math.IsNaN(mbps) || mbps*1e6 > qos.MaxRate {
			return 0, usageError{fmt.Errorf("--%s %v: want MB/s from 0 up to %d", flag, mbps, uint64(qos.MaxRate)/1_000_000)}
		}
		return uint64(math.Round(mbps * 1e6)), nil
	}
}

// send changes the limits the flags name on volume name and returns the
// volume; sent is false, and nothing is sent, when they name none. A verb
// that changes other settings of a volume as well (volume set) registers
// the flags with addQoSFlags and calls send beside its own change.
func (q *qosFlags) send(ctx context.Context, o *options, name string) (v api.VolumeView, sent bool, err error) {
	ch, err := q.change()
	if err != nil || ch == nil {
		return v, false, err
	}
	v, err = o.client().SetQoS(ctx, name, *ch)
	return v, err == nil, err
}

// limits returns the limits the flags give a new volume.
func (q *qosFlags) limits() (qos.Limits, error) {
	ch, err := q.change()
	if err != nil || ch == nil {
		return qos.Limits{}, err
	}
	return ch.Apply(qos.Limits{}), nil
}

func volumeQoSCmd(o *options) *cobra.Command {
	return group("qos", "A volume's I/O limits (IOPS and bandwidth, reads and writes, with a burst)",
		volumeQoSSetCmd(o), volumeQoSShowCmd(o))
}

func volumeQoSSetCmd(o *options) *cobra.Command {
	var q *qosFlags
	c := &cobra.Command{
		Use:   "set NAME [--max-iops N] [--max-read-iops N] [--max-write-iops N] [--max-mbps MB/s] [--max-read-mbps MB/s] [--max-write-mbps MB/s] [--burst DURATION]",
		Short: "Change a volume's limits online; the limits not given stay, 0 removes one",
		Args:  exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, sent, err := q.send(ctx, o, args[0])
			if err != nil {
				return err
			}
			if !sent {
				return usageError{fmt.Errorf("give at least one --max-… flag (0 removes a limit)")}
			}
			return o.print(v, func(w io.Writer) { printQoS(w, v) })
		},
	}
	q = addQoSFlags(c)
	return c
}

func volumeQoSShowCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "show NAME", Short: "Show a volume's limits", Args: exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().Volume(ctx, args[0])
			if err != nil {
				return err
			}
			return o.print(v.QoS, func(w io.Writer) { printQoS(w, v) })
		},
	}
}

// printQoS prints a volume's limits, one per line.
func printQoS(w io.Writer, v api.VolumeView) {
	fmt.Fprintf(w, "Volume:\t%s\n", v.Name)
	fmt.Fprintf(w, "Limits:\t%s\n", qosText(v.QoS))
}

// qosText is a volume's limits in the CLI's units: "20000 IOPS, 400 MB/s
// write (burst 800 MB)", or "none".
func qosText(l qos.Limits) string {
	var parts []string
	add := func(lim qos.Limit, what string, bytes bool) {
		if lim.Unlimited() {
			return
		}
		burst := lim.EffectiveBurst()
		if bytes {
			parts = append(parts, fmt.Sprintf("%s MB/s%s (burst %s MB)", decimal(lim.Rate), what, decimal(burst)))
		} else {
			parts = append(parts, fmt.Sprintf("%d IOPS%s (burst %d)", lim.Rate, what, burst))
		}
	}
	add(l.IOPS, "", false)
	add(l.ReadIOPS, " read", false)
	add(l.WriteIOPS, " write", false)
	add(l.Bytes, "", true)
	add(l.ReadBytes, " read", true)
	add(l.WriteBytes, " write", true)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// decimal formats bytes as MB (10^6), without trailing zeros.
func decimal(bytes uint64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.6f", float64(bytes)/1e6), "0"), ".")
}
