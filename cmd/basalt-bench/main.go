// Command basalt-bench is a fio-shaped load generator for Basalt volumes
// over NVMe/TCP (and, built with -tags ceph, Ceph RBD images): presets for
// the reference workloads, latency percentiles, data verification with a
// crash-safe journal. See `basalt-bench --help` and pkg/bench.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"basalt/pkg/bench/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
