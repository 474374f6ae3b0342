package host

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"basalt/pkg/nvme"
)

// aLongTimeAgo is a deadline in the past: setting it unblocks pending I/O.
var aLongTimeAgo = time.Unix(1, 0)

// Connect response DW0 AUTHREQ bits (NVMe-oF 1.1; Linux NVME_CONNECT_AUTHREQ_*).
const (
	connectATR  = 1 << 17 // authentication required
	connectASCR = 1 << 18 // secure channel concatenation required
)

// queueParams are the inputs of connectQueue.
type queueParams struct {
	qid       uint16
	sqsize    uint16 // 0's based
	kato      uint32 // ms, admin queue only
	cntlid    uint16 // nvme.CNTLIDDynamic for the admin queue
	reserved  int
	inlineMax int
}

// connectQueue opens one TCP connection, performs ICReq/ICResp, starts the
// queue's goroutines and sends the Fabrics Connect command. It returns the
// queue and the Connect completion.
func (c *Controller) connectQueue(ctx context.Context, p queueParams) (*queue, nvme.Completion, error) {
	d := net.Dialer{Timeout: c.opts.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, nvme.Completion{}, fmt.Errorf("host: queue %d: %w", p.qid, err)
	}
	want := digests{header: c.opts.HeaderDigest, data: c.opts.DataDigest}
	r := bufio.NewReaderSize(conn, receiveBufferSize)
	icresp, err := c.initializeConnection(ctx, conn, r, want)
	if err != nil {
		conn.Close()
		return nil, nvme.Completion{}, fmt.Errorf("host: queue %d: while initializing the connection: %w", p.qid, err)
	}
	q := newQueue(conn, r, queueConfig{
		qid: p.qid, depth: int(p.sqsize) + 1, reserved: p.reserved, inlineMax: p.inlineMax,
		maxH2CData: icresp.MAXH2CDATA, digest: want, log: c.log, callbacks: &c.callbacks,
		onFail: c.fail,
	})
	if !c.addQueue(q) {
		q.close(ErrClosed)
		return nil, nvme.Completion{}, c.failure()
	}
	cpl, err := c.connectCommand(ctx, q, p)
	return q, cpl, err
}

// initializeConnection sends ICReq and checks ICResp (NVMe/TCP 1.0 §3.3),
// waiting at most icrespTimeout like the Linux host.
func (c *Controller) initializeConnection(ctx context.Context, conn net.Conn, r *bufio.Reader, want digests) (nvme.ICResp, error) {
	timer := c.opts.Clock.NewTimer(icrespTimeout)
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case <-timer.C():
			conn.SetDeadline(aLongTimeAgo) //nolint:errcheck // best effort unblock
		case <-ctx.Done():
			conn.SetDeadline(aLongTimeAgo) //nolint:errcheck
		case <-stopWatch:
		}
	}()
	defer func() {
		close(stopWatch)
		<-watchDone
		timer.Stop()
		conn.SetDeadline(time.Time{}) //nolint:errcheck
	}()

	var b [nvme.ICReqSize]byte
	nvme.ICReq{PFV: 0, HPDA: 0, DGST: want.icreqDGST(), MAXR2T: 0}.Encode(b[:])
	if _, err := conn.Write(b[:]); err != nil {
		return nvme.ICResp{}, fmt.Errorf("while sending ICReq: %w", err)
	}
	if _, err := io.ReadFull(r, b[:nvme.CommonHeaderSize]); err != nil {
		return nvme.ICResp{}, fmt.Errorf("failed to receive ICResp: %w", err)
	}
	ch := nvme.DecodeCommonHeader(b[:])
	if ch.Type == nvme.PDUC2HTermReq && ch.PLEN >= termReqPLENMin && ch.PLEN <= termReqPLENMax {
		var t [termReqPLENMax]byte
		copy(t[:], b[:nvme.CommonHeaderSize])
		if _, err := io.ReadFull(r, t[nvme.CommonHeaderSize:ch.PLEN]); err != nil {
			return nvme.ICResp{}, fmt.Errorf("failed to receive C2HTermReq: %w", err)
		}
		tr := nvme.DecodeTermReq(t[:])
		return nvme.ICResp{}, &TermReqError{FES: tr.FES, FEI: tr.FEI, Header: append([]byte(nil), t[nvme.TermReqHLEN:ch.PLEN]...)}
	}
	if ch.Type != nvme.PDUICResp || ch.PLEN != nvme.ICReqSize {
		return nvme.ICResp{}, protocolErrorf(0, "expected a 128-byte ICResp, got %s", describePDU(ch))
	}
	if _, err := io.ReadFull(r, b[nvme.CommonHeaderSize:]); err != nil {
		return nvme.ICResp{}, fmt.Errorf("failed to receive ICResp: %w", err)
	}
	return checkICResp(b[:], want)
}

// connectCommand sends the Fabrics Connect command (NVMe-oF 1.1 §3.3) the way
// Linux nvmf_connect_admin_queue / nvmf_connect_io_queue do, with its 1024
// bytes of data in the capsule.
func (c *Controller) connectCommand(ctx context.Context, q *queue, p queueParams) (nvme.Completion, error) {
	var cmd nvme.Command
	cmd.EncodeConnect(nvme.ConnectCmd{QID: p.qid, SQSIZE: p.sqsize, KATO: p.kato})
	data := make([]byte, nvme.ConnectDataSize)
	cd := nvme.ConnectData{HostID: c.opts.HostID, CNTLID: p.cntlid, SubNQN: c.opts.SubNQN, HostNQN: c.opts.HostNQN}
	cd.Encode(data)
	cpl, err := q.exec(ctx, &cmd, nil, data, fabricsInlineMax)
	if err != nil {
		return cpl, err
	}
	if cpl.DW0&connectASCR != 0 {
		return cpl, incompatiblef("queue %d: secure concatenation is not supported", p.qid)
	}
	if cpl.DW0&connectATR != 0 {
		return cpl, c.authenticate(ctx, q, p.qid)
	}
	return cpl, nil
}

// fabricsInlineMax is the in-capsule limit for the admin queue and for
// Fabrics commands on any queue (Linux NVME_TCP_ADMIN_CCSZ minus the SQE).
const fabricsInlineMax = nvme.AdminICDSize - nvme.SQESize
