package api

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"basalt/pkg/cluster"
	"basalt/pkg/nvmekey"
)

// AddHostRequest is the optional body of POST /v1/volumes/{name}/hosts/{nqn}:
// the host's credentials on the volume. Every field is optional; what is
// posted replaces what the host had (posting again rotates; posting none
// leaves the host with its NQN alone). An empty body is no credentials.
type AddHostRequest struct {
	// DHCHAPSecret is the host's DH-HMAC-CHAP secret as
	// `nvme gen-dhchap-key` prints it ("DHHC-1:hh:base64:").
	DHCHAPSecret string `json:"dhchap_secret,omitempty"`
	// DHCHAPCtrlSecret is the controller's, for bidirectional
	// authentication; it needs a host secret.
	DHCHAPCtrlSecret string `json:"dhchap_ctrl_secret,omitempty"`
	// TLSPSK is a TLS PSK as `nvme gen-tls-key` prints it
	// ("NVMeTLSkey-1:hh:base64:").
	TLSPSK string `json:"tls_psk,omitempty"`
	// Generate names the secrets the node generates instead:
	// GenerateDHCHAP, GenerateDHCHAPCtrl, GenerateTLSPSK. They are
	// returned once, in AddHostView.Generated, and never again.
	Generate []string `json:"generate,omitempty"`
}

// The names AddHostRequest.Generate takes.
const (
	GenerateDHCHAP     = "dhchap"
	GenerateDHCHAPCtrl = "dhchap_ctrl"
	GenerateTLSPSK     = "tls_psk"
)

// AddHostView answers POST /v1/volumes/{name}/hosts/{nqn}: the volume
// (without secrets) and, when the request asked the node to generate
// some, those secrets, this once.
type AddHostView struct {
	VolumeView
	Generated *GeneratedSecrets `json:"generated,omitempty"`
}

// GeneratedSecrets are the secrets a node generated for a host, with the
// nvme-cli commands that use them. They are shown once: the cluster keeps
// them but never shows them again.
type GeneratedSecrets struct {
	Host             string `json:"host"`
	DHCHAPSecret     string `json:"dhchap_secret,omitempty"`
	DHCHAPCtrlSecret string `json:"dhchap_ctrl_secret,omitempty"`
	TLSPSK           string `json:"tls_psk,omitempty"`
	// ConnectAll and Connect are the volume's connect commands with
	// --hostnqn and the DH-HMAC-CHAP options.
	ConnectAll string   `json:"connect_all,omitempty"`
	Connect    []string `json:"connect,omitempty"`
	Note       string   `json:"note"`
}

// VolumeSettings is the body of PATCH /v1/volumes/{name}.
type VolumeSettings struct {
	// AllowAnyHost, when true, lets every host that can reach a node's
	// NVMe port read and write the volume; false admits only its hosts.
	AllowAnyHost *bool `json:"allow_any_host"`
}

func (s *Server) addHost(r *http.Request) (int, any, error) {
	var req AddHostRequest
	if err := readOptionalBody(r, &req); err != nil {
		return 0, nil, err
	}
	sec, gen, err := req.secrets()
	if err != nil {
		return 0, nil, err
	}
	host := r.PathValue("nqn") // PathValue is already unescaped
	res, err := s.submit(r, cluster.Command{Op: cluster.OpAddHost, Volume: r.PathValue("name"), Host: host, Secrets: &sec})
	if err != nil {
		return 0, nil, err
	}
	out := AddHostView{VolumeView: s.volumeView(r.Context(), res.Volume, res.Note)}
	if !gen.IsZero() {
		out.Generated = generatedView(host, gen, out.Connect)
	}
	return http.StatusOK, out, nil
}

func (s *Server) removeHost(r *http.Request) (int, any, error) {
	res, err := s.submit(r, cluster.Command{Op: cluster.OpRemoveHost, Volume: r.PathValue("name"), Host: r.PathValue("nqn")})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, s.volumeView(r.Context(), res.Volume, res.Note), nil
}

func (s *Server) setVolume(r *http.Request) (int, any, error) {
	var req VolumeSettings
	if err := readBody(r, &req); err != nil {
		return 0, nil, err
	}
	if req.AllowAnyHost == nil {
		return 0, nil, fmt.Errorf("%w: nothing to change: the body takes {\"allow_any_host\": true|false}", cluster.ErrInvalid)
	}
	res, err := s.submit(r, cluster.Command{Op: cluster.OpSetAllowAnyHost, Volume: r.PathValue("name"), Allow: req.AllowAnyHost})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, s.volumeView(r.Context(), res.Volume, res.Note), nil
}

// secrets returns the credentials the request sets, generating those it
// asks for, and the generated ones apart. Its errors never hold a secret.
func (req *AddHostRequest) secrets() (all, gen cluster.HostSecrets, err error) {
	all = cluster.HostSecrets{DHCHAPSecret: req.DHCHAPSecret, DHCHAPCtrlSecret: req.DHCHAPCtrlSecret, TLSPSK: req.TLSPSK}
	for i, g := range req.Generate {
		if slices.Contains(req.Generate[:i], g) {
			return all, gen, fmt.Errorf("%w: generate lists %q twice", cluster.ErrInvalid, g)
		}
		dst, fresh := secretField(&all, g), secretField(&gen, g)
		if dst == nil {
			return all, gen, fmt.Errorf("%w: generate %.40q: want %q, %q or %q", cluster.ErrInvalid, g,
				GenerateDHCHAP, GenerateDHCHAPCtrl, GenerateTLSPSK)
		}
		if *dst != "" {
			return all, gen, fmt.Errorf("%w: %s is both given and to be generated: choose one", cluster.ErrInvalid, fieldName(g))
		}
		generate := nvmekey.GenerateDHCHAP
		if g == GenerateTLSPSK {
			generate = nvmekey.GenerateTLSPSK
		}
		if *fresh, err = generate(); err != nil {
			return all, gen, err
		}
		*dst = *fresh
	}
	return all, gen, all.Validate()
}

// secretField returns the field of h that generate name g fills (nil: g
// names none).
func secretField(h *cluster.HostSecrets, g string) *string {
	switch g {
	case GenerateDHCHAP:
		return &h.DHCHAPSecret
	case GenerateDHCHAPCtrl:
		return &h.DHCHAPCtrlSecret
	case GenerateTLSPSK:
		return &h.TLSPSK
	}
	return nil
}

// fieldName is the request field a generate name fills.
func fieldName(g string) string {
	if g == GenerateTLSPSK {
		return g
	}
	return g + "_secret"
}

// generatedView returns the generated secrets with the connect commands
// that use them.
func generatedView(host string, gen cluster.HostSecrets, c Connect) *GeneratedSecrets {
	g := &GeneratedSecrets{Host: host, DHCHAPSecret: gen.DHCHAPSecret, DHCHAPCtrlSecret: gen.DHCHAPCtrlSecret,
		TLSPSK: gen.TLSPSK, Note: "these secrets are shown this once: keep them now, the cluster never shows them again " +
			"(rotate them by adding the host again)"}
	opts := " --hostnqn " + host
	if gen.DHCHAPSecret != "" {
		opts += " --dhchap-secret " + gen.DHCHAPSecret
	}
	if gen.DHCHAPCtrlSecret != "" {
		opts += " --dhchap-ctrl-secret " + gen.DHCHAPCtrlSecret
	}
	if gen.TLSPSK != "" {
		g.Note += "; for TLS, put the PSK in the host's keyring (nvme check-tls-key --insert) and add --tls"
	}
	if gen.DHCHAPSecret == "" && gen.DHCHAPCtrlSecret == "" {
		return g
	}
	if c.ConnectAll != "" {
		g.ConnectAll = c.ConnectAll + opts
	}
	for _, cmd := range c.Connect {
		g.Connect = append(g.Connect, cmd+opts)
	}
	return g
}

// readOptionalBody is readBody where an empty body is the zero value.
func readOptionalBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("%w: body: %w", cluster.ErrInvalid, err)
	}
	if len(b) > maxBody {
		return fmt.Errorf("%w: body larger than %d bytes", cluster.ErrInvalid, maxBody)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	return decodeStrict(b, v)
}
