package target

import (
	"fmt"
	"strings"

	"basalt/pkg/nvme"
)

// TLSMode is what a port offers of the NVMe/TCP secure channel (TLS 1.3
// with a PSK).
type TLSMode uint8

// Port TLS modes. The zero value is TLSOptional.
const (
	// TLSOptional accepts TLS connections and plain ones.
	TLSOptional TLSMode = iota
	// TLSRequired refuses plain connections.
	TLSRequired
	// TLSNone does not offer TLS.
	TLSNone
)

var tlsModeNames = []string{"optional", "required", "none"}

func (m TLSMode) String() string {
	if int(m) < len(tlsModeNames) {
		return tlsModeNames[m]
	}
	return fmt.Sprintf("TLSMode(%d)", uint8(m))
}

// ParseTLSMode parses "optional", "required" or "none" (empty: optional).
func ParseTLSMode(s string) (TLSMode, error) {
	if s == "" {
		return TLSOptional, nil
	}
	for i, n := range tlsModeNames {
		if strings.EqualFold(s, n) {
			return TLSMode(i), nil
		}
	}
	return 0, fmt.Errorf("%w: tls = %q: want optional, required or none", ErrInvalidConfig, s)
}

// SecureChannel is the transport security of one queue's connection, as
// its transport reports it before the queue's Connect.
type SecureChannel struct {
	// TLS is set when the queue runs over a TLS secure channel.
	TLS bool
	// HostNQN and SubNQN are the NQNs the PSK identity names; the
	// Connect data must name the same.
	HostNQN, SubNQN string
}

// SecureQueue is implemented by transport queues that may carry a secure
// channel. A QueueOps that does not implement it is plain.
type SecureQueue interface {
	SecureChannel() SecureChannel
}

// secureChannelOf returns ops's secure channel (plain when ops does not
// report one).
func secureChannelOf(ops QueueOps) SecureChannel {
	if s, ok := ops.(SecureQueue); ok {
		return s.SecureChannel()
	}
	return SecureChannel{}
}

// checkSecureChannel refuses a Connect whose queue's transport security
// does not fit the host: a host that holds a TLS PSK for the subsystem
// (for the discovery NQN: for any) must come over TLS, and a TLS queue's
// PSK identity must name the host and subsystem of the Connect data. Both
// refusals are Connect Invalid Host, with IATTR/IPO at HOSTNQN (the
// subsystem mismatch points at SUBNQN). It reports whether the Connect
// may go on.
func (t *Target) checkSecureChannel(r *Request, d *nvme.ConnectData) bool {
	sc := secureChannelOf(r.sq.ops)
	if !sc.TLS && d.SubNQN == nvme.DiscoveryNQN && !t.cfg.DiscoveryAuth {
		return true
	}
	if !sc.TLS {
		for _, sec := range t.HostSecrets(d.SubNQN, d.HostNQN) {
			if sec.TLSPSK != "" {
				t.log.Info("connect refused: the host has a TLS PSK but came over plain TCP",
					"subnqn", d.SubNQN, "hostnqn", d.HostNQN)
				connectError(r, nvme.StatusConnectInvalidHost, true, nvme.ConnectDataHostNQN)
				return false
			}
		}
		return true
	}
	switch {
	case sc.HostNQN != d.HostNQN:
		t.log.Info("connect refused: the TLS PSK identity names another host",
			"hostnqn", d.HostNQN, "identity_hostnqn", sc.HostNQN)
		connectError(r, nvme.StatusConnectInvalidHost, true, nvme.ConnectDataHostNQN)
		return false
	case sc.SubNQN != d.SubNQN:
		t.log.Info("connect refused: the TLS PSK identity names another subsystem",
			"subnqn", d.SubNQN, "identity_subnqn", sc.SubNQN)
		connectError(r, nvme.StatusConnectInvalidHost, true, nvme.ConnectDataSubNQN)
		return false
	}
	return true
}
