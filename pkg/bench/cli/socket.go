package cli

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"basalt/pkg/bench"
)

func newSocketServerCommand() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "socket-server",
		Short: "serve --engine socket: an echo server over TCP that stores nothing (the network floor)",
		Long: `socket-server answers 'run --engine socket': every I/O is one request and one
response over TCP (a write's data to the server, a read's data back), with
no storage behind it. Run against it, the presets measure what a round trip
costs on this machine, the floor under any networked storage. It prints
"listening on ADDR" on stdout once it accepts connections, and serves until
SIGINT or SIGTERM.`,
		Example: `  basalt-bench socket-server --listen 127.0.0.1:0
  basalt-bench run --engine socket --addr 127.0.0.1:PORT --preset QD1-read,QD1-write`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			// Stdout is not buffered: a script reading the line sees it now.
			if _, err := fmt.Fprintf(cmd.OutOrStdout(), "listening on %s\n", ln.Addr()); err != nil {
				ln.Close()
				return err
			}
			return bench.ServeSocket(cmd.Context(), ln, slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to listen on (port 0: a free port, printed)")
	return cmd
}
