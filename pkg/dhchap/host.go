package dhchap

import (
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"io"

	"basalt/pkg/nvme"
)

// HostConfig is what a host knows before a transaction.
type HostConfig struct {
	HostNQN, SubNQN string
	// Secret is the host's secret (nvme connect --dhchap-secret).
	Secret Secret
	// CtrlSecret, when set, makes the host ask the controller to prove
	// itself (--dhchap-ctrl-secret): bidirectional authentication.
	CtrlSecret *Secret
	// Hashes and Groups are offered in AUTH_Negotiate; empty: all of them
	// in the Linux host's order.
	Hashes []nvme.AuthHashID
	Groups []nvme.AuthDHGroupID
	// Rand is the source of challenges and DH keys; nil: crypto/rand.
	Rand io.Reader
}

// HostExchange is the host's side of one transaction, the state machine of
// the Linux host (nvme_queue_auth_work): Negotiate, HandleChallenge (which
// returns the Reply), HandleSuccess1 (which returns Success2 when the
// controller had to prove itself). When a step fails with an error that is
// not Remote, the host sends Failure2(err). It is stricter than Linux in
// one point: a controller asked to prove itself that answers Success1
// without a response fails (Linux accepts it).
type HostExchange struct {
	cfg  *HostConfig
	rand io.Reader
	TID  uint16

	Hash       nvme.AuthHashID
	Group      nvme.AuthDHGroupID
	c2         []byte
	s2         uint32
	sessionKey []byte
}

// NewHostExchange starts transaction tid.
func NewHostExchange(cfg *HostConfig, tid uint16) *HostExchange {
	x := &HostExchange{cfg: cfg, rand: cfg.Rand, TID: tid}
	if x.rand == nil {
		x.rand = rand.Reader
	}
	return x
}

// Negotiate returns AUTH_Negotiate as the Linux host sends it: no secure
// channel concatenation, one DH-HMAC-CHAP descriptor offering every hash
// function and DH group.
func (x *HostExchange) Negotiate() []byte {
	m := Negotiate{TID: x.TID, Protocols: []Protocol{{
		AuthID: nvme.AuthProtocolDHHMACCHAP, Hashes: cmpOr(x.cfg.Hashes, Hashes), Groups: cmpOr(x.cfg.Groups, Groups),
	}}}
	return m.Encode()
}

// received checks the type of a received message: AUTH_Failure1 ends the
// transaction (Remote), anything but want or another transaction is an
// incorrect message.
func (x *HostExchange) received(b []byte, want nvme.AuthID) error {
	h, err := DecodeHeader(b)
	if err != nil {
		return fail(nvme.AuthFailureIncorrectPayload, err)
	}
	if h.Type == nvme.AuthTypeCommon && h.ID == nvme.AuthIDFailure1 {
		f, err := DecodeFailure(b, nvme.AuthIDFailure1)
		if err != nil {
			return fail(nvme.AuthFailureIncorrectPayload, err)
		}
		return &ProtocolError{Explanation: f.Explanation, Remote: true, Err: fmt.Errorf("%w: AUTH_Failure1 from the controller", ErrAuthFailed)}
	}
	if h.Type != nvme.AuthTypeDHCHAP || h.ID != want {
		return failf(nvme.AuthFailureIncorrectMessage, "message %02x/%02x, expected %02x/%02x", h.Type, h.ID, nvme.AuthTypeDHCHAP, want)
	}
	if h.TID != x.TID {
		return failf(nvme.AuthFailureIncorrectMessage, "transaction %d, expected %d", h.TID, x.TID)
	}
	return nil
}

// HandleChallenge checks DH-HMAC-CHAP_Challenge as the Linux host does
// (nvme_auth_process_dhchap_challenge) and returns DH-HMAC-CHAP_Reply.
func (x *HostExchange) HandleChallenge(b []byte) ([]byte, error) {
	if err := x.received(b, nvme.AuthIDChallenge); err != nil {
		return nil, err
	}
	m, err := DecodeChallenge(b)
	switch {
	case err != nil:
		return nil, fail(nvme.AuthFailureIncorrectPayload, err)
	case HashSize(m.Hash) == 0:
		return nil, failf(nvme.AuthFailureHashUnusable, "hash %d", m.Hash)
	case len(m.C) != HashSize(m.Hash):
		return nil, failf(nvme.AuthFailureHashUnusable, "hash length %d for %s", len(m.C), HashName(m.Hash))
	case !GroupSupported(m.Group):
		return nil, failf(nvme.AuthFailureDHGroupUnusable, "DH group %d", m.Group)
	case m.Group != nvme.AuthDHGroupNull && len(m.DHValue) == 0:
		return nil, failf(nvme.AuthFailureDHGroupUnusable, "empty DH value")
	case m.Group == nvme.AuthDHGroupNull && len(m.DHValue) != 0:
		return nil, failf(nvme.AuthFailureIncorrectPayload, "a DH value with the null group")
	}
	x.Hash, x.Group = m.Hash, m.Group
	r := Reply{TID: x.TID}
	c1 := m.C
	if m.Group != nvme.AuthDHGroupNull {
		k, err := GenerateKey(x.rand, m.Group)
		if err != nil {
			return nil, fail(nvme.AuthFailureFailed, err)
		}
		if x.sessionKey, err = k.SharedSecret(m.DHValue); err != nil {
			return nil, fail(nvme.AuthFailureIncorrectPayload, err)
		}
		r.DHValue = k.Public
		c1 = AugmentedChallenge(m.Hash, x.sessionKey, m.C)
	}
	r.Response = HostResponse(m.Hash, x.cfg.Secret.TransformedKey(x.cfg.HostNQN), c1, m.Seq, x.TID, x.cfg.HostNQN, x.cfg.SubNQN)
	r.C2 = make([]byte, len(m.C))
	if x.cfg.CtrlSecret != nil {
		if _, err := io.ReadFull(x.rand, r.C2); err != nil {
			return nil, fail(nvme.AuthFailureFailed, err)
		}
		r.CValid, r.Seq = true, NextSeqNum()
		x.c2, x.s2 = r.C2, r.Seq
	}
	return r.Encode(), nil
}

// HandleSuccess1 checks DH-HMAC-CHAP_Success1 (nvme_auth_process_dhchap_success1)
// and returns DH-HMAC-CHAP_Success2 to send, or nil when the controller was
// not asked to prove itself.
func (x *HostExchange) HandleSuccess1(b []byte) ([]byte, error) {
	if err := x.received(b, nvme.AuthIDSuccess1); err != nil {
		return nil, err
	}
	m, err := DecodeSuccess1(b)
	switch {
	case err != nil:
		return nil, fail(nvme.AuthFailureIncorrectPayload, err)
	case int(m.HL) != HashSize(x.Hash):
		return nil, failf(nvme.AuthFailureHashUnusable, "hash length %d, %s has %d", m.HL, HashName(x.Hash), HashSize(x.Hash))
	case x.c2 == nil:
		return nil, nil
	case !m.RValid:
		return nil, fail(nvme.AuthFailureFailed, fmt.Errorf("%w: the controller did not answer the host's challenge", ErrAuthFailed))
	}
	c2 := x.c2
	if x.sessionKey != nil {
		c2 = AugmentedChallenge(x.Hash, x.sessionKey, x.c2)
	}
	want := ControllerResponse(x.Hash, x.cfg.CtrlSecret.TransformedKey(x.cfg.SubNQN), c2, x.s2, x.TID, x.cfg.HostNQN, x.cfg.SubNQN)
	if subtle.ConstantTimeCompare(want, m.Response) != 1 {
		return nil, fail(nvme.AuthFailureFailed, fmt.Errorf("%w: controller response mismatch", ErrAuthFailed))
	}
	s := Success2{TID: x.TID}
	return s.Encode(), nil
}

// Bidirectional reports whether the host asked the controller to prove
// itself (after HandleChallenge).
func (x *HostExchange) Bidirectional() bool { return x.c2 != nil }

// Failure2 returns AUTH_Failure2 for err (as the Linux host sends it).
func (x *HostExchange) Failure2(err error) []byte {
	m := Failure{ID: nvme.AuthIDFailure2, TID: x.TID, Reason: nvme.AuthFailureReasonFailed, Explanation: Explanation(err)}
	return m.Encode()
}
