package dhchap

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"basalt/pkg/nvme"
)

const (
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:host-a"
	testSubNQN  = "nqn.2024-01.io.basalt:vol"
)

func genSecret(t testing.TB, transform nvme.AuthHashID, n int) Secret {
	t.Helper()
	s, err := GenerateSecret(rand.Reader, transform, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run drives one transaction between h and the controller; it returns the
// error of the side that failed (host errors first).
func run(t testing.TB, h *HostConfig, c *ControllerConfig, tid uint16) (*ControllerExchange, error) {
	t.Helper()
	hx := NewHostExchange(h, tid)
	cx, err := NewControllerExchange(c, hx.Negotiate())
	if err != nil {
		return cx, fmt.Errorf("controller negotiate: %w", err)
	}
	ch, err := cx.Challenge()
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != cx.ChallengeSize() {
		t.Fatalf("challenge of %d bytes, ChallengeSize %d", len(ch), cx.ChallengeSize())
	}
	reply, err := hx.HandleChallenge(ch)
	if err != nil {
		return cx, fmt.Errorf("host challenge: %w", err)
	}
	if err := cx.HandleReply(reply); err != nil {
		return cx, fmt.Errorf("controller reply: %w", err)
	}
	s1, err := cx.Success1()
	if err != nil {
		return cx, fmt.Errorf("controller success1: %w", err)
	}
	if len(s1) != cx.Success1Size() {
		t.Fatalf("success1 of %d bytes, Success1Size %d", len(s1), cx.Success1Size())
	}
	// Padding as an Authentication Receive of 4096 bytes delivers it.
	s2, err := hx.HandleSuccess1(append(s1, make([]byte, 4096-len(s1))...))
	if err != nil {
		return cx, fmt.Errorf("host success1: %w", err)
	}
	if (s2 != nil) != cx.WantsSuccess2() {
		t.Fatalf("success2 %v, controller wants it %v", s2 != nil, cx.WantsSuccess2())
	}
	if s2 != nil {
		if cx.Authenticated() {
			t.Fatal("authenticated before success2")
		}
		if err := cx.HandleSuccess2(s2); err != nil {
			return cx, fmt.Errorf("controller success2: %w", err)
		}
	}
	if !cx.Authenticated() {
		t.Fatal("not authenticated at the end")
	}
	return cx, nil
}

// TestRoundTripEveryHashAndGroup authenticates for every hash × group, one
// way and both ways, with every key transformation.
func TestRoundTripEveryHashAndGroup(t *testing.T) {
	for _, hash := range Hashes {
		for _, group := range Groups {
			for _, bidi := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/bidi=%v", HashName(hash), GroupName(group), bidi)
				t.Run(name, func(t *testing.T) {
					if testing.Short() && group >= nvme.AuthDHGroupFFDHE6144 && hash != nvme.AuthHashSHA256 {
						t.Skip("large groups with one hash only in -short")
					}
					hs := genSecret(t, nvme.AuthHashID((int(hash)+int(group))%4), []int{32, 48, 64}[int(group)%3])
					cfg := &ControllerConfig{HostNQN: testHostNQN, SubNQN: testSubNQN,
						Credentials: []Credentials{{Host: hs}}, Hashes: []nvme.AuthHashID{hash}, Groups: []nvme.AuthDHGroupID{group}}
					h := &HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: hs}
					if bidi {
						cs := genSecret(t, nvme.AuthHashSHA512, 64)
						cfg.Credentials[0].Ctrl, h.CtrlSecret = &cs, &cs
					}
					cx, err := run(t, h, cfg, 42)
					if err != nil {
						t.Fatal(err)
					}
					if cx.Hash != hash || cx.Group != group {
						t.Fatalf("chose %v/%v", cx.Hash, cx.Group)
					}
				})
			}
		}
	}
}

func wantExplanation(t *testing.T, err error, want nvme.AuthFailureExplanation) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if got := Explanation(err); got != want {
		t.Fatalf("explanation %s (%v), want %s", ExplanationString(got), err, ExplanationString(want))
	}
}

func TestWrongSecrets(t *testing.T) {
	hs, other := genSecret(t, 0, 32), genSecret(t, 0, 32)
	cfg := &ControllerConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Credentials: []Credentials{{Host: hs}}}
	_, err := run(t, &HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: other}, cfg, 1)
	wantExplanation(t, err, nvme.AuthFailureFailed)
	if !errors.Is(err, ErrAuthFailed) || !strings.Contains(err.Error(), "controller reply") {
		t.Fatalf("error %v", err)
	}
	// Same key, other NQN: the transformation binds the key to the host.
	hs1 := genSecret(t, nvme.AuthHashSHA256, 32)
	cfg.Credentials = []Credentials{{Host: hs1}}
	_, err = run(t, &HostConfig{HostNQN: testHostNQN + "x", SubNQN: testSubNQN, Secret: hs1}, cfg, 1)
	wantExplanation(t, err, nvme.AuthFailureFailed)

	// Bidirectional: the controller's secret is not the one the host holds.
	cs, bad := genSecret(t, 0, 48), genSecret(t, 0, 48)
	cfg.Credentials = []Credentials{{Host: hs, Ctrl: &cs}}
	_, err = run(t, &HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: hs, CtrlSecret: &bad}, cfg, 1)
	wantExplanation(t, err, nvme.AuthFailureFailed)
	if !strings.Contains(err.Error(), "host success1") {
		t.Fatalf("error %v", err)
	}
	// The host asks for a proof the controller cannot give.
	cfg.Credentials = []Credentials{{Host: hs}}
	_, err = run(t, &HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: hs, CtrlSecret: &cs}, cfg, 1)
	wantExplanation(t, err, nvme.AuthFailureFailed)
	if !strings.Contains(err.Error(), "controller success1") {
		t.Fatalf("error %v", err)
	}
}

func TestCandidateCredentials(t *testing.T) {
	a, b, cb := genSecret(t, 1, 32), genSecret(t, 2, 48), genSecret(t, 3, 64)
	cfg := &ControllerConfig{HostNQN: testHostNQN, SubNQN: nvme.DiscoveryNQN, Credentials: []Credentials{{Host: a}, {Host: b, Ctrl: &cb}}}
	cx, err := run(t, &HostConfig{HostNQN: testHostNQN, SubNQN: nvme.DiscoveryNQN, Secret: b, CtrlSecret: &cb}, cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	if cx.Matched() != 1 {
		t.Fatalf("matched %d", cx.Matched())
	}
}

func TestNegotiateSelection(t *testing.T) {
	hs := genSecret(t, 0, 32)
	base := ControllerConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Credentials: []Credentials{{Host: hs}}}
	neg := func(m Negotiate) []byte { return m.Encode() }
	offer := func(hashes []nvme.AuthHashID, groups []nvme.AuthDHGroupID) Negotiate {
		return Negotiate{TID: 3, Protocols: []Protocol{{AuthID: nvme.AuthProtocolDHHMACCHAP, Hashes: hashes, Groups: groups}}}
	}
	// nvmet's defaults: SHA-256 and the null group when offered.
	cx, err := NewControllerExchange(&base, neg(offer(Hashes, Groups)))
	if err != nil || cx.Hash != nvme.AuthHashSHA256 || cx.Group != nvme.AuthDHGroupNull || cx.TID != 3 {
		t.Fatalf("%v %v %v", cx, err, cx)
	}
	// Falls back to what the host offers.
	cx, err = NewControllerExchange(&base, neg(offer([]nvme.AuthHashID{9, nvme.AuthHashSHA512}, []nvme.AuthDHGroupID{7, nvme.AuthDHGroupFFDHE4096})))
	if err != nil || cx.Hash != nvme.AuthHashSHA512 || cx.Group != nvme.AuthDHGroupFFDHE4096 {
		t.Fatalf("%v %v", cx, err)
	}
	cases := []struct {
		name string
		msg  []byte
		want nvme.AuthFailureExplanation
	}{
		{"no usable hash", neg(offer([]nvme.AuthHashID{0, 4}, Groups)), nvme.AuthFailureHashUnusable},
		{"no usable group", neg(offer(Hashes, []nvme.AuthDHGroupID{6, 0xFF})), nvme.AuthFailureDHGroupUnusable},
		{"concatenation", neg(Negotiate{TID: 1, SCC: nvme.AuthSCCNewTLSPSK, Protocols: offer(Hashes, Groups).Protocols}), nvme.AuthFailureConcatMismatch},
		{"two descriptors", neg(Negotiate{Protocols: append(offer(Hashes, Groups).Protocols, offer(Hashes, Groups).Protocols...)}), nvme.AuthFailureHashUnusable},
		{"other protocol", neg(Negotiate{Protocols: []Protocol{{AuthID: 2, Hashes: Hashes, Groups: Groups}}}), nvme.AuthFailureIncorrectPayload},
		{"truncated", neg(offer(Hashes, Groups))[:40], nvme.AuthFailureIncorrectPayload},
	}
	for _, c := range cases {
		_, err := NewControllerExchange(&base, c.msg)
		t.Run(c.name, func(t *testing.T) { wantExplanation(t, err, c.want) })
	}
}

func TestReplyChecks(t *testing.T) {
	hs := genSecret(t, 0, 32)
	cfg := &ControllerConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Credentials: []Credentials{{Host: hs}},
		Groups: []nvme.AuthDHGroupID{nvme.AuthDHGroupFFDHE2048}}
	start := func() (*HostExchange, *ControllerExchange, []byte) {
		hx := NewHostExchange(&HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: hs}, 5)
		cx, err := NewControllerExchange(cfg, hx.Negotiate())
		if err != nil {
			t.Fatal(err)
		}
		ch, _ := cx.Challenge()
		reply, err := hx.HandleChallenge(ch)
		if err != nil {
			t.Fatal(err)
		}
		return hx, cx, reply
	}
	mutate := map[string]struct {
		f    func(b []byte) []byte
		want nvme.AuthFailureExplanation
	}{
		"other transaction": {func(b []byte) []byte { b[4]++; return b }, nvme.AuthFailureIncorrectPayload},
		"truncated":         {func(b []byte) []byte { return b[:len(b)-1] }, nvme.AuthFailureIncorrectPayload},
		"hash length":       {func(b []byte) []byte { b[6] = 16; return b }, nvme.AuthFailureFailed},
		"no DH value":       {func(b []byte) []byte { b[10], b[11] = 0, 0; return b[:16+64] }, nvme.AuthFailureIncorrectPayload},
		"DH value 1":        {func(b []byte) []byte { clear(b[80:]); b[len(b)-1] = 1; return b }, nvme.AuthFailureDHGroupUnusable},
		"DH value p-1": {func(b []byte) []byte {
			p := lookupGroup(nvme.AuthDHGroupFFDHE2048).pm1.FillBytes(make([]byte, 256))
			copy(b[80:], p)
			return b
		}, nvme.AuthFailureDHGroupUnusable},
		"response": {func(b []byte) []byte { b[20] ^= 1; return b }, nvme.AuthFailureFailed},
		"CVALID 2": {func(b []byte) []byte { b[8] = 2; return b }, nvme.AuthFailureIncorrectPayload},
	}
	for name, m := range mutate {
		t.Run(name, func(t *testing.T) {
			_, cx, reply := start()
			err := cx.HandleReply(m.f(bytes.Clone(reply)))
			wantExplanation(t, err, m.want)
			if cx.Authenticated() || cx.Matched() >= 0 {
				t.Fatal("authenticated after a bad reply")
			}
			if _, err := cx.Success1(); err == nil {
				t.Fatal("success1 after a bad reply")
			}
		})
	}
}

func TestHostChecks(t *testing.T) {
	hs := genSecret(t, 0, 32)
	hx := NewHostExchange(&HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: hs}, 5)
	ch := Challenge{TID: 5, Hash: nvme.AuthHashSHA256, Group: nvme.AuthDHGroupNull, Seq: 1, C: make([]byte, 32)}
	good := ch.Encode()
	cases := map[string]struct {
		msg  []byte
		want nvme.AuthFailureExplanation
	}{
		"failure1":      {Failure1(5, nvme.AuthFailureHashUnusable), nvme.AuthFailureHashUnusable},
		"other message": {(&Success2{TID: 5}).Encode(), nvme.AuthFailureIncorrectMessage},
		"other tid":     {(&Challenge{TID: 6, Hash: 1, C: make([]byte, 32)}).Encode(), nvme.AuthFailureIncorrectMessage},
		"bad hash":      {(&Challenge{TID: 5, Hash: 7, C: make([]byte, 32)}).Encode(), nvme.AuthFailureHashUnusable},
		"bad hl":        {(&Challenge{TID: 5, Hash: 1, C: make([]byte, 48)}).Encode(), nvme.AuthFailureHashUnusable},
		"bad group":     {(&Challenge{TID: 5, Hash: 1, Group: 9, C: make([]byte, 32)}).Encode(), nvme.AuthFailureDHGroupUnusable},
		"empty DH":      {(&Challenge{TID: 5, Hash: 1, Group: 1, C: make([]byte, 32)}).Encode(), nvme.AuthFailureDHGroupUnusable},
		"DH with null":  {(&Challenge{TID: 5, Hash: 1, C: make([]byte, 32), DHValue: []byte{1}}).Encode(), nvme.AuthFailureIncorrectPayload},
		"bad DH value":  {(&Challenge{TID: 5, Hash: 1, Group: 1, C: make([]byte, 32), DHValue: make([]byte, 256)}).Encode(), nvme.AuthFailureIncorrectPayload},
		"truncated":     {good[:40], nvme.AuthFailureIncorrectPayload},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := hx.HandleChallenge(c.msg)
			wantExplanation(t, err, c.want)
			pe, _ := errors.AsType[*ProtocolError](err)
			if pe.Remote != (name == "failure1") {
				t.Fatalf("remote %v", pe.Remote)
			}
		})
	}
	if _, err := hx.HandleChallenge(good); err != nil {
		t.Fatal(err)
	}
	f := hx.Failure2(&ProtocolError{Explanation: nvme.AuthFailureIncorrectPayload})
	if m, err := DecodeFailure(f, nvme.AuthIDFailure2); err != nil || m.TID != 5 || m.Explanation != nvme.AuthFailureIncorrectPayload || m.Reason != nvme.AuthFailureReasonFailed {
		t.Fatalf("%+v %v", m, err)
	}
}

func TestParseSecretErrors(t *testing.T) {
	good := mustSecret(t, katSecret1)
	for _, s := range []string{
		"", "DHHC-2:01:" + good.Encode()[10:], "DHHC-1:04:" + good.Encode()[10:], "DHHC-1:1:" + good.Encode()[10:],
		"DHHC-1:01:!!!!:", "DHHC-1:01:" + good.Encode()[10:20] + ":",
		strings.Replace(katSecret1, "AAEC", "AQEC", 1), // CRC mismatch
	} {
		_, err := ParseSecret(s)
		if !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("%q: %v", s, err)
		}
		if err != nil && len(s) > 20 && strings.Contains(err.Error(), s[10:20]) {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
	if _, err := ParseSecret(strings.TrimSuffix(katSecret1, ":")); err != nil {
		t.Errorf("without the trailing colon: %v", err)
	}
	if _, err := ParseSecret(katSecret1[:20] + "\n" + katSecret1[20:]); err != nil {
		t.Errorf("with a newline inside: %v", err)
	}
	if s := fmt.Sprintf("%v %s %#v", good, good, good); strings.Contains(s, good.Encode()[10:30]) {
		t.Errorf("a secret formats unredacted: %s", s)
	}
}

func TestSeqNumNeverZero(t *testing.T) {
	seqnum.Lock()
	seqnum.v = 0xFFFFFFFF
	seqnum.Unlock()
	if v := NextSeqNum(); v == 0 {
		t.Fatal("sequence number 0")
	}
}
