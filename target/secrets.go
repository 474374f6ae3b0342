package target

import "basalt/pkg/nvme"

// HostSecrets are the credentials one host uses with one subsystem. Every
// field is a secret: it is never logged and never appears in a status or
// log page. An empty field means that mechanism is not configured for the
// host.
type HostSecrets struct {
	// DHCHAPKey is the host's DH-HMAC-CHAP secret in the representation
	// `nvme gen-dhchap-key` prints ("DHHC-1:hh:base64:"). When set, a
	// Connect from the host is answered with authentication required
	// (NVMe Base 2.0 §8.13) and only Authentication Send/Receive pass
	// until the host has proven it knows the secret.
	DHCHAPKey string
	// DHCHAPCtrlKey, when set, is the controller's secret: the host may
	// ask the controller to prove itself too (bidirectional
	// authentication).
	DHCHAPCtrlKey string
	// TLSPSK is the configured PSK in the interchange format
	// `nvme gen-tls-key` prints ("NVMeTLSkey-1:hh:base64:"); when set, the
	// host may open a TLS 1.3 secure channel with it (NVMe/TCP §3.6).
	TLSPSK string
}

// IsZero reports whether no mechanism is configured.
func (h HostSecrets) IsZero() bool { return h == HostSecrets{} }

// SetHostSecrets replaces the credentials of hostNQN on s (zero: none).
// Controllers already authenticated keep running; the next Connect or
// re-authentication uses the new secrets (rotation).
func (s *Subsystem) SetHostSecrets(hostNQN string, sec HostSecrets) {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if sec.IsZero() {
		delete(s.secrets, hostNQN)
		return
	}
	if s.secrets == nil {
		s.secrets = make(map[string]HostSecrets)
	}
	s.secrets[hostNQN] = sec
}

// HostSecrets returns the credentials configured for hostNQN on s.
func (s *Subsystem) HostSecrets(hostNQN string) (HostSecrets, bool) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	sec, ok := s.secrets[hostNQN]
	return sec, ok
}

// HostSecrets returns the credentials of hostNQN on the subsystem named
// subNQN. For the discovery subsystem it returns every set of secrets
// the host has on any local subsystem, each distinct one once (a host
// authenticates to the discovery controller with any of its keys).
func (t *Target) HostSecrets(subNQN, hostNQN string) []HostSecrets {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []HostSecrets
	add := func(s *Subsystem) {
		sec, ok := s.secrets[hostNQN]
		if !ok {
			return
		}
		for _, o := range out {
			if o == sec {
				return
			}
		}
		out = append(out, sec)
	}
	if subNQN == nvme.DiscoveryNQN {
		for _, s := range t.mu.subsystems {
			add(s)
		}
		return out
	}
	if s := t.mu.subsystems[subNQN]; s != nil {
		add(s)
	}
	return out
}
