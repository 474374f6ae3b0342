package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"basalt/pkg/api"
)

func hostCmd(o *options) *cobra.Command {
	return group("host", "Hosts allowed to connect to a volume, and their credentials",
		hostAddCmd(o), hostRemoveCmd(o))
}

// secretFlag is one credential option of host add: a value, @FILE, or
// "generate".
type secretFlag struct {
	flag, field, gen string // the flag, the request field, the generate name
	value            string
}

// resolve puts the flag's secret, or its generate request, into req.
func (f *secretFlag) resolve(req *api.AddHostRequest) error {
	v := f.value
	switch {
	case v == "":
		return nil
	case v == "generate":
		req.Generate = append(req.Generate, f.gen)
		return nil
	case strings.HasPrefix(v, "@"):
		b, err := os.ReadFile(v[1:])
		if err != nil {
			return usageError{fmt.Errorf("--%s: %w", f.flag, err)}
		}
		v = strings.TrimSpace(string(b))
		if v == "" {
			return usageError{fmt.Errorf("--%s: %s is empty", f.flag, f.value[1:])}
		}
	}
	switch f.field {
	case "dhchap_secret":
		req.DHCHAPSecret = v
	case "dhchap_ctrl_secret":
		req.DHCHAPCtrlSecret = v
	default:
		req.TLSPSK = v
	}
	return nil
}

func hostAddCmd(o *options) *cobra.Command {
	flags := []*secretFlag{
		{flag: "dhchap-secret", field: "dhchap_secret", gen: api.GenerateDHCHAP},
		{flag: "dhchap-ctrl-secret", field: "dhchap_ctrl_secret", gen: api.GenerateDHCHAPCtrl},
		{flag: "tls-psk", field: "tls_psk", gen: api.GenerateTLSPSK},
	}
	c := &cobra.Command{
		Use: "add VOLUME NQN",
		Short: "Allow a host NQN on a volume, with its credentials (adding it again replaces them: rotation; " +
			"without credential flags it has none)",
		Args: exactArgs("VOLUME", "NQN"),
		RunE: func(_ *cobra.Command, args []string) error {
			var req api.AddHostRequest
			for _, f := range flags {
				if err := f.resolve(&req); err != nil {
					return err
				}
			}
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().AddHostWith(ctx, args[0], args[1], req)
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) {
				printVolume(w, v.VolumeView, "")
				printGenerated(w, v.Generated)
			})
		},
	}
	help := map[string]string{
		"dhchap-secret": "the host's DH-HMAC-CHAP secret as nvme gen-dhchap-key prints it (DHHC-1:..), " +
			"@FILE to read it from a file, or generate: the node makes one and prints it once",
		"dhchap-ctrl-secret": "the controller's DH-HMAC-CHAP secret, for bidirectional authentication " +
			"(needs --dhchap-secret): a secret, @FILE or generate",
		"tls-psk": "a TLS PSK as nvme gen-tls-key prints it (NVMeTLSkey-1:..): a PSK, @FILE or generate",
	}
	for _, f := range flags {
		c.Flags().StringVar(&f.value, f.flag, "", help[f.flag])
	}
	return c
}

func hostRemoveCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use: "remove VOLUME NQN", Short: "Disallow a host NQN (its connections are closed, its credentials deleted)",
		Args: exactArgs("VOLUME", "NQN"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := o.ctx()
			defer cancel()
			v, err := o.client().RemoveHost(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			return o.print(v, func(w io.Writer) { printVolume(w, v, "") })
		},
	}
}

// printGenerated prints the secrets a node generated, the one time they
// are shown.
func printGenerated(w io.Writer, g *api.GeneratedSecrets) {
	if g == nil {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Generated for %s:\n", g.Host)
	for _, s := range [][2]string{{"DH-HMAC-CHAP secret", g.DHCHAPSecret},
		{"controller secret", g.DHCHAPCtrlSecret}, {"TLS PSK", g.TLSPSK}} {
		if s[1] != "" {
			fmt.Fprintf(w, "  %s:\t%s\n", s[0], s[1])
		}
	}
	defer fmt.Fprintf(w, "  note: %s\n", g.Note)
	if g.ConnectAll == "" && len(g.Connect) == 0 {
		return
	}
	fmt.Fprintln(w, "Attach from that host with:")
	fmt.Fprintf(w, "  every path at once:   %s\n", g.ConnectAll)
	for i, cmd := range g.Connect {
		label := "  or path by path:"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(w, "%-23s %s\n", label, cmd)
	}
}
