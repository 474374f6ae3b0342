package cluster

import (
	"fmt"
	"log/slog"
	"strings"

	"basalt/pkg/nvmekey"
	"basalt/target"
)

// HostSecrets are one allowed host's credentials on one volume, kept in
// the metadata (Volume.Secrets) and so on every node; the reconciler gives
// them to the volume's subsystem (target.HostSecrets). Each field is
// optional; empty means that mechanism is not configured.
//
// They are secrets: String, GoString and LogValue print only which
// mechanisms are configured (Mechanisms), and no API view carries them
// (Volume.Public).
type HostSecrets struct {
	// DHCHAPSecret is the host's DH-HMAC-CHAP secret ("DHHC-1:hh:..:").
	DHCHAPSecret string `json:"dhchap_secret,omitempty"`
	// DHCHAPCtrlSecret is the controller's (bidirectional authentication);
	// it needs DHCHAPSecret.
	DHCHAPCtrlSecret string `json:"dhchap_ctrl_secret,omitempty"`
	// TLSPSK is the configured PSK in the interchange format
	// ("NVMeTLSkey-1:hh:..:").
	TLSPSK string `json:"tls_psk,omitempty"`
}

// IsZero reports whether no mechanism is configured.
func (h HostSecrets) IsZero() bool { return h == HostSecrets{} }

// Validate checks every set field's format; its errors name the field
// and what is wrong, never the value.
func (h HostSecrets) Validate() error {
	if h.DHCHAPSecret != "" {
		if _, err := nvmekey.ParseDHCHAP(h.DHCHAPSecret); err != nil {
			return fmt.Errorf("%w: dhchap_secret: %w", ErrInvalid, err)
		}
	}
	if h.DHCHAPCtrlSecret != "" {
		if _, err := nvmekey.ParseDHCHAP(h.DHCHAPCtrlSecret); err != nil {
			return fmt.Errorf("%w: dhchap_ctrl_secret: %w", ErrInvalid, err)
		}
		switch h.DHCHAPSecret {
		case "":
			return fmt.Errorf("%w: dhchap_ctrl_secret without dhchap_secret: the controller proves itself "+
				"only to a host that authenticates (give the host's secret too)", ErrInvalid)
		case h.DHCHAPCtrlSecret:
			return fmt.Errorf("%w: dhchap_ctrl_secret is the same as dhchap_secret: give the controller "+
				"a secret of its own", ErrInvalid)
		}
	}
	if h.TLSPSK != "" {
		if _, err := nvmekey.ParseTLSPSK(h.TLSPSK); err != nil {
			return fmt.Errorf("%w: tls_psk: %w", ErrInvalid, err)
		}
	}
	return nil
}

// Mechanisms names what is configured, without any secret:
// "dh-hmac-chap (bidirectional), tls-psk"; "none" when nothing is.
func (h HostSecrets) Mechanisms() string {
	var m []string
	switch {
	case h.DHCHAPSecret != "" && h.DHCHAPCtrlSecret != "":
		m = append(m, "dh-hmac-chap (bidirectional)")
	case h.DHCHAPSecret != "":
		m = append(m, "dh-hmac-chap")
	}
	if h.TLSPSK != "" {
		m = append(m, "tls-psk")
	}
	if len(m) == 0 {
		return "none"
	}
	return strings.Join(m, ", ")
}

// String implements fmt.Stringer without the secrets.
func (h HostSecrets) String() string { return "HostSecrets{" + h.Mechanisms() + "}" }

// GoString keeps %#v from printing the secrets.
func (h HostSecrets) GoString() string { return h.String() }

// LogValue implements slog.LogValuer without the secrets.
func (h HostSecrets) LogValue() slog.Value { return slog.StringValue(h.Mechanisms()) }

// Target returns the credentials as the target holds them.
func (h HostSecrets) Target() target.HostSecrets {
	return target.HostSecrets{DHCHAPKey: h.DHCHAPSecret, DHCHAPCtrlKey: h.DHCHAPCtrlSecret, TLSPSK: h.TLSPSK}
}

// Public returns a copy of v without its hosts' secrets and its wrapped
// data key (encryption.go, Encryption and KEK stay), what API views
// and command results carry: HostAuth says instead which mechanisms each
// listed host's credentials configure. A copy that is already public
// stays as it is.
func (v *Volume) Public() *Volume {
	c := v.clone()
	if c.HostAuth == nil && len(c.Hosts) > 0 {
		c.HostAuth = make(map[string]string, len(c.Hosts))
		for _, h := range c.Hosts {
			c.HostAuth[h] = c.Secrets[h].Mechanisms()
		}
	}
	c.Secrets = nil
	c.WrappedKey = nil
	return c
}
