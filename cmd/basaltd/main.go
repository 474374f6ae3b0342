// Command basaltd is the Basalt storage node daemon. A single node serves
// the volumes its configuration names over NVMe/TCP; a cluster node (a
// [cluster] section) serves the replicas the cluster metadata places on it,
// and the management API and metrics (see basaltctl).
//
//	basaltd --config /etc/basalt/basaltd.toml [--listen ADDR] [--advertise ADDR] [--log-level LEVEL] [--timer-slack D]
//	basaltd pki init --dir D [--cluster-id UUID] [--nodes 1,2,3] [--hosts 127.0.0.1,localhost]   (pki.go)
//
// Before anything else it sets the process's timer slack (--timer-slack,
// default 1ms; 0 keeps the kernel's 50µs), which means executing itself once
// more: see package timerslack for why a busy node wants it.
//
// It logs with log/slog to stderr and stops cleanly on SIGTERM or SIGINT,
// within 10 s; a second signal exits at once. A cluster node first hands the
// leadership of its volumes and of the metadata to caught-up voters (at
// most 5 s of the 10), so that hosts see a leadership transfer, not a
// crash.
//
// With the environment variable BASALT_PPROF=host:port (off by default) it
// also serves Go's profiling handlers under /debug/pprof/ on that address,
// unauthenticated: see pprof.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"basalt/pkg/config"
	"basalt/pkg/node"
	"basalt/pkg/timerslack"
)

func main() { os.Exit(run()) }

// maxTimerSlack bounds --timer-slack. Every timer of the node may fire up to
// the slack late; Raft ticks every 50 ms and a read lease ends two ticks
// early, NVMe keep-alives are counted in seconds: a few milliseconds touch
// none of them, a slack near a tick would eat the lease's margin.
const maxTimerSlack = 10 * time.Millisecond

func run() int {
	if len(os.Args) > 1 && os.Args[1] == "pki" { // pki.go: before the timer slack, which re-executes
		return runPKI(os.Args[2:], os.Stdout, os.Stderr)
	}
	path := flag.String("config", "", "configuration file (TOML; required)")
	listen := flag.String("listen", "", "override nvme.listen (host:port)")
	advertise := flag.String("advertise", "", "override nvme.advertise (host:port hosts connect to)")
	level := flag.String("log-level", "", "override log.level (debug, info, warn, error)")
	slack := flag.Duration("timer-slack", time.Millisecond,
		"how late the kernel may fire the process's timers, to coalesce the Go runtime's wake-ups (0: the kernel's default)")
	flag.Parse()
	if *slack < 0 || *slack > maxTimerSlack {
		fmt.Fprintf(os.Stderr, "basaltd: --timer-slack %v: want 0 (the kernel's default) up to %v\n", *slack, maxTimerSlack)
		return 2
	}
	if *slack > 0 {
		if err := timerslack.Ensure(*slack); err != nil {
			fmt.Fprintln(os.Stderr, "basaltd: warning: the timer slack stays the kernel's:", err)
		}
	}
	if *path == "" {
		fmt.Fprintln(os.Stderr, "basaltd: --config FILE is required (see README.md for an example)")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "basaltd:", err)
		return 2
	}
	if *listen != "" {
		cfg.NVMe.Listen = *listen
	}
	if *advertise != "" {
		cfg.NVMe.Advertise = *advertise
	}
	if *level != "" {
		cfg.Log.Level = *level
	}
	log := newLogger(cfg.Log)
	if _, err := startPprof(log); err != nil {
		log.Error("start failed", "err", err)
		return 1
	}
	n, err := node.Start(cfg, log.With("node", cfg.Node.Name))
	if err != nil {
		log.Error("start failed", "err", err)
		return 1
	}
	if cfg.Cluster != nil {
		scheme := "https"
		if cfg.Security.Insecure {
			scheme = "http"
		}
		fmt.Fprintf(os.Stderr, "\nbasaltd: node %d of %d, API on %s: basaltctl --api %s://%s cluster status\n\n",
			cfg.Cluster.NodeID, len(cfg.Cluster.Peers), n.APIAddr(), scheme, n.APIAddr())
	} else {
		printConnectHints(cfg)
	}
	return awaitStop(log, n)
}

// shutdownBound bounds a clean stop: after it basaltd exits anyway. That
// loses nothing acknowledged (every acknowledged write is in the Raft log
// or on the drives already): it is what kill -9 would do, logged.
var shutdownBound = 10 * time.Second

// handoffBound bounds the first part of a clean stop on a cluster node:
// handing the leadership of its groups to caught-up voters while it still
// serves, so that hosts pause for a leadership transfer instead of an
// election timeout.
var handoffBound = 5 * time.Second

// beforeShutdown, when set (by tests), runs before the clean stop.
var beforeShutdown func()

// awaitStop waits for SIGTERM or SIGINT, then stops the node cleanly within
// shutdownBound: a cluster node hands off its leaderships (handoffBound),
// the listeners drain until a second before the bound, the rest closes. A
// second signal during the stop exits at once (a terminal's Ctrl-C pressed
// again, a supervisor's SIGTERM after its own timeout).
func awaitStop(log *slog.Logger, n *node.Node) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	s := <-sigs
	log.Info("shutting down; a second SIGINT or SIGTERM exits at once", "signal", s.String(), "bound", shutdownBound)
	done := make(chan error, 1)
	go func() {
		if beforeShutdown != nil {
			beforeShutdown()
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(shutdownBound-time.Second, shutdownBound/2))
		defer cancel()
		n.HandOff(ctx, handoffBound) // a cluster node's leaderships first: it logs what it could not hand off
		done <- n.Shutdown(ctx)
	}()
	bound := time.NewTimer(shutdownBound)
	defer bound.Stop()
	select {
	case err := <-done:
		if err != nil {
			log.Error("shutdown", "err", err)
			return 1
		}
		log.Info("stopped")
		return 0
	case s := <-sigs:
		log.Warn("second signal: exiting now, without finishing the clean stop", "signal", s.String())
	case <-bound.C:
		log.Error("the clean stop did not finish in time: exiting without it", "bound", shutdownBound)
	}
	return 1
}

func newLogger(c config.Log) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.Level)); err != nil {
		lv = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lv}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// printConnectHints tells the administrator how a host attaches.
func printConnectHints(cfg *config.Config) {
	host, port := splitHostPort(cfg.NVMe.Advertise)
	fmt.Fprintf(os.Stderr, "\nAttach from a Linux host (modprobe nvme-tcp first):\n")
	fmt.Fprintf(os.Stderr, "  nvme discover -t tcp -a %s -s %s\n", host, port)
	for _, s := range cfg.Subsystems {
		fmt.Fprintf(os.Stderr, "  nvme connect  -t tcp -a %s -s %s -n %s\n", host, port, s.NQN)
	}
	fmt.Fprintf(os.Stderr, "  nvme connect-all -t tcp -a %s -s %s\n\n", host, port)
}

func splitHostPort(a string) (string, string) {
	for i := len(a) - 1; i >= 0; i-- {
		if a[i] == ':' {
			h := a[:i]
			if len(h) > 1 && h[0] == '[' {
				h = h[1 : len(h)-1]
			}
			return h, a[i+1:]
		}
	}
	return a, "4420"
}
