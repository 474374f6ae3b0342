package target

import (
	"testing"

	"basalt/pkg/nvme"
)

// secureFakeQueue is a fakeQueue whose transport reports a secure channel.
type secureFakeQueue struct {
	*fakeQueue
	sc SecureChannel
}

func (q *secureFakeQueue) SecureChannel() SecureChannel { return q.sc }

func newSecureFakeQueue(t *Target, port *Port, sc SecureChannel) *fakeQueue {
	q := newFakeQueue(t, port)
	q.sq.Release()
	q.sq = t.NewSQ(&secureFakeQueue{q, sc}, port)
	return q
}

const testTLSPSK = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:"

func TestConnectSecureChannelRules(t *testing.T) {
	env := newEnv(t)
	env.tgt.cfg.DiscoveryAuth = true
	env.sub.SetHostSecrets(testHostNQN, HostSecrets{TLSPSK: testTLSPSK})
	cases := []struct {
		name   string
		sc     SecureChannel
		subnqn string
		want   nvme.Status
		ipo    uint16
	}{
		{"plain-from-tls-host", SecureChannel{}, testSubNQN, nvme.StatusConnectInvalidHost, nvme.ConnectDataHostNQN},
		{"plain-discovery-from-tls-host", SecureChannel{}, nvme.DiscoveryNQN, nvme.StatusConnectInvalidHost, nvme.ConnectDataHostNQN},
		{"identity-names-other-host", SecureChannel{TLS: true, HostNQN: "nqn.other", SubNQN: testSubNQN}, testSubNQN,
			nvme.StatusConnectInvalidHost, nvme.ConnectDataHostNQN},
		{"identity-names-other-subsystem", SecureChannel{TLS: true, HostNQN: testHostNQN, SubNQN: nvme.DiscoveryNQN}, testSubNQN,
			nvme.StatusConnectInvalidHost, nvme.ConnectDataSubNQN},
		{"tls-matching", SecureChannel{TLS: true, HostNQN: testHostNQN, SubNQN: testSubNQN}, testSubNQN, nvme.StatusSuccess, 0},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			q := newSecureFakeQueue(env.tgt, env.ports[0], tt.sc)
			cpl, _ := q.do(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, tt.subnqn, testHostNQN))
			if cpl.Status != tt.want {
				t.Fatalf("status %v, want %v", cpl.Status, tt.want)
			}
			if tt.want != nvme.StatusSuccess && cpl.DW0 != nvme.ConnectInvalidParam(true, tt.ipo) {
				t.Errorf("DW0 %#x, want IATTR/IPO at %d", cpl.DW0, tt.ipo)
			}
		})
	}
	// Without DiscoveryAuth (the default) the discovery controller takes
	// a plain connection from a host with a PSK, as nvmet.
	env.tgt.cfg.DiscoveryAuth = false
	q := newFakeQueue(env.tgt, env.ports[0])
	q.mustDo(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, nvme.DiscoveryNQN, testHostNQN))
	// A host without a PSK still connects over plain TCP.
	env.sub.SetHostSecrets(testHostNQN, HostSecrets{})
	q = newFakeQueue(env.tgt, env.ports[0])
	q.mustDo(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
}

func TestDiscoveryTREQForRequiredTLSPort(t *testing.T) {
	env := newEnv(t)
	p, err := env.tgt.AddPort(PortConfig{ID: 7, TRADDR: "192.0.2.7", TRSVCID: "4420", TLS: TLSRequired})
	if err != nil {
		t.Fatal(err)
	}
	a := env.connectAdmin(nvme.DiscoveryNQN, testHostNQN, p, 0)
	_, entries := readDiscoveryLog(t, a.admin)
	seen := false
	for _, e := range entries {
		want := [2]uint8{0, 0}
		if e.PORTID == 7 {
			want, seen = [2]uint8{nvme.TREQSecureChannelRequired, nvme.SECTYPETLS13}, true
		}
		if e.TREQ != want[0] || e.SECTYPE != want[1] {
			t.Errorf("port %d: TREQ %d SECTYPE %d, want %v", e.PORTID, e.TREQ, e.SECTYPE, want)
		}
	}
	if !seen {
		t.Fatal("no entry for the TLS port")
	}
}

func TestParseTLSMode(t *testing.T) {
	for s, want := range map[string]TLSMode{"": TLSOptional, "optional": TLSOptional, "required": TLSRequired, "NONE": TLSNone} {
		if m, err := ParseTLSMode(s); err != nil || m != want {
			t.Errorf("ParseTLSMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseTLSMode("sometimes"); err == nil {
		t.Error("ParseTLSMode accepted sometimes")
	}
}
