package host

import (
	"context"
	"errors"
	"fmt"

	"basalt/pkg/dhchap"
	"basalt/pkg/nvme"
)

// ErrAuthentication is wrapped when DH-HMAC-CHAP fails on a queue: the
// controller refused the host's response, or the host refused the
// controller's.
var ErrAuthentication = errors.New("host: DH-HMAC-CHAP authentication failed")

// chapBufSize is the Authentication Receive length the Linux host uses
// (CHAP_BUF_SIZE: enough for ffdhe8192).
const chapBufSize = 4096

func (o *Options) validateDHCHAP() []error {
	var errs []error
	if o.DHCHAPSecret != "" {
		if _, err := dhchap.ParseSecret(o.DHCHAPSecret); err != nil {
			errs = append(errs, fmt.Errorf("DHCHAPSecret: %w", err))
		}
	}
	if o.DHCHAPCtrlSecret != "" {
		if o.DHCHAPSecret == "" {
			errs = append(errs, errors.New("DHCHAPCtrlSecret without DHCHAPSecret"))
		}
		if _, err := dhchap.ParseSecret(o.DHCHAPCtrlSecret); err != nil {
			errs = append(errs, fmt.Errorf("DHCHAPCtrlSecret: %w", err))
		}
	}
	return errs
}

// authenticate runs one DH-HMAC-CHAP transaction on q after a Connect that
// asked for it, in the Linux host's order (nvme_queue_auth_work): Negotiate,
// Challenge, Reply, Success1, and Success2 when the controller had to prove
// itself; a fault the host finds is reported to the controller with
// AUTH_Failure2.
func (c *Controller) authenticate(ctx context.Context, q *queue, qid uint16) error {
	if c.opts.DHCHAPSecret == "" {
		return fmt.Errorf("%w: queue %d: the controller requires authentication and no DHCHAPSecret is configured", ErrAuthentication, qid)
	}
	cfg := &dhchap.HostConfig{HostNQN: c.opts.HostNQN, SubNQN: c.opts.SubNQN}
	cfg.Secret, _ = dhchap.ParseSecret(c.opts.DHCHAPSecret) // checked by Validate
	if c.opts.DHCHAPCtrlSecret != "" {
		cs, _ := dhchap.ParseSecret(c.opts.DHCHAPCtrlSecret)
		cfg.CtrlSecret = &cs
	}
	x := dhchap.NewHostExchange(cfg, c.nextAuthTransaction())
	if err := c.authSend(ctx, q, x.Negotiate()); err != nil {
		return err
	}
	ch, err := c.authReceive(ctx, q)
	if err != nil {
		return err
	}
	reply, err := x.HandleChallenge(ch)
	if err != nil {
		return c.authFailed(ctx, q, qid, x, err)
	}
	if err := c.authSend(ctx, q, reply); err != nil {
		return err
	}
	s1, err := c.authReceive(ctx, q)
	if err != nil {
		return err
	}
	s2, err := x.HandleSuccess1(s1)
	if err != nil {
		return c.authFailed(ctx, q, qid, x, err)
	}
	if s2 != nil {
		if err := c.authSend(ctx, q, s2); err != nil {
			return err
		}
	}
	c.log.Debug("DH-HMAC-CHAP authenticated", "qid", qid, "hash", dhchap.HashName(x.Hash),
		"dhgroup", dhchap.GroupName(x.Group), "bidirectional", x.Bidirectional())
	return nil
}

func (c *Controller) authFailed(ctx context.Context, q *queue, qid uint16, x *dhchap.HostExchange, err error) error {
	if pe, ok := errors.AsType[*dhchap.ProtocolError](err); !ok || !pe.Remote {
		_ = c.authSend(ctx, q, x.Failure2(err)) // the queue is failing anyway
	}
	return fmt.Errorf("%w: queue %d: %w", ErrAuthentication, qid, err)
}

func (c *Controller) authSend(ctx context.Context, q *queue, msg []byte) error {
	var cmd nvme.Command
	cmd.EncodeAuth(true, uint32(len(msg)))
	_, err := q.exec(ctx, &cmd, nil, msg, fabricsInlineMax)
	return err
}

func (c *Controller) authReceive(ctx context.Context, q *queue) ([]byte, error) {
	var cmd nvme.Command
	cmd.EncodeAuth(false, chapBufSize)
	buf := make([]byte, chapBufSize)
	if _, err := q.exec(ctx, &cmd, buf, nil, fabricsInlineMax); err != nil {
		return nil, err
	}
	return buf, nil
}

// nextAuthTransaction returns a transaction identifier (the Linux host
// counts per controller).
func (c *Controller) nextAuthTransaction() uint16 {
	return uint16(c.authTID.Add(1))
}
