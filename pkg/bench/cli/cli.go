// Package cli is basalt-bench's command line (cobra): flags in, a Spec and
// a Device out, results as a table and JSON.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"basalt/pkg/bench"
	"basalt/pkg/bench/rbd"
)

// deviceFlags holds the flags that select the device under test.
type deviceFlags struct {
	engine      string
	addrs       []string
	nqn         string
	hostNQN     string
	nsid        uint32
	pathTimeout time.Duration
	cephConf    string
	cephID      string
	pool        string
	image       string
	socketSize  string
}

func (t *deviceFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&t.engine, "engine", "nvme", "device engine: nvme (Basalt over NVMe/TCP), rbd (Ceph; needs a binary built with -tags ceph) "+
		"or socket (no storage: one round trip per I/O with 'basalt-bench socket-server', the network floor)")
	f.StringSliceVar(&t.addrs, "addr", nil, "NVMe/TCP path host:port (repeat or comma-separate for multipath; I/O follows ANA); "+
		"socket: the echo server's host:port")
	f.StringVar(&t.nqn, "nqn", "nqn.2026-11.io.basalt:vol1", "subsystem NQN")
	f.StringVar(&t.hostNQN, "hostnqn", "", "host NQN (default: generated)")
	f.Uint32Var(&t.nsid, "nsid", 1, "namespace ID")
	f.DurationVar(&t.pathTimeout, "path-timeout", 60*time.Second, "how long I/O waits for a usable path before failing")
	f.StringVar(&t.cephConf, "ceph-conf", "", "rbd: ceph.conf path")
	f.StringVar(&t.cephID, "ceph-id", "admin", "rbd: cephx client id")
	f.StringVar(&t.pool, "pool", "rbd", "rbd: pool")
	f.StringVar(&t.image, "image", "", "rbd: image name")
	f.StringVar(&t.socketSize, "socket-size", "1GiB", "socket: the capacity the device claims (offsets only; nothing is stored)")
}

// open opens the device for jobs queues of depth qd each.
func (t *deviceFlags) open(ctx context.Context, jobs, qd int) (bench.Device, error) {
	switch t.engine {
	case "nvme":
		if len(t.addrs) == 0 {
			return nil, fmt.Errorf("--addr is required with --engine nvme")
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return bench.DialNVMe(dctx, bench.NVMeConfig{Addrs: t.addrs, NQN: t.nqn, HostNQN: t.hostNQN, NSID: t.nsid,
			Queues: jobs, QueueDepth: qd, PathTimeout: t.pathTimeout})
	case "rbd":
		if t.image == "" {
			return nil, fmt.Errorf("--image is required with --engine rbd")
		}
		return rbd.Open(rbd.Config{Conf: t.cephConf, ClientID: t.cephID, Pool: t.pool, Image: t.image})
	case "socket":
		if len(t.addrs) != 1 {
			return nil, fmt.Errorf("--engine socket needs one --addr host:port: the address 'basalt-bench socket-server' printed")
		}
		size, err := parseSize(t.socketSize)
		if err != nil {
			return nil, fmt.Errorf("--socket-size: %w", err)
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return bench.DialSocket(dctx, t.addrs[0], size)
	}
	return nil, fmt.Errorf("unknown engine %q (nvme, rbd or socket)", t.engine)
}

// Execute runs the basalt-bench command line and returns the exit code.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:   "basalt-bench",
		Short: "fio-shaped load generator for Basalt volumes (NVMe/TCP) and Ceph RBD images",
		Long: `basalt-bench drives a block device with a fio-like workload and reports IOPS,
bandwidth and latency percentiles. The reference workloads W1-W5 and the
QD 1 runs are presets. --verify stamps every 4 KiB written with its address,
a generation and a checksum and checks every read; --journal makes that
knowledge survive a crash: 'basalt-bench verify --journal F' checks every
acknowledged write afterwards.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newRunCommand(), newPrefillCommand(), newVerifyCommand(), newPresetsCommand(), newSocketServerCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "basalt-bench:", err)
		return 1
	}
	return 0
}

func newPresetsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "presets",
		Short: "list the workload presets",
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, p := range bench.Presets {
				qd := "--qd"
				if p.QueueDepth != 0 {
					qd = strconv.Itoa(p.QueueDepth)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-10s bs=%-6d read=%3d%% random=%3d%% qd=%-5s %s\n",
					p.Name, p.BlockSize, p.ReadPct, p.RandomPct, qd, p.Description)
			}
			return nil
		},
	}
}

// parseSize reads "4096", "4k", "4KiB", "1m", "4GiB".
func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult, t = 1<<10, t[:n-1]
		case 'm':
			mult, t = 1<<20, t[:n-1]
		case 'g':
			mult, t = 1<<30, t[:n-1]
		case 't':
			mult, t = 1<<40, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q (use e.g. 4096, 4k, 1GiB)", s)
	}
	return v * mult, nil
}

// progressFor returns a progress callback for mode auto|on|off.
func progressFor(mode string, w io.Writer, label string) (func(bench.Progress), func()) {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	switch mode {
	case "off":
		return nil, func() {}
	case "on":
		tty = true
	}
	r := bench.NewProgressReporter(w, label, tty, 5*time.Second)
	return r.Update, r.Finish
}
