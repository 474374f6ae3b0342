package host_test

import (
	"crypto/rand"
	"errors"
	"testing"

	"basalt/pkg/dhchap"
	"basalt/pkg/nvme"
	"basalt/pkg/nvme/host"
	"basalt/target"
	"basalt/target/tcp"
)

const authHostNQN = "nqn.2014-08.org.nvmexpress:uuid:auth-host"

func genKey(tb testing.TB, transform nvme.AuthHashID) string {
	tb.Helper()
	s, err := dhchap.GenerateSecret(rand.Reader, transform, 32)
	if err != nil {
		tb.Fatal(err)
	}
	return s.Encode()
}

// startAuthTarget is a real target over loopback TCP whose subsystem
// requires DH-HMAC-CHAP from authHostNQN, with the given group preference.
func startAuthTarget(t *testing.T, groups []nvme.AuthDHGroupID, sec target.HostSecrets) *realTarget {
	t.Helper()
	rt := startRealTarget(t, target.Config{DHCHAP: target.DHCHAPConfig{Groups: groups}}, tcp.Options{}, 512)
	rt.tgt.Subsystem(testNQN).SetHostSecrets(authHostNQN, sec)
	return rt
}

func TestDialDHCHAP(t *testing.T) {
	key, ctrlKey := genKey(t, nvme.AuthHashSHA256), genKey(t, nvme.AuthHashSHA384)
	for _, g := range []nvme.AuthDHGroupID{nvme.AuthDHGroupNull, nvme.AuthDHGroupFFDHE2048} {
		t.Run(dhchap.GroupName(g), func(t *testing.T) {
			rt := startAuthTarget(t, []nvme.AuthDHGroupID{g}, target.HostSecrets{DHCHAPKey: key, DHCHAPCtrlKey: ctrlKey})
			opts := host.Options{SubNQN: testNQN, HostNQN: authHostNQN, IOQueues: 2, DHCHAPSecret: key, DHCHAPCtrlSecret: ctrlKey}
			c, err := host.Dial(ctxFor(t), rt.addr, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Write(ctxFor(t), 1, 0, make([]byte, 4096), false); err != nil {
				t.Fatal(err)
			}
			// Wrong secret, wrong controller secret, none: refused.
			for name, o := range map[string]host.Options{
				"wrong secret":            {DHCHAPSecret: genKey(t, 0)},
				"wrong controller secret": {DHCHAPSecret: key, DHCHAPCtrlSecret: genKey(t, 0)},
				"no secret":               {},
			} {
				o.SubNQN, o.HostNQN = testNQN, authHostNQN
				if _, err := host.Dial(ctxFor(t), rt.addr, o); !errors.Is(err, host.ErrAuthentication) {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
}

// BenchmarkConnectDHCHAP times Dial over loopback TCP: ICReq, Connect
// and (with DH-HMAC-CHAP) the authentication of the admin queue and of
// one I/O queue, enabling, Identify, Set Features; then Close.
func BenchmarkConnectDHCHAP(b *testing.B) {
	key := genKey(b, nvme.AuthHashSHA256)
	for _, bc := range []struct {
		name  string
		group nvme.AuthDHGroupID
		auth  bool
	}{
		{"no-auth", 0, false},
		{"null", nvme.AuthDHGroupNull, true},
		{"ffdhe2048", nvme.AuthDHGroupFFDHE2048, true},
		{"ffdhe8192", nvme.AuthDHGroupFFDHE8192, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rt := startRealTarget(b, target.Config{DHCHAP: target.DHCHAPConfig{Groups: []nvme.AuthDHGroupID{bc.group}}}, tcp.Options{}, 512)
			opts := host.Options{SubNQN: testNQN, HostNQN: authHostNQN, IOQueues: 1, KATO: host.KeepAliveDisabled}
			if bc.auth {
				rt.tgt.Subsystem(testNQN).SetHostSecrets(authHostNQN, target.HostSecrets{DHCHAPKey: key})
				opts.DHCHAPSecret = key
			}
			for b.Loop() {
				c, err := host.Dial(b.Context(), rt.addr, opts)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
