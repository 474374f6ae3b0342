package target

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"basalt/pkg/dhchap"
	"basalt/pkg/nvme"
)

// These tests drive DH-HMAC-CHAP on the harness queues with the host state
// machine of pkg/dhchap (the Linux host's).

func authSendCmd(msg []byte) nvme.Command {
	c := newCmd(nvme.OpcodeFabrics)
	c.EncodeAuth(true, uint32(len(msg)))
	c.SetSGL(0, uint32(len(msg)), nvme.SGLDataBlockOffset)
	return c
}

func authRecvCmd(al uint32) nvme.Command {
	c := newCmd(nvme.OpcodeFabrics)
	c.EncodeAuth(false, al)
	c.SetSGL(0, al, nvme.SGLTransportDataBlock)
	return c
}

// chapBuf is the Linux host's Authentication Receive size (CHAP_BUF_SIZE).
const chapBuf = 4096

func newSecret(tb testing.TB, transform nvme.AuthHashID) dhchap.Secret {
	tb.Helper()
	s, err := dhchap.GenerateSecret(rand.Reader, transform, 32)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// hostAuth is the host side of one association.
func hostAuth(sub string, key dhchap.Secret, ctrl *dhchap.Secret) *dhchap.HostConfig {
	return &dhchap.HostConfig{HostNQN: testHostNQN, SubNQN: sub, Secret: key, CtrlSecret: ctrl}
}

// authenticate runs one transaction on q as the Linux host does
// (nvme_queue_auth_work), sending AUTH_Failure2 when the host rejects
// the controller. It returns the host's view of the outcome.
func (q *fakeQueue) authenticate(tb testing.TB, hc *dhchap.HostConfig, tid uint16) error {
	tb.Helper()
	x := dhchap.NewHostExchange(hc, tid)
	neg := x.Negotiate()
	q.mustDo(tb, authSendCmd(neg), neg)
	_, ch := q.mustDo(tb, authRecvCmd(chapBuf), nil)
	reply, err := x.HandleChallenge(ch)
	if err != nil {
		return q.hostFailed(tb, x, err)
	}
	q.mustDo(tb, authSendCmd(reply), reply)
	_, s1 := q.mustDo(tb, authRecvCmd(chapBuf), nil)
	s2, err := x.HandleSuccess1(s1)
	if err != nil {
		return q.hostFailed(tb, x, err)
	}
	if s2 != nil {
		q.mustDo(tb, authSendCmd(s2), s2)
	}
	return nil
}

func (q *fakeQueue) hostFailed(tb testing.TB, x *dhchap.HostExchange, err error) error {
	if pe, ok := errors.AsType[*dhchap.ProtocolError](err); !ok || !pe.Remote {
		f := x.Failure2(err)
		q.mustDo(tb, authSendCmd(f), f)
	}
	return err
}

// authEnv is a test environment whose host A has a DH-HMAC-CHAP secret
// (and a controller secret when bidi).
type authEnv struct {
	*testEnv
	key, ctrlKey dhchap.Secret
}

func newAuthEnv(tb testing.TB, bidi bool, mutate ...func(*Config, *SubsystemConfig)) *authEnv {
	key, ctrlKey := newSecret(tb, nvme.AuthHashSHA256), newSecret(tb, nvme.AuthHashSHA512)
	sec := HostSecrets{DHCHAPKey: key.Encode()}
	if bidi {
		sec.DHCHAPCtrlKey = ctrlKey.Encode()
	}
	m := append([]func(*Config, *SubsystemConfig){func(_ *Config, sc *SubsystemConfig) {
		sc.Secrets = map[string]HostSecrets{testHostNQN: sec}
	}}, mutate...)
	return &authEnv{testEnv: newEnv(tb, m...), key: key, ctrlKey: ctrlKey}
}

// connectAuth connects the admin queue of host A, authenticates it with
// hc and enables the controller.
func (env *authEnv) connectAuth(tb testing.TB, hc *dhchap.HostConfig) *assoc {
	tb.Helper()
	a := &assoc{env: env.testEnv, port: env.ports[0], admin: newFakeQueue(env.tgt, env.ports[0])}
	cpl, _ := a.admin.mustDo(tb, connectCmd(0, 31, 5000, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	if cpl.DW0&nvme.ConnectAuthReqATR == 0 {
		tb.Fatalf("Connect DW0 %#x: no AUTHREQ ATR", cpl.DW0)
	}
	a.cntlid = uint16(cpl.DW0)
	if err := a.admin.authenticate(tb, hc, 1); err != nil {
		tb.Fatalf("admin queue: %v", err)
	}
	a.admin.mustDo(tb, propSetCmd(nvme.PropCC, 0x00460001), nil)
	return a
}

// connectIOAuth adds I/O queue qid, checking that it asks for
// authentication, and authenticates it unless hc is nil.
func (a *assoc) connectIOAuth(tb testing.TB, qid uint16, hc *dhchap.HostConfig) *fakeQueue {
	tb.Helper()
	q := newFakeQueue(a.env.tgt, a.port)
	cpl, _ := q.mustDo(tb, connectCmd(qid, 127, 0, 0), connectData(a.cntlid, testSubNQN, testHostNQN))
	if cpl.DW0 != uint32(a.cntlid)|nvme.ConnectAuthReqATR {
		tb.Fatalf("I/O Connect DW0 %#x", cpl.DW0)
	}
	if hc != nil {
		if err := q.authenticate(tb, hc, uint16(10+qid)); err != nil {
			tb.Fatalf("I/O queue %d: %v", qid, err)
		}
	}
	a.io = append(a.io, q)
	return q
}

// advanceUntilClosed moves the manual clock until q's connection closes.
func (env *testEnv) advanceUntilClosed(tb testing.TB, q *fakeQueue, step time.Duration) error {
	tb.Helper()
	deadline := time.Now().Add(waitLimit)
	for !q.isClosed() {
		if time.Now().After(deadline) {
			tb.Fatal("queue not closed")
		}
		env.clk.Advance(step)
		time.Sleep(time.Millisecond)
	}
	return q.closeReason()
}

func wantFailure1(tb testing.TB, err error, want nvme.AuthFailureExplanation) {
	tb.Helper()
	pe, ok := errors.AsType[*dhchap.ProtocolError](err)
	if !ok || !pe.Remote || pe.Explanation != want {
		tb.Fatalf("host saw %v, want AUTH_Failure1 %s", err, dhchap.ExplanationString(want))
	}
}

func TestAuthRightKey(t *testing.T) {
	env := newAuthEnv(t, false)
	admin := newFakeQueue(env.tgt, env.ports[0])
	cpl, _ := admin.mustDo(t, connectCmd(0, 31, 5000, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	if cpl.DW0&nvme.ConnectAuthReqATR == 0 || cpl.DW0&nvme.ConnectAuthReqASCR != 0 {
		t.Fatalf("Connect DW0 %#x", cpl.DW0)
	}
	// Before authentication only Authentication Send/Receive pass.
	for name, cmd := range map[string]nvme.Command{
		"property get": propGetCmd(nvme.PropCAP, true), "property set": propSetCmd(nvme.PropCC, 0x00460001),
		"identify": identifyCmd(nvme.CNSController, 0, 0), "keep alive": newCmd(nvme.AdminKeepAlive),
	} {
		cpl, _ := admin.do(t, cmd, nil)
		expectStatus(t, name, cpl, nvme.StatusAuthRequired)
	}
	if err := admin.authenticate(t, hostAuth(testSubNQN, env.key, nil), 1); err != nil {
		t.Fatal(err)
	}
	admin.mustDo(t, propSetCmd(nvme.PropCC, 0x00460001), nil)
	admin.mustDo(t, identifyCmd(nvme.CNSController, 0, 0), nil)
	a := &assoc{env: env.testEnv, port: env.ports[0], admin: admin, cntlid: uint16(cpl.DW0)}
	io := a.connectIOAuth(t, 1, hostAuth(testSubNQN, env.key, nil))
	io.mustDo(t, rwCmd(nvme.IORead, 1, 0, 0, 512), nil)
}

func TestAuthEveryHashAndGroup(t *testing.T) {
	for _, h := range dhchap.Hashes {
		for _, g := range dhchap.Groups {
			if testing.Short() && g > nvme.AuthDHGroupFFDHE3072 {
				continue
			}
			t.Run(dhchap.HashName(h)+"/"+dhchap.GroupName(g), func(t *testing.T) {
				env := newAuthEnv(t, true, func(c *Config, _ *SubsystemConfig) {
					c.DHCHAP = DHCHAPConfig{Hashes: []nvme.AuthHashID{h}, Groups: []nvme.AuthDHGroupID{g}}
				})
				a := env.connectAuth(t, hostAuth(testSubNQN, env.key, &env.ctrlKey))
				a.connectIOAuth(t, 1, hostAuth(testSubNQN, env.key, &env.ctrlKey)).mustDo(t, rwCmd(nvme.IOWrite, 1, 0, 0, 512), make([]byte, 512))
			})
		}
	}
}

func TestAuthWrongKey(t *testing.T) {
	env := newAuthEnv(t, false)
	admin := newFakeQueue(env.tgt, env.ports[0])
	admin.mustDo(t, connectCmd(0, 31, 5000, 0), connectData(nvme.CNTLIDDynamic, testSubNQN, testHostNQN))
	err := admin.authenticate(t, hostAuth(testSubNQN, newSecret(t, nvme.AuthHashSHA256), nil), 1)
	wantFailure1(t, err, nvme.AuthFailureFailed)
	cpl, _ := admin.do(t, identifyCmd(nvme.CNSController, 0, 0), nil)
	expectStatus(t, "identify after a failure", cpl, nvme.StatusAuthRequired)
	if reason := env.advanceUntilClosed(t, admin, 200*time.Millisecond); !errors.Is(reason, ErrAuthFailed) {
		t.Fatalf("closed for %v", reason)
	}
	if n := len(env.tgt.Controllers()); n != 0 {
		t.Fatalf("%d controllers left", n)
	}
}
