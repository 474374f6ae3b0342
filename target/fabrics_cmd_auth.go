package target

import (
	"basalt/pkg/dhchap"
	"basalt/pkg/nvme"
)

// Authentication Send and Receive (NVMe Base 2.0 §6.2, §6.3) carrying
// DH-HMAC-CHAP (≈ nvmet fabrics-cmd-auth.c), on admin and I/O queues. The
// state they move is in auth.go.

// parseAuthCmd validates Authentication Send/Receive: SECP E9h, SPSP0 and
// SPSP1 01h, a transfer length of 1..8 KiB (nvmet: Invalid Field at the
// offending byte). A queue of a host without DH-HMAC-CHAP secrets has no
// security protocol enabled: Invalid Field at SECP.
func (sq *SQ) parseAuthCmd(r *Request) nvme.Status {
	if !sq.connected.Load() {
		return r.fail(nvme.StatusCommandSequenceError, nvme.SQEOffsetNSID)
	}
	if sq.ctrl.Load().isDead() {
		return nvme.StatusAbortSQDeletion
	}
	a := r.Cmd.DecodeAuth()
	switch {
	case sq.auth == nil || a.SECP != nvme.AuthSECPDHHMACCHAP:
		return r.fail(nvme.StatusInvalidField, nvme.AuthOffsetSECP)
	case a.SPSP0 != nvme.AuthSPSPDHHMACCHAP0:
		return r.fail(nvme.StatusInvalidField, nvme.AuthOffsetSPSP0)
	case a.SPSP1 != nvme.AuthSPSPDHHMACCHAP1:
		return r.fail(nvme.StatusInvalidField, nvme.AuthOffsetSPSP1)
	case a.Len == 0 || a.Len > AdminMaxTransfer:
		return r.fail(nvme.StatusInvalidField, nvme.AuthOffsetTL)
	}
	if r.Cmd.FCType() == nvme.FCTypeAuthSend {
		r.execute = executeAuthSend
		return r.expectData(DirH2C, a.Len)
	}
	r.execute = executeAuthReceive
	return r.expectData(DirC2H, a.Len)
}

// executeAuthSend takes one message from the host (nvmet_execute_auth_send).
// The command itself succeeds whatever the message: a fault moves the queue
// to Failure1, which the next Authentication Receive reports.
func executeAuthSend(r *Request) {
	sq, c := r.sq, r.sq.ctrl.Load()
	a := sq.auth
	msg := r.Data[:r.TransferLen]
	a.mu.Lock()
	teardown := sq.authSendLocked(c, msg)
	if !a.failed && a.step != nvme.AuthIDNegotiate {
		sq.armAuthLocked(c)
	}
	if teardown {
		a.failed = true
	}
	expl := a.explanation
	a.mu.Unlock()
	sq.complete(r, nvme.StatusSuccess)
	if teardown {
		c.authFailed(sq.qid, expl)
	}
}

// authSendLocked applies msg to the queue's state; it reports whether the
// controller is to be torn down (the host sent AUTH_Failure2).
func (sq *SQ) authSendLocked(c *Controller, msg []byte) (teardown bool) {
	a := sq.auth
	if a.failed {
		return false
	}
	h, err := dhchap.DecodeHeader(msg)
	switch {
	case err != nil:
		a.failLocked(nvme.AuthFailureIncorrectPayload)
	case h.Type == nvme.AuthTypeCommon && h.ID == nvme.AuthIDNegotiate:
		// A Negotiate (re)starts a transaction in any state.
		sq.negotiateLocked(c, msg)
	case h.Type == nvme.AuthTypeCommon && h.ID == nvme.AuthIDFailure2:
		f, err := dhchap.DecodeFailure(msg, nvme.AuthIDFailure2)
		a.explanation = f.Explanation
		if err != nil {
			a.explanation = nvme.AuthFailureIncorrectPayload
		}
		a.authenticated.Store(false)
		return true
	case h.Type != nvme.AuthTypeDHCHAP || h.ID != a.step || a.x == nil:
		a.failLocked(nvme.AuthFailureIncorrectMessage)
	case int32(h.TID) != a.tid:
		a.failLocked(nvme.AuthFailureIncorrectPayload)
	case h.ID == nvme.AuthIDReply:
		sq.replyLocked(c, msg)
	default: // Success2
		if err := a.x.HandleSuccess2(msg); err != nil {
			a.failLocked(dhchap.Explanation(err))
			return false
		}
		sq.authenticatedLocked(c)
	}
	return false
}

func (sq *SQ) negotiateLocked(c *Controller, msg []byte) {
	a := sq.auth
	if sq.qid == 0 {
		c.refreshCredentials()
	}
	x, err := dhchap.NewControllerExchange(c.exchangeConfig(), msg)
	if x != nil {
		a.tid = int32(x.TID)
	}
	if err != nil {
		a.failLocked(dhchap.Explanation(err))
		return
	}
	a.x, a.step = x, nvme.AuthIDChallenge
}

func (sq *SQ) replyLocked(c *Controller, msg []byte) {
	a := sq.auth
	if err := a.x.HandleReply(msg); err != nil {
		a.failLocked(dhchap.Explanation(err))
		return
	}
	a.step = nvme.AuthIDSuccess1
	if a.x.Authenticated() {
		sq.authenticatedLocked(c) // Success1 still goes to the host
	}
}

// authenticatedLocked records a proven host; the admin queue pins the
// controller's secrets to the set it proved.
func (sq *SQ) authenticatedLocked(c *Controller) {
	a := sq.auth
	if sq.qid == 0 {
		cfg := c.exchangeConfig()
		if i := a.x.Matched(); i >= 0 && i < len(cfg.Credentials) {
			c.pinCredentials(cfg.Credentials[i])
		}
	}
	if !a.everAuthenticated && sq.qid == 0 {
		c.t.log.Info("DH-HMAC-CHAP authenticated", "cntlid", c.cntlid, "subnqn", c.subsys.nqn, "hostnqn", c.hostNQN,
			"hash", dhchap.HashName(a.x.Hash), "dhgroup", dhchap.GroupName(a.x.Group), "bidirectional", a.x.WantsSuccess2())
	}
	a.setAuthenticatedLocked()
	if a.step == nvme.AuthIDSuccess2 {
		a.resetLocked()
	}
}

// executeAuthReceive returns the controller's next message
// (nvmet_execute_auth_receive), zero padded to AL. A buffer too small for
// it is Invalid Field at AL and changes nothing.
func executeAuthReceive(r *Request) {
	sq, c := r.sq, r.sq.ctrl.Load()
	a := sq.auth
	a.mu.Lock()
	msg, status, teardown := sq.authReceiveLocked(int(r.TransferLen))
	if teardown {
		a.failed = true
	} else if a.step != nvme.AuthIDNegotiate {
		sq.armAuthLocked(c)
	}
	expl := a.explanation
	a.mu.Unlock()
	if !status.Success() {
		r.sq.complete(r, r.fail(status, nvme.AuthOffsetAL))
		return
	}
	buf := r.Data[:r.TransferLen]
	clear(buf[copy(buf, msg):])
	sq.complete(r, nvme.StatusSuccess)
	if teardown {
		c.authFailed(sq.qid, expl)
	}
}

func (sq *SQ) authReceiveLocked(al int) (msg []byte, status nvme.Status, teardown bool) {
	a := sq.auth
	tid := uint16(a.tid)
	if al < dhchap.FailureSize {
		return nil, nvme.StatusInvalidField, false
	}
	switch {
	case a.failed:
		return dhchap.Failure1(tid, a.explanation), nvme.StatusSuccess, false
	case a.step == nvme.AuthIDChallenge:
		if a.x.ChallengeSize() > al {
			return nil, nvme.StatusInvalidField, false
		}
		m, err := a.x.Challenge()
		if err != nil {
			return nil, nvme.StatusInternalError, false
		}
		a.step = nvme.AuthIDReply
		return m, nvme.StatusSuccess, false
	case a.step == nvme.AuthIDSuccess1:
		if a.x.Success1Size() > al {
			return nil, nvme.StatusInvalidField, false
		}
		m, err := a.x.Success1()
		if err != nil {
			a.failLocked(dhchap.Explanation(err))
			return dhchap.Failure1(tid, a.explanation), nvme.StatusSuccess, true
		}
		if a.x.WantsSuccess2() {
			a.step = nvme.AuthIDSuccess2
		} else {
			a.resetLocked()
		}
		return m, nvme.StatusSuccess, false
	case a.step == nvme.AuthIDFailure1:
		return dhchap.Failure1(tid, a.explanation), nvme.StatusSuccess, true
	default:
		// The host should be sending (nvmet: "unhandled step").
		a.failLocked(nvme.AuthFailureIncorrectMessage)
		return dhchap.Failure1(tid, a.explanation), nvme.StatusSuccess, true
	}
}
