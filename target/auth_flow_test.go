package target

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"basalt/pkg/dhchap"
	"basalt/pkg/nvme"
)

// Authentication failures, re-authentication, discovery, malformed and
// out-of-order messages, timeouts.

func TestAuthMissingThenIO(t *testing.T) {
	env := newAuthEnv(t, false)
	a := env.connectAuth(t, hostAuth(testSubNQN, env.key, nil))
	a.admin.mustDo(t, setFeatCmd(nvme.FeatNumberOfQueues, 0), nil)
	q := a.connectIOAuth(t, 1, nil) // connected, never authenticated
	for _, cmd := range []nvme.Command{rwCmd(nvme.IORead, 1, 0, 0, 512), newCmd(nvme.IOFlush)} {
		cmd.SetNSID(1)
		cpl, _ := q.do(t, cmd, nil)
		expectStatus(t, "I/O before authentication", cpl, nvme.StatusAuthRequired)
	}
	if n := env.be[1].reads.Load() + env.be[1].flushes.Load(); n != 0 {
		t.Fatalf("%d commands reached the backend", n)
	}
	// The same queue authenticates late and then works.
	if err := q.authenticate(t, hostAuth(testSubNQN, env.key, nil), 7); err != nil {
		t.Fatal(err)
	}
	q.mustDo(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
}

func TestAuthBidirectional(t *testing.T) {
	env := newAuthEnv(t, true)
	a := env.connectAuth(t, hostAuth(testSubNQN, env.key, &env.ctrlKey))
	a.admin.mustDo(t, identifyCmd(nvme.CNSController, 0, 0), nil)

	// The host holds another controller secret: it rejects R2 and sends
	// AUTH_Failure2; the controller is torn down.
	bad := newSecret(t, nvme.AuthHashSHA512)
	q := newFakeQueue(env.tgt, env.ports[0])
	q.mustDo(t, connectCmd(0, 31, 5000, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	err := q.authenticate(t, hostAuth(testSubNQN, env.key, &bad), 1)
	if !errors.Is(err, dhchap.ErrAuthFailed) || dhchap.Explanation(err) != nvme.AuthFailureFailed {
		t.Fatalf("host saw %v", err)
	}
	cpl, _ := q.do(t, identifyCmd(nvme.CNSController, 0, 0), nil)
	expectStatus(t, "after failure2", cpl, nvme.StatusAuthRequired)
	if reason := env.advanceUntilClosed(t, q, 200*time.Millisecond); !errors.Is(reason, ErrAuthFailed) {
		t.Fatalf("closed for %v", reason)
	}
	if a.admin.isClosed() {
		t.Fatal("the other association was torn down")
	}
}

func TestAuthBidirectionalWithoutControllerSecret(t *testing.T) {
	env := newAuthEnv(t, false) // no DHCHAPCtrlKey configured
	q := newFakeQueue(env.tgt, env.ports[0])
	q.mustDo(t, connectCmd(0, 31, 5000, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	err := q.authenticate(t, hostAuth(testSubNQN, env.key, &env.ctrlKey), 1)
	wantFailure1(t, err, nvme.AuthFailureFailed)
	env.advanceUntilClosed(t, q, 200*time.Millisecond)
}

func TestAuthReauthentication(t *testing.T) {
	env := newAuthEnv(t, true)
	hc := hostAuth(testSubNQN, env.key, &env.ctrlKey)
	a := env.connectAuth(t, hc)
	a.admin.mustDo(t, setFeatCmd(nvme.FeatNumberOfQueues, 0), nil)
	io := a.connectIOAuth(t, 1, hc)
	// Host-initiated re-authentication on the live controller (the Linux
	// host's nvme_ctrl_auth_work: admin queue first, then each I/O queue);
	// commands keep passing while it runs.
	x := dhchap.NewHostExchange(hc, 100)
	neg := x.Negotiate()
	a.admin.mustDo(t, authSendCmd(neg), neg)
	io.mustDo(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
	a.admin.mustDo(t, identifyCmd(nvme.CNSController, 0, 0), nil)
	_, ch := a.admin.mustDo(t, authRecvCmd(chapBuf), nil)
	reply, err := x.HandleChallenge(ch)
	if err != nil {
		t.Fatal(err)
	}
	a.admin.mustDo(t, authSendCmd(reply), reply)
	_, s1 := a.admin.mustDo(t, authRecvCmd(chapBuf), nil)
	s2, err := x.HandleSuccess1(s1)
	if err != nil || s2 == nil {
		t.Fatalf("%v %v", s2, err)
	}
	a.admin.mustDo(t, authSendCmd(s2), s2)
	if err := io.authenticate(t, hc, 101); err != nil {
		t.Fatal(err)
	}
	io.mustDo(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)

	// Rotation: the next re-authentication uses the new secret.
	newKey := newSecret(t, nvme.AuthHashSHA384)
	env.sub.SetHostSecrets(testHostNQN, HostSecrets{DHCHAPKey: newKey.Encode(), DHCHAPCtrlKey: env.ctrlKey.Encode()})
	if err := a.admin.authenticate(t, hostAuth(testSubNQN, newKey, &env.ctrlKey), 102); err != nil {
		t.Fatalf("re-authentication with the rotated secret: %v", err)
	}
	err = a.admin.authenticate(t, hc, 103)
	wantFailure1(t, err, nvme.AuthFailureFailed)
	if reason := env.advanceUntilClosed(t, io, 200*time.Millisecond); !errors.Is(reason, ErrAuthFailed) {
		t.Fatalf("closed for %v", reason)
	}
}

func TestAuthDiscovery(t *testing.T) {
	env := newAuthEnv(t, true)
	env.tgt.cfg.DiscoveryAuth = true
	// A second subsystem where host A has another secret.
	other := newSecret(t, 0)
	if _, err := env.tgt.AddSubsystem(SubsystemConfig{NQN: testSubNQN + "2", Hosts: []string{testHostNQN},
		Secrets: map[string]HostSecrets{testHostNQN: {DHCHAPKey: other.Encode()}}}); err != nil {
		t.Fatal(err)
	}
	for name, hc := range map[string]*dhchap.HostConfig{
		"first set, bidirectional": hostAuth(nvme.DiscoveryNQN, env.key, &env.ctrlKey),
		"second set":               hostAuth(nvme.DiscoveryNQN, other, nil),
	} {
		t.Run(name, func(t *testing.T) {
			q := newFakeQueue(env.tgt, env.ports[0])
			cpl, _ := q.mustDo(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, nvme.DiscoveryNQN, testHostNQN))
			if cpl.DW0&nvme.ConnectAuthReqATR == 0 {
				t.Fatalf("discovery Connect DW0 %#x", cpl.DW0)
			}
			cpl, _ = q.do(t, getLogCmd(nvme.LogDiscovery, 0, true, 0, 1024, 0), nil)
			expectStatus(t, "discovery log before authentication", cpl, nvme.StatusAuthRequired)
			if err := q.authenticate(t, hc, 1); err != nil {
				t.Fatal(err)
			}
			q.mustDo(t, propSetCmd(nvme.PropCC, 0x00460001), nil)
			q.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, true, 0, 1024, 0), nil)
		})
	}
	q := newFakeQueue(env.tgt, env.ports[0])
	q.mustDo(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, nvme.DiscoveryNQN, testHostNQN))
	wantFailure1(t, q.authenticate(t, hostAuth(nvme.DiscoveryNQN, newSecret(t, 0), nil), 1), nvme.AuthFailureFailed)
	// A host without secrets discovers without authentication.
	b := env.connectAdmin(nvme.DiscoveryNQN, testHostB, env.ports[0], 0)
	b.admin.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, true, 0, 1024, 0), nil)

	// Without DiscoveryAuth (the default) the discovery controller asks
	// for no authentication, as nvmet: nvme-cli's discover does not give
	// it the host's secret.
	env.tgt.cfg.DiscoveryAuth = false
	q = newFakeQueue(env.tgt, env.ports[0])
	if cpl, _ := q.mustDo(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, nvme.DiscoveryNQN, testHostNQN)); cpl.DW0&nvme.ConnectAuthReqATR != 0 {
		t.Fatalf("discovery Connect DW0 %#x without DiscoveryAuth", cpl.DW0)
	}
	q.mustDo(t, propSetCmd(nvme.PropCC, 0x00460001), nil)
	q.mustDo(t, getLogCmd(nvme.LogDiscovery, 0, true, 0, 1024, 0), nil)
}

// connectRaw connects host A's admin queue without authenticating.
func (env *authEnv) connectRaw(t *testing.T) *fakeQueue {
	q := newFakeQueue(env.tgt, env.ports[0])
	q.mustDo(t, connectCmd(0, 31, 5000, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	return q
}

// recvFailure1 receives and checks AUTH_Failure1.
func recvFailure1(t *testing.T, q *fakeQueue, want nvme.AuthFailureExplanation) {
	t.Helper()
	_, b := q.mustDo(t, authRecvCmd(chapBuf), nil)
	f, err := dhchap.DecodeFailure(b, nvme.AuthIDFailure1)
	if err != nil || f.Explanation != want || f.Reason != nvme.AuthFailureReasonFailed {
		t.Fatalf("received %x (%v), want AUTH_Failure1 %s", b[:8], err, dhchap.ExplanationString(want))
	}
}

func TestAuthMalformed(t *testing.T) {
	env := newAuthEnv(t, false)
	hc := hostAuth(testSubNQN, env.key, nil)
	neg := dhchap.NewHostExchange(hc, 1).Negotiate()
	// Command fields: SECP, SPSP0, SPSP1, TL/AL.
	q := env.connectRaw(t)
	for _, f := range []struct {
		off int
		v   byte
	}{{nvme.AuthOffsetSECP, 0xEA}, {nvme.AuthOffsetSPSP0, 2}, {nvme.AuthOffsetSPSP1, 0}} {
		for _, cmd := range []nvme.Command{authSendCmd(neg), authRecvCmd(chapBuf)} {
			cmd[f.off] = f.v
			r, ok := q.start(t, cmd, neg)
			if ok {
				t.Fatalf("byte %d = %#x accepted", f.off, f.v)
			}
			cpl, _ := q.wait(t, r)
			expectStatus(t, "bad field", cpl, nvme.StatusInvalidField)
		}
	}
	for _, l := range []uint32{0, AdminMaxTransfer + 1} {
		cmd := authRecvCmd(l)
		r, ok := q.start(t, cmd, nil)
		if ok {
			t.Fatalf("AL %d accepted", l)
		}
		cpl, _ := q.wait(t, r)
		expectStatus(t, "bad AL", cpl, nvme.StatusInvalidField)
	}
	// A buffer too small for the challenge: Invalid Field, nothing lost.
	q.mustDo(t, authSendCmd(neg), neg)
	cpl, _ := q.do(t, authRecvCmd(20), nil)
	expectStatus(t, "small AL", cpl, nvme.StatusInvalidField)
	_, ch := q.mustDo(t, authRecvCmd(chapBuf), nil)
	if _, err := dhchap.DecodeChallenge(ch); err != nil {
		t.Fatal(err)
	}

	// Truncated and corrupt messages end in AUTH_Failure1.
	cases := map[string]struct {
		msg  func() []byte
		want nvme.AuthFailureExplanation
	}{
		"truncated negotiate": {func() []byte { return neg[:40] }, nvme.AuthFailureIncorrectPayload},
		"header only":         {func() []byte { return neg[:3] }, nvme.AuthFailureIncorrectPayload},
		"HALEN 31": {func() []byte {
			b := append([]byte(nil), neg...)
			b[8+2] = 31
			return b
		}, nvme.AuthFailureIncorrectPayload},
		"unknown type": {func() []byte { b := append([]byte(nil), neg...); b[0] = 7; return b }, nvme.AuthFailureIncorrectMessage},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			q := env.connectRaw(t)
			m := c.msg()
			q.mustDo(t, authSendCmd(m), m)
			recvFailure1(t, q, c.want)
			env.advanceUntilClosed(t, q, 200*time.Millisecond)
		})
	}
	// A reply with a bad DH value.
	env2 := newAuthEnv(t, false, func(c *Config, _ *SubsystemConfig) {
		c.DHCHAP.Groups = []nvme.AuthDHGroupID{nvme.AuthDHGroupFFDHE2048}
	})
	q = env2.connectRaw(t)
	x := dhchap.NewHostExchange(hostAuth(testSubNQN, env2.key, nil), 4)
	neg = x.Negotiate()
	q.mustDo(t, authSendCmd(neg), neg)
	_, ch = q.mustDo(t, authRecvCmd(chapBuf), nil)
	reply, err := x.HandleChallenge(ch)
	if err != nil {
		t.Fatal(err)
	}
	clear(reply[16+64:])
	reply[len(reply)-1] = 1 // g^x = 1
	q.mustDo(t, authSendCmd(reply), reply)
	recvFailure1(t, q, nvme.AuthFailureDHGroupUnusable)
}

func TestAuthOutOfOrder(t *testing.T) {
	env := newAuthEnv(t, false)
	hc := hostAuth(testSubNQN, env.key, nil)
	reply := (&dhchap.Reply{TID: 1, Response: make([]byte, 32), C2: make([]byte, 32)}).Encode()
	t.Run("reply before negotiate", func(t *testing.T) {
		q := env.connectRaw(t)
		q.mustDo(t, authSendCmd(reply), reply)
		recvFailure1(t, q, nvme.AuthFailureIncorrectMessage)
	})
	t.Run("receive first", func(t *testing.T) {
		q := env.connectRaw(t)
		recvFailure1(t, q, nvme.AuthFailureIncorrectMessage)
	})
	t.Run("reply before challenge", func(t *testing.T) {
		q := env.connectRaw(t)
		neg := dhchap.NewHostExchange(hc, 1).Negotiate()
		q.mustDo(t, authSendCmd(neg), neg)
		q.mustDo(t, authSendCmd(reply), reply)
		recvFailure1(t, q, nvme.AuthFailureIncorrectMessage)
	})
	t.Run("other transaction", func(t *testing.T) {
		q := env.connectRaw(t)
		x := dhchap.NewHostExchange(hc, 1)
		neg := x.Negotiate()
		q.mustDo(t, authSendCmd(neg), neg)
		_, ch := q.mustDo(t, authRecvCmd(chapBuf), nil)
		r, err := x.HandleChallenge(ch)
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint16(r[4:], 2)
		q.mustDo(t, authSendCmd(r), r)
		recvFailure1(t, q, nvme.AuthFailureIncorrectPayload)
		if reason := env.advanceUntilClosed(t, q, 200*time.Millisecond); !errors.Is(reason, ErrAuthFailed) {
			t.Fatalf("closed for %v", reason)
		}
	})
	t.Run("success2 without a controller challenge", func(t *testing.T) {
		q := env.connectRaw(t)
		if err := q.authenticate(t, hc, 1); err != nil {
			t.Fatal(err)
		}
		s2 := (&dhchap.Success2{TID: 1}).Encode()
		q.mustDo(t, authSendCmd(s2), s2)
		recvFailure1(t, q, nvme.AuthFailureIncorrectMessage)
	})
}

func TestAuthTimeout(t *testing.T) {
	env := newAuthEnv(t, false, func(c *Config, _ *SubsystemConfig) { c.DHCHAP.Timeout = 3 * time.Second })
	// A host that never authenticates: the association ends.
	q := env.connectRaw(t)
	if reason := env.advanceUntilClosed(t, q, time.Second); !errors.Is(reason, ErrAuthTimeout) {
		t.Fatalf("closed for %v", reason)
	}
	// A re-authentication left half done goes back to Negotiate and keeps
	// the earlier authentication (nvmet_auth_expired_work).
	hc := hostAuth(testSubNQN, env.key, nil)
	a := env.connectAuth(t, hc)
	x := dhchap.NewHostExchange(hc, 9)
	neg := x.Negotiate()
	a.admin.mustDo(t, authSendCmd(neg), neg)
	for range 30 {
		env.clk.Advance(time.Second)
		a.admin.mustDo(t, newCmd(nvme.AdminKeepAlive), nil)
		time.Sleep(time.Millisecond)
	}
	if a.admin.isClosed() {
		t.Fatal("closed after a re-authentication timeout")
	}
	// The half-done transaction is gone: its challenge is not served.
	recvFailure1(t, a.admin, nvme.AuthFailureIncorrectMessage)
}

func TestAuthUnusableSecret(t *testing.T) {
	env := newEnv(t, func(_ *Config, sc *SubsystemConfig) {
		sc.Secrets = map[string]HostSecrets{testHostNQN: {DHCHAPKey: "DHHC-1:01:bm90IGEga2V5:"}}
	})
	q := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ := q.do(t, connectCmd(0, 31, 0, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	expectStatus(t, "connect", cpl, nvme.StatusConnectInvalidHost)
}
