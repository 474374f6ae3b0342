package main

import (
	"fmt"
	"io"
	"strings"

	"basalt/pkg/api"

	"github.com/spf13/cobra"
)

// encryptionHelp says what --encryption does.
const encryptionHelp = "encryption at rest: aes-xts-256 (a random data key per volume, wrapped under the " +
	"cluster's key-encryption key from security.kek_file) or none"

// clusterRotateKEKCmd mirrors POST /v1/cluster/rotate-kek.
func clusterRotateKEKCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "rotate-kek",
		Short: "Re-wrap every encrypted volume's data key under the newest key-encryption key of the " +
			"answering node's security.kek_file (no data is rewritten); older keys can be removed after",
		Args: exactArgs(),
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().RotateKEK(ctx)
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printRotation(w, v) })
		},
	}
}

func printRotation(w io.Writer, v api.RotateKEKView) {
	names := "none"
	if len(v.Rewrapped) > 0 {
		names = strings.Join(v.Rewrapped, ", ")
	}
	fmt.Fprintf(w, "Every encrypted volume's data key is wrapped under %q; re-wrapped now: %s\n", v.KEK, names)
}

// encryptionText is a volume's encryption for its view.
func encryptionText(v api.VolumeView) string {
	if v.Encryption == "" {
		return "none"
	}
	return v.Encryption + " (data key wrapped under KEK " + v.KEK + ")"
}
