package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"basalt/pkg/nvmekey"
)

// HostSecret is one host's credentials on a [[subsystem]]:
//
//	[[subsystem.host_secret]]
//	host = "nqn.2014-08.org.nvmexpress:uuid:..."   # listed in hosts
//	dhchap_secret_file = "/etc/basalt/host1.key"   # or dhchap_secret = "DHHC-1:.."
//	dhchap_ctrl_secret_file = ""                   # bidirectional; or dhchap_ctrl_secret
//	tls_psk_file = ""                              # or tls_psk = "NVMeTLSkey-1:.."
//
// Each secret is given inline or as a file (better: the configuration
// file then holds no secret); a file holds the secret alone, surrounding
// white space ignored. Files are read when the node starts (Resolve).
type HostSecret struct {
	Host                 string `toml:"host"`
	DHCHAPSecret         string `toml:"dhchap_secret"`
	DHCHAPSecretFile     string `toml:"dhchap_secret_file"`
	DHCHAPCtrlSecret     string `toml:"dhchap_ctrl_secret"`
	DHCHAPCtrlSecretFile string `toml:"dhchap_ctrl_secret_file"`
	TLSPSK               string `toml:"tls_psk"`
	TLSPSKFile           string `toml:"tls_psk_file"`
}

// ResolvedSecrets are a HostSecret's values, files read.
type ResolvedSecrets struct {
	DHCHAPSecret, DHCHAPCtrlSecret, TLSPSK string
}

// secretField is one secret of a HostSecret: its inline value and file.
type secretField struct {
	name, value, file string
	parse             func(string, ...nvmekey.Option) (nvmekey.Key, error)
}

func (h *HostSecret) fields() []secretField {
	return []secretField{
		{"dhchap_secret", h.DHCHAPSecret, h.DHCHAPSecretFile, nvmekey.ParseDHCHAP},
		{"dhchap_ctrl_secret", h.DHCHAPCtrlSecret, h.DHCHAPCtrlSecretFile, nvmekey.ParseDHCHAP},
		{"tls_psk", h.TLSPSK, h.TLSPSKFile, nvmekey.ParseTLSPSK},
	}
}

// validate checks what can be checked without reading files; errors never
// hold a secret.
func (h *HostSecret) validate(where string, s *Subsystem) []error {
	var errs []error
	where = fmt.Sprintf("%s host_secret %q", where, h.Host)
	if !s.AllowAnyHost && !slices.Contains(s.Hosts, h.Host) {
		errs = append(errs, fmt.Errorf("%s: the host is not in hosts: list it there too", where))
	}
	set := 0
	for _, f := range h.fields() {
		switch {
		case f.value != "" && f.file != "":
			errs = append(errs, fmt.Errorf("%s: both %s and %s_file: give one", where, f.name, f.name))
		case f.value != "":
			if _, err := f.parse(f.value); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %w", where, f.name, err))
			}
		}
		if f.value != "" || f.file != "" {
			set++
		}
	}
	if set == 0 {
		errs = append(errs, fmt.Errorf("%s: no secret: give dhchap_secret(_file) or tls_psk(_file)", where))
	}
	if (h.DHCHAPCtrlSecret != "" || h.DHCHAPCtrlSecretFile != "") && h.DHCHAPSecret == "" && h.DHCHAPSecretFile == "" {
		errs = append(errs, fmt.Errorf("%s: dhchap_ctrl_secret needs dhchap_secret", where))
	}
	return errs
}

// validateHostSecrets checks a subsystem's host_secret entries.
func (s *Subsystem) validateHostSecrets(where string) []error {
	var errs []error
	seen := map[string]bool{}
	for i := range s.HostSecrets {
		h := &s.HostSecrets[i]
		if seen[h.Host] {
			errs = append(errs, fmt.Errorf("%s: host_secret %q twice", where, h.Host))
		}
		seen[h.Host] = true
		errs = append(errs, h.validate(where, s)...)
	}
	return errs
}

// Resolve returns the secrets, reading the files; its errors name the
// file and what is wrong, never its content.
func (h *HostSecret) Resolve() (ResolvedSecrets, error) {
	var out []string
	for _, f := range h.fields() {
		v := f.value
		if f.file != "" {
			b, err := os.ReadFile(f.file)
			if err != nil {
				return ResolvedSecrets{}, fmt.Errorf("host %s: %s_file: %w", h.Host, f.name, err)
			}
			v = strings.TrimSpace(string(b))
			if _, err := f.parse(v); err != nil {
				return ResolvedSecrets{}, fmt.Errorf("host %s: %s_file %s: %w", h.Host, f.name, f.file, err)
			}
		}
		out = append(out, v)
	}
	r := ResolvedSecrets{DHCHAPSecret: out[0], DHCHAPCtrlSecret: out[1], TLSPSK: out[2]}
	if r.DHCHAPCtrlSecret != "" && r.DHCHAPCtrlSecret == r.DHCHAPSecret {
		return ResolvedSecrets{}, errors.New("host " + h.Host + ": dhchap_ctrl_secret is the same as dhchap_secret: " +
			"give the controller a secret of its own")
	}
	return r, nil
}
