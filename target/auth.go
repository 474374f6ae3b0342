package target

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/dhchap"
	"basalt/pkg/nvme"
)

// In-band authentication state (≈ nvmet auth.c): what a controller holds
// for DH-HMAC-CHAP and where each of its queues stands. The commands are in
// fabrics_cmd_auth.go.
//
// A host whose secrets (HostSecrets.DHCHAPKey) are configured gets AUTHREQ
// ATR in every Connect response; each queue, admin and I/O, then refuses
// everything but Authentication Send/Receive with Authentication Required
// until the host has proven it knows the secret on that queue:
//
//	Connect ─▶ step Negotiate ─(Send AUTH_Negotiate)─▶ Challenge
//	  ─(Receive)─▶ Reply ─(Send Reply: R1 checked)─▶ Success1
//	  ─(Receive Success1 [R2])─▶ authenticated, or Success2 when the host
//	  sent C2 ─(Send Success2)─▶ authenticated ─▶ Negotiate (re-authentication)
//
// A fault found on the way moves the queue to Failure1: the next Receive
// returns AUTH_Failure1 with the reason, and the controller is torn down
// authFailureLinger later (nvmet_ctrl_fatal_error), time for that response
// to reach the host. An AUTH_Failure2 from the host tears it down too. A
// half-done exchange is bounded by DHCHAPConfig.Timeout: a queue that has
// never authenticated is then torn down; one re-authenticating goes back to
// Negotiate with its earlier proof (as nvmet_auth_expired_work).

// Errors passed to QueueOps.Close when authentication ends an association.
var (
	ErrAuthFailed  = errors.New("target: DH-HMAC-CHAP authentication failed")
	ErrAuthTimeout = errors.New("target: DH-HMAC-CHAP authentication did not complete in time")
)

const (
	// DefaultDHCHAPTimeout bounds an exchange on a controller without a
	// keep-alive timeout (nvmet: 120 s, else KATO).
	DefaultDHCHAPTimeout = 120 * time.Second
	// authFailureLinger separates an AUTH_Failure1 response from the
	// teardown of its controller.
	authFailureLinger = time.Second
)

// DHCHAPConfig chooses what the target accepts in DH-HMAC-CHAP.
type DHCHAPConfig struct {
	// Hashes and Groups are accepted hash functions and DH groups, most
	// preferred first; the first the host offers is used. Empty: all, with
	// SHA-256 and the null group first (nvmet's defaults).
	Hashes []nvme.AuthHashID
	Groups []nvme.AuthDHGroupID
	// Timeout bounds one exchange; zero: the controller's KATO, or
	// DefaultDHCHAPTimeout when it has none.
	Timeout time.Duration
}

func (c *DHCHAPConfig) validate() error {
	for _, h := range c.Hashes {
		if dhchap.HashSize(h) == 0 {
			return fmt.Errorf("DH-HMAC-CHAP hash %d not supported", h)
		}
	}
	for _, g := range c.Groups {
		if !dhchap.GroupSupported(g) {
			return fmt.Errorf("DH-HMAC-CHAP DH group %d not supported", g)
		}
	}
	if c.Timeout < 0 {
		return errors.New("negative DH-HMAC-CHAP timeout")
	}
	return nil
}

// ctrlAuth is a controller's DH-HMAC-CHAP configuration (nil: the host
// needs no authentication).
type ctrlAuth struct {
	mu sync.Mutex
	// creds are the candidate secrets; once the admin queue authenticated,
	// only the set it proved.
	creds []dhchap.Credentials
}

// dhchapCredentials parses the DH-HMAC-CHAP secrets hostNQN has for
// subNQN (every candidate set for the discovery subsystem). configured
// reports whether any set has a host secret; creds holds those that parse.
func (t *Target) dhchapCredentials(subNQN, hostNQN string) (creds []dhchap.Credentials, configured bool) {
	if subNQN == nvme.DiscoveryNQN && !t.cfg.DiscoveryAuth {
		return nil, false
	}
	for _, sec := range t.HostSecrets(subNQN, hostNQN) {
		if sec.DHCHAPKey == "" {
			continue
		}
		configured = true
		host, err := dhchap.ParseSecret(sec.DHCHAPKey)
		if err != nil {
			t.log.Warn("DH-HMAC-CHAP host secret unusable", "subnqn", subNQN, "hostnqn", hostNQN, "err", err)
			continue
		}
		cr := dhchap.Credentials{Host: host}
		if sec.DHCHAPCtrlKey != "" {
			ctrl, err := dhchap.ParseSecret(sec.DHCHAPCtrlKey)
			if err != nil {
				t.log.Warn("DH-HMAC-CHAP controller secret unusable", "subnqn", subNQN, "hostnqn", hostNQN, "err", err)
				continue
			}
			cr.Ctrl = &ctrl
		}
		creds = append(creds, cr)
	}
	return creds, configured
}

// exchangeConfig is the configuration of one transaction on c.
func (c *Controller) exchangeConfig() *dhchap.ControllerConfig {
	c.auth.mu.Lock()
	creds := slices.Clone(c.auth.creds)
	c.auth.mu.Unlock()
	return &dhchap.ControllerConfig{
		HostNQN: c.hostNQN, SubNQN: c.subsys.nqn, Credentials: creds,
		Hashes: c.t.cfg.DHCHAP.Hashes, Groups: c.t.cfg.DHCHAP.Groups,
	}
}

// refreshCredentials rereads the host's secrets before an admin queue
// (re-)authentication, so that rotated secrets apply.
func (c *Controller) refreshCredentials() {
	creds, _ := c.t.dhchapCredentials(c.subsys.nqn, c.hostNQN)
	c.auth.mu.Lock()
	c.auth.creds = creds
	c.auth.mu.Unlock()
}

// pinCredentials keeps only the set the admin queue proved, for the I/O
// queues.
func (c *Controller) pinCredentials(cr dhchap.Credentials) {
	c.auth.mu.Lock()
	c.auth.creds = []dhchap.Credentials{cr}
	c.auth.mu.Unlock()
}

// authTimeout is the bound of one exchange on c.
func (c *Controller) authTimeout() time.Duration {
	if d := c.t.cfg.DHCHAP.Timeout; d > 0 {
		return d
	}
	if kato := c.katoMS.Load(); kato > 0 {
		return time.Duration(kato) * time.Millisecond
	}
	return DefaultDHCHAPTimeout
}

// sqAuth is one queue's authentication state (≈ the dhchap fields of
// struct nvmet_sq).
type sqAuth struct {
	// authenticated is read lock-free by every command's parse.
	authenticated atomic.Bool

	mu sync.Mutex
	// step is the message expected next: Negotiate, Reply or Success2 from
	// the host (Send), Challenge, Success1 or Failure1 to the host
	// (Receive).
	step nvme.AuthID
	// tid is the transaction of the exchange, -1 before one.
	tid int32
	x   *dhchap.ControllerExchange
	// explanation is the reason of a pending Failure1.
	explanation nvme.AuthFailureExplanation
	// failed: the queue's controller is being torn down.
	failed bool
	// everAuthenticated distinguishes a first authentication from a
	// re-authentication (a timeout ends the first one with the queue).
	everAuthenticated bool

	deadline time.Time
	watching bool
	kick     chan struct{}
}

func newSQAuth() *sqAuth {
	return &sqAuth{step: nvme.AuthIDNegotiate, tid: -1, kick: make(chan struct{}, 1)}
}

// authenticated reports whether sq may run commands other than
// Authentication Send/Receive (nvmet_check_auth_status).
func (sq *SQ) authenticated() bool {
	return sq.auth == nil || sq.auth.authenticated.Load()
}

// setAuthenticated ends a successful exchange.
func (a *sqAuth) setAuthenticatedLocked() {
	a.authenticated.Store(true)
	a.everAuthenticated = true
}

// resetLocked forgets the exchange: the queue waits for a new
// AUTH_Negotiate.
func (a *sqAuth) resetLocked() {
	a.step, a.tid, a.x, a.explanation = nvme.AuthIDNegotiate, -1, nil, 0
	a.deadline = time.Time{}
}

// failLocked moves the queue to Failure1 with expl.
func (a *sqAuth) failLocked(expl nvme.AuthFailureExplanation) {
	a.step, a.explanation, a.x = nvme.AuthIDFailure1, expl, nil
	a.authenticated.Store(false)
}

// armLocked (re)starts the exchange timeout of sq (mod_delayed_work in
// nvmet), starting the watcher goroutine when none runs.
func (sq *SQ) armAuthLocked(c *Controller) {
	a := sq.auth
	a.deadline = c.clock.Now().Add(c.authTimeout())
	if a.watching {
		select {
		case a.kick <- struct{}{}:
		default:
		}
		return
	}
	a.watching = true
	go sq.watchAuth(c)
}

// watchAuth waits for the exchange deadline of sq; it exits when no
// exchange is pending, the queue is released or the controller destroyed.
func (sq *SQ) watchAuth(c *Controller) {
	a := sq.auth
	for {
		a.mu.Lock()
		if a.deadline.IsZero() || a.failed {
			a.watching = false
			a.mu.Unlock()
			return
		}
		wait := a.deadline.Sub(c.clock.Now())
		if wait <= 0 {
			sq.authExpiredLocked(c)
			a.mu.Unlock()
			continue
		}
		a.mu.Unlock()
		timer := c.clock.NewTimer(wait)
		select {
		case <-timer.C():
		case <-a.kick:
		case <-sq.quit:
		case <-c.done:
		}
		timer.Stop()
		if sq.released.Load() || c.isDead() {
			a.mu.Lock()
			a.watching = false
			a.mu.Unlock()
			return
		}
	}
}

// authExpiredLocked ends an exchange that ran out of time.
func (sq *SQ) authExpiredLocked(c *Controller) {
	a := sq.auth
	if a.everAuthenticated {
		c.t.log.Info("DH-HMAC-CHAP re-authentication timed out; keeping the earlier authentication",
			"cntlid", c.cntlid, "qid", sq.qid, "hostnqn", c.hostNQN, "transaction", a.tid)
		a.resetLocked()
		return
	}
	c.t.log.Warn("DH-HMAC-CHAP authentication timed out", "cntlid", c.cntlid, "qid", sq.qid,
		"hostnqn", c.hostNQN, "timeout", c.authTimeout())
	a.resetLocked()
	a.failed = true
	go c.destroy(ErrAuthTimeout)
}

// authFailed tears c down after a failed exchange on one of its queues
// (nvmet_ctrl_fatal_error): CSTS.CFS at once, the connections
// authFailureLinger later so that the AUTH_Failure1 response is sent first.
func (c *Controller) authFailed(qid uint16, expl nvme.AuthFailureExplanation) {
	c.t.log.Warn("DH-HMAC-CHAP authentication failed", "cntlid", c.cntlid, "qid", qid,
		"subnqn", c.subsys.nqn, "hostnqn", c.hostNQN, "reason", dhchap.ExplanationString(expl))
	c.mu.Lock()
	c.csts.Store(c.csts.Load() | nvme.CSTSFatal)
	c.mu.Unlock()
	c.t.mu.Lock()
	start := !c.t.mu.closed
	if start {
		c.t.ctrlWG.Add(1)
	}
	c.t.mu.Unlock()
	if !start {
		return
	}
	go func() {
		defer c.t.ctrlWG.Done()
		timer := c.clock.NewTimer(authFailureLinger)
		defer timer.Stop()
		select {
		case <-timer.C():
			c.destroy(ErrAuthFailed)
		case <-c.done:
		}
	}()
}

// installAuth gives a queue of c its authentication state before Connect
// completes, and bounds the wait for the host's first AUTH_Negotiate.
func (sq *SQ) installAuth(c *Controller) {
	if c.auth == nil {
		return
	}
	sq.auth = newSQAuth()
	sq.auth.mu.Lock()
	sq.armAuthLocked(c)
	sq.auth.mu.Unlock()
}

// connectResult is the Connect completion DW0: the CNTLID, and AUTHREQ ATR
// when the host must authenticate (nvmet_connect_result).
func (c *Controller) connectResult() uint32 {
	if c.auth != nil {
		return uint32(c.cntlid) | nvme.ConnectAuthReqATR
	}
	return uint32(c.cntlid)
}
