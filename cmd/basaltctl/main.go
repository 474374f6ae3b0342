// Command basaltctl manages a Basalt cluster through any node's HTTP API.
// Its verbs mirror the API:
//
//	basaltctl [--api URL] [-o table|json] cluster status
//	basaltctl node list                (with each node's scrub schedule)
//	basaltctl volume create NAME --size 4GiB [--rf 3] [--host NQN ...] [--allow-any-host]
//	basaltctl volume list | show NAME [--via HOST] | delete NAME | resize NAME --size SIZE
//	basaltctl volume set NAME --allow-any-host=true|false
//	basaltctl host add VOLUME NQN [--dhchap-secret S|@FILE|generate] [--dhchap-ctrl-secret ..] [--tls-psk ..]
//	basaltctl host remove VOLUME NQN
//	basaltctl drive list | fail SLOT | replace SLOT PATH [--wait]   (the --api node's drives)
//
// A volume admits no host until one is listed. Secrets given as @FILE are
// read from that file, so that they stay out of the shell's history; the
// ones a node generates are printed once, with the nvme connect commands
// that use them.
//
// Credentials (credentials.go) come from the file $BASALT_CREDENTIALS
// names, else ~/.config/basalt/credentials.json; $BASALT_API, $BASALT_CA
// and $BASALT_TOKEN override one field each, --api, --ca and --token all
// of them; the API defaults to https://127.0.0.1:9420. Errors go to
// stderr with what to do about them; the exit status is 1 for an error
// from the cluster (a refused token too), 2 for a usage error, 3 when the
// API is unreachable.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/spf13/cobra"

	"basalt/pkg/api"
	"basalt/pkg/auth"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// options are the global flags.
type options struct {
	api, caFile, token string
	output             string
	timeout            time.Duration
	out                io.Writer
	// creds are the resolved credentials, credSrc where they came
	// from, cl the client built with them (credentials.go).
	creds   auth.Credentials
	credSrc auth.Source
	cl      *api.Client
}

func (o *options) client() *api.Client { return o.cl }

func (o *options) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), o.timeout)
}

// usageError marks errors in the command line.
type usageError struct{ error }

// run executes the command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o := &options{out: stdout}
	root := newRoot(o)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ae *api.Error
	var ue *url.Error
	switch {
	case errors.As(err, &ae):
		fmt.Fprintf(stderr, "basaltctl: %s\n", ae.Message)
		if h := o.authHint(ae); h != "" {
			fmt.Fprintf(stderr, "  hint: %s\n", h)
		} else if ae.Hint != "" {
			fmt.Fprintf(stderr, "  hint: %s\n", ae.Hint)
		}
		return 1
	case errors.As(err, &ue):
		hint := tlsHint(err)
		if hint == "" {
			hint = "is a node running? Pass its API address with --api https://HOST:9420 (or set BASALT_API)"
		}
		fmt.Fprintf(stderr, "basaltctl: %v\n  hint: %s\n", err, hint)
		return 3
	default: // the command line
		fmt.Fprintf(stderr, "basaltctl: %v\n  hint: see basaltctl --help\n", err)
		return 2
	}
}

func newRoot(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:           "basaltctl",
		Short:         "Manage a Basalt block storage cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if o.output != "table" && o.output != "json" {
				return usageError{fmt.Errorf("-o %q: want table or json", o.output)}
			}
			return o.resolve()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&o.api, "api", "", "API of any node of the cluster (env BASALT_API; default "+auth.DefaultAPI+")")
	pf.StringVar(&o.caFile, "ca", "", "the cluster's CA certificate, ca.crt (env BASALT_CA)")
	pf.StringVar(&o.token, "token", "", "API token (env BASALT_TOKEN; better: a credentials file in BASALT_CREDENTIALS)")
	pf.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	pf.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the cluster")
	root.AddCommand(clusterCmd(o), nodeCmd(o), volumeCmd(o), snapshotCmd(o), hostCmd(o), driveCmd(o))
	return root
}

// group returns a command that only holds subcommands: run alone it
// prints its help, with an unknown subcommand it fails.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
			}
			return cmd.Help()
		}}
	c.AddCommand(subs...)
	return c
}

// exactArgs is cobra.ExactArgs with a usage error naming the arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageError{fmt.Errorf("want %d argument(s): %v; got %d", len(names), names, len(args))}
		}
		return nil
	}
}

func clusterCmd(o *options) *cobra.Command {
	return group("cluster", "Cluster-wide status", &cobra.Command{
		Use: "status", Short: "Show the cluster's health, metadata leader, nodes and volumes", Args: exactArgs(),
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().Cluster(ctx)
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printCluster(w, v) })
		},
	}, clusterRotateKEKCmd(o)) // encryption.go
}
