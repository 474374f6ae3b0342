package dhchap

import (
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"io"
	"slices"

	"basalt/pkg/nvme"
)

// Credentials are the secrets a controller holds for one host: the host's
// secret and, for bidirectional authentication, its own.
type Credentials struct {
	Host Secret
	Ctrl *Secret // nil: the controller cannot prove itself
}

// ControllerConfig is what a controller knows before a transaction.
type ControllerConfig struct {
	HostNQN, SubNQN string
	// Credentials are the candidate secrets: the host proves it knows the
	// host secret of one of them (a discovery controller holds every set
	// the host has on any subsystem). At least one.
	Credentials []Credentials
	// Hashes and Groups are the hash functions and DH groups the
	// controller accepts, most preferred first; the first one the host
	// offers is chosen. Empty: Hashes (SHA-256 first) and Groups (null
	// first), the defaults of Linux nvmet.
	Hashes []nvme.AuthHashID
	Groups []nvme.AuthDHGroupID
	// Rand is the source of challenges and DH keys; nil: crypto/rand.
	Rand io.Reader
}

// ControllerExchange is the controller's side of one transaction on one
// queue. Its methods follow the order of the messages: NewControllerExchange
// (AUTH_Negotiate received), Challenge, HandleReply, Success1 and, when
// WantsSuccess2, HandleSuccess2. It is not safe for concurrent use.
type ControllerExchange struct {
	cfg   *ControllerConfig
	rand  io.Reader
	TID   uint16
	Hash  nvme.AuthHashID
	Group nvme.AuthDHGroupID

	c1, c2     []byte
	s1, s2     uint32
	key        *KeyPair
	sessionKey []byte
	// matched is the index of the credentials the host proved, -1 before.
	matched       int
	authenticated bool
}

// NewControllerExchange starts a transaction from the host's AUTH_Negotiate,
// choosing the hash function and DH group as nvmet does. On failure the
// exchange is still returned when the message had a header (its TID goes
// into the AUTH_Failure1), with a *ProtocolError.
func NewControllerExchange(cfg *ControllerConfig, negotiate []byte) (*ControllerExchange, error) {
	h, err := DecodeHeader(negotiate)
	if err != nil {
		return nil, fail(nvme.AuthFailureIncorrectPayload, err)
	}
	x := &ControllerExchange{cfg: cfg, rand: cfg.Rand, TID: h.TID, matched: -1}
	if x.rand == nil {
		x.rand = rand.Reader
	}
	m, err := DecodeNegotiate(negotiate)
	switch {
	case err != nil:
		return x, fail(nvme.AuthFailureIncorrectPayload, err)
	case m.SCC != nvme.AuthSCCNone:
		return x, failf(nvme.AuthFailureConcatMismatch, "secure channel concatenation %d is not supported", m.SCC)
	case len(m.Protocols) != 1:
		return x, failf(nvme.AuthFailureHashUnusable, "%d protocol descriptors, 1 expected", len(m.Protocols))
	case m.Protocols[0].AuthID != nvme.AuthProtocolDHHMACCHAP:
		return x, failf(nvme.AuthFailureIncorrectPayload, "protocol %#x is not DH-HMAC-CHAP", m.Protocols[0].AuthID)
	case len(cfg.Credentials) == 0:
		return x, failf(nvme.AuthFailureFailed, "no secret for the host")
	}
	p := m.Protocols[0]
	var ok bool
	if x.Hash, ok = choose(cmpOr(cfg.Hashes, Hashes), p.Hashes, func(id nvme.AuthHashID) bool { return HashSize(id) > 0 }); !ok {
		return x, failf(nvme.AuthFailureHashUnusable, "no usable hash function among %v", p.Hashes)
	}
	if x.Group, ok = choose(cmpOr(cfg.Groups, Groups), p.Groups, GroupSupported); !ok {
		return x, failf(nvme.AuthFailureDHGroupUnusable, "no usable DH group among %v", p.Groups)
	}
	return x, nil
}

func cmpOr[T any](a, b []T) []T {
	if len(a) > 0 {
		return a
	}
	return b
}

// choose returns the first of pref (that usable accepts) the host offered.
func choose[T comparable](pref, offered []T, usable func(T) bool) (T, bool) {
	for _, id := range pref {
		if usable(id) && slices.Contains(offered, id) {
			return id, true
		}
	}
	var zero T
	return zero, false
}

// ChallengeSize is the length of the DH-HMAC-CHAP_Challenge Challenge
// returns.
func (x *ControllerExchange) ChallengeSize() int {
	return challengeSize + HashSize(x.Hash) + PublicValueSize(x.Group)
}

// Challenge draws C1, S1 and, with a DH group, an ephemeral key, and
// returns DH-HMAC-CHAP_Challenge.
func (x *ControllerExchange) Challenge() ([]byte, error) {
	x.c1 = make([]byte, HashSize(x.Hash))
	if _, err := io.ReadFull(x.rand, x.c1); err != nil {
		return nil, fmt.Errorf("dhchap: drawing a challenge: %w", err)
	}
	x.s1 = NextSeqNum()
	m := Challenge{TID: x.TID, Hash: x.Hash, Group: x.Group, Seq: x.s1, C: x.c1}
	if x.Group != nvme.AuthDHGroupNull {
		k, err := GenerateKey(x.rand, x.Group)
		if err != nil {
			return nil, err
		}
		x.key, m.DHValue = k, k.Public
	}
	return m.Encode(), nil
}

// HandleReply checks the host's DH-HMAC-CHAP_Reply against every candidate
// secret (nvmet_auth_reply). Authenticated reports afterwards whether the
// host is authenticated already (no controller proof asked, or S2 = 0).
func (x *ControllerExchange) HandleReply(b []byte) error {
	if x.c1 == nil {
		return failf(nvme.AuthFailureIncorrectMessage, "reply before challenge")
	}
	m, err := DecodeReply(b)
	switch {
	case err != nil:
		return fail(nvme.AuthFailureIncorrectPayload, err)
	case m.TID != x.TID:
		return failf(nvme.AuthFailureIncorrectPayload, "transaction %d, expected %d", m.TID, x.TID)
	case len(m.Response) != HashSize(x.Hash):
		return failf(nvme.AuthFailureFailed, "hash length %d, %s has %d", len(m.Response), HashName(x.Hash), HashSize(x.Hash))
	case x.Group == nvme.AuthDHGroupNull && len(m.DHValue) != 0:
		return failf(nvme.AuthFailureIncorrectPayload, "a DH value with the null group")
	case x.Group != nvme.AuthDHGroupNull && len(m.DHValue) == 0:
		return failf(nvme.AuthFailureIncorrectPayload, "no DH value with %s", GroupName(x.Group))
	}
	c1 := x.c1
	if x.key != nil {
		if x.sessionKey, err = x.key.SharedSecret(m.DHValue); err != nil {
			return fail(nvme.AuthFailureDHGroupUnusable, err)
		}
		c1 = AugmentedChallenge(x.Hash, x.sessionKey, x.c1)
	}
	for i, cr := range x.cfg.Credentials {
		want := HostResponse(x.Hash, cr.Host.TransformedKey(x.cfg.HostNQN), c1, x.s1, x.TID, x.cfg.HostNQN, x.cfg.SubNQN)
		if subtle.ConstantTimeCompare(want, m.Response) == 1 && x.matched < 0 {
			x.matched = i
		}
	}
	if x.matched < 0 {
		return fail(nvme.AuthFailureFailed, fmt.Errorf("%w: host response mismatch", ErrAuthFailed))
	}
	x.s2 = m.Seq
	if m.CValid && m.Seq != 0 {
		x.c2 = m.C2
		// Prefer credentials that can answer the host's challenge.
		for i, cr := range x.cfg.Credentials {
			if cr.Ctrl != nil && cr.Host.Transform == x.cfg.Credentials[x.matched].Host.Transform &&
				subtle.ConstantTimeCompare(cr.Host.Key, x.cfg.Credentials[x.matched].Host.Key) == 1 {
				x.matched = i
				break
			}
		}
	} else {
		x.authenticated = true
	}
	return nil
}

// Matched returns the index in ControllerConfig.Credentials of the secret
// the host proved, or -1.
func (x *ControllerExchange) Matched() int { return x.matched }

// Authenticated reports whether the host has authenticated: after
// HandleReply without a controller challenge, or after HandleSuccess2.
func (x *ControllerExchange) Authenticated() bool { return x.authenticated }

// WantsSuccess2 reports whether the host asked the controller to prove
// itself, so that DH-HMAC-CHAP_Success2 follows Success1.
func (x *ControllerExchange) WantsSuccess2() bool { return x.c2 != nil }

// Success1Size is the length of the DH-HMAC-CHAP_Success1 Success1 returns.
func (x *ControllerExchange) Success1Size() int {
	if x.c2 != nil {
		return success1Size + HashSize(x.Hash)
	}
	return success1Size
}

// Success1 returns DH-HMAC-CHAP_Success1, with the controller's response
// R2 when the host sent a challenge. Without a controller secret to answer
// it, it fails with Failed (nvmet_auth_success1).
func (x *ControllerExchange) Success1() ([]byte, error) {
	if x.matched < 0 {
		return nil, failf(nvme.AuthFailureIncorrectMessage, "success1 before a valid reply")
	}
	m := Success1{TID: x.TID, HL: uint8(HashSize(x.Hash))}
	if x.c2 != nil {
		ctrl := x.cfg.Credentials[x.matched].Ctrl
		if ctrl == nil {
			return nil, failf(nvme.AuthFailureFailed, "the host asked for bidirectional authentication and no controller secret is configured")
		}
		c2 := x.c2
		if x.sessionKey != nil {
			c2 = AugmentedChallenge(x.Hash, x.sessionKey, x.c2)
		}
		m.RValid = true
		m.Response = ControllerResponse(x.Hash, ctrl.TransformedKey(x.cfg.SubNQN), c2, x.s2, x.TID, x.cfg.HostNQN, x.cfg.SubNQN)
	}
	return m.Encode(), nil
}

// HandleSuccess2 completes a bidirectional transaction.
func (x *ControllerExchange) HandleSuccess2(b []byte) error {
	m, err := DecodeSuccess2(b)
	switch {
	case err != nil:
		return fail(nvme.AuthFailureIncorrectPayload, err)
	case x.c2 == nil:
		return failf(nvme.AuthFailureIncorrectMessage, "success2 without a controller challenge")
	case m.TID != x.TID:
		return failf(nvme.AuthFailureIncorrectPayload, "transaction %d, expected %d", m.TID, x.TID)
	}
	x.authenticated = true
	return nil
}

// Failure1 returns AUTH_Failure1 for transaction tid.
func Failure1(tid uint16, expl nvme.AuthFailureExplanation) []byte {
	m := Failure{ID: nvme.AuthIDFailure1, TID: tid, Reason: nvme.AuthFailureReasonFailed, Explanation: expl}
	return m.Encode()
}
