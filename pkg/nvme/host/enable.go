package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"basalt/pkg/nvme"
)

// ErrNotReady: CSTS did not reach the expected state in time.
var ErrNotReady = errors.New("host: controller not ready")

// CAP fields the host uses (NVMe Base 2.0 §3.1.4.1).
func capMQES(cap uint64) uint16  { return uint16(cap) }
func capTO(cap uint64) uint8     { return uint8(cap >> 24) }
func capMPSMIN(cap uint64) uint8 { return uint8(cap>>48) & 0xF }
func capCRWMS(cap uint64) bool   { return cap&(1<<59) != 0 }

// capCSSCSI is CAP.CSS bit 6 (bit 43): "one or more I/O command sets".
const capCSSCSI = 1 << 43

// propCRTO is the Controller Ready Timeouts property (NVMe Base 2.0 §3.1.4.20).
const propCRTO = 0x68

// ccCSSCSI is CC.CSS = 110b: all supported I/O command sets.
const ccCSSCSI = 6

// enable runs the Linux nvme_enable_ctrl sequence: Get CAP, Set CC with EN 0,
// Get CAP again ("CAP value may change after initial CC write"), Get CRTO if
// CAP.CRWMS, Set CC with EN 1, poll CSTS.RDY for (CAP.TO+1)/2 seconds, Get VS.
func (c *Controller) enable(ctx context.Context) error {
	cap, err := c.PropertyGet(ctx, nvme.PropCAP, 8)
	if err != nil {
		return fmt.Errorf("host: reading CAP failed: %w", err)
	}
	if capMPSMIN(cap) != 0 {
		return incompatiblef("minimum device page size %d too large for host (4096)", 1<<(12+capMPSMIN(cap)))
	}
	cc := uint64(nvme.CCIOSQESNVM<<nvme.CCIOSQESShift | nvme.CCIOCQESNVM<<nvme.CCIOCQESShift)
	if cap&capCSSCSI != 0 {
		cc |= ccCSSCSI << nvme.CCCSSShift
	}
	if err := c.PropertySet(ctx, nvme.PropCC, 4, cc); err != nil {
		return fmt.Errorf("host: writing CC (EN=0) failed: %w", err)
	}
	if cap, err = c.PropertyGet(ctx, nvme.PropCAP, 8); err != nil {
		return fmt.Errorf("host: reading CAP failed: %w", err)
	}
	c.cap = cap
	timeout := uint32(capTO(cap)) // 500 ms units
	if capCRWMS(cap) {
		crto, err := c.PropertyGet(ctx, propCRTO, 4)
		if err != nil {
			return fmt.Errorf("host: reading CRTO failed: %w", err)
		}
		if crwmt := uint32(crto & 0xFFFF); crwmt > timeout {
			timeout = crwmt
		}
	}
	if err := c.PropertySet(ctx, nvme.PropCC, 4, cc|nvme.CCEnable); err != nil {
		return fmt.Errorf("host: writing CC (EN=1) failed: %w", err)
	}
	wait := time.Duration((timeout+1)/2) * time.Second
	if err := c.waitCSTS(ctx, nvme.CSTSReady, nvme.CSTSReady, wait, "initialisation"); err != nil {
		return err
	}
	vs, err := c.PropertyGet(ctx, nvme.PropVS, 4)
	if err != nil {
		return fmt.Errorf("host: reading VS failed: %w", err)
	}
	c.vs = uint32(vs)
	return nil
}

// waitCSTS polls CSTS every millisecond until CSTS&mask == want, like Linux
// nvme_wait_ready: at least one more poll after the timeout expires, then
// ErrNotReady. CFS set or an all-ones CSTS fails at once.
func (c *Controller) waitCSTS(ctx context.Context, mask, want uint32, timeout time.Duration, what string) error {
	deadline := c.opts.Clock.NewTimer(timeout)
	defer deadline.Stop()
	expired := false
	for {
		v, err := c.PropertyGet(ctx, nvme.PropCSTS, 4)
		if err != nil {
			return fmt.Errorf("host: reading CSTS failed: %w", err)
		}
		csts := uint32(v)
		switch {
		case csts == 0xFFFFFFFF:
			return fmt.Errorf("%w: CSTS reads all ones during %s", ErrNotReady, what)
		case csts&nvme.CSTSFatal != 0:
			return fmt.Errorf("%w: controller fatal status during %s, CSTS=%#x", ErrNotReady, what, csts)
		case csts&mask == want:
			return nil
		case expired:
			return fmt.Errorf("%w: device not ready; aborting %s, CSTS=%#x", ErrNotReady, what, csts)
		}
		poll := c.opts.Clock.NewTimer(time.Millisecond)
		select {
		case <-poll.C():
		case <-deadline.C():
			expired = true
		case <-ctx.Done():
			poll.Stop()
			return context.Cause(ctx)
		}
		poll.Stop()
	}
}

// shutdownNotify writes CC.SHN = 01b (normal shutdown, EN stays 1) and waits
// for CSTS.SHST = 10b for max(RTD3E, 5 s) capped at 60 s (Linux
// nvme_disable_ctrl with shutdown, shutdown_timeout).
func (c *Controller) shutdownNotify(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return err
	}
	cc, err := c.PropertyGet(ctx, nvme.PropCC, 4)
	if err != nil {
		return fmt.Errorf("host: reading CC failed: %w", err)
	}
	cc = cc&^(nvme.CCSHNMask<<nvme.CCSHNShift) | 1<<nvme.CCSHNShift
	if err := c.PropertySet(ctx, nvme.PropCC, 4, cc); err != nil {
		return fmt.Errorf("host: writing CC.SHN failed: %w", err)
	}
	timeout := time.Duration(c.id.RTD3E) * time.Microsecond
	timeout = min(max(timeout, 5*time.Second), 60*time.Second)
	return c.waitCSTS(ctx, nvme.CSTSShstMask, nvme.CSTSShstDone, timeout, "shutdown")
}

// identifyAndCheck reads Identify Controller and applies the checks with
// which the Linux host rejects a controller (nvme_init_identify,
// nvme_check_ctrl_fabric_info, nvme_tcp_setup_ctrl).
func (c *Controller) identifyAndCheck(ctx context.Context) error {
	id, err := c.IdentifyController(ctx)
	if err != nil {
		return fmt.Errorf("host: Identify Controller failed: %w", err)
	}
	c.id = id
	c.discovery = c.opts.SubNQN == nvme.DiscoveryNQN || id.CNTRLTYPE == nvme.ControllerTypeDiscovery
	if id.MDTS != 0 {
		c.maxTransfer = (1 << id.MDTS) * 4096
	}
	if id.CNTLID != c.cntlid {
		return incompatiblef("Mismatching cntlid: Connect %d vs Identify %d, rejecting", c.cntlid, id.CNTLID)
	}
	if c.discovery {
		return nil
	}
	switch {
	case id.KAS == 0:
		return incompatiblef("keep-alive support is mandatory for fabrics (KAS 0)")
	case id.IOCCSZ < 4:
		return incompatiblef("I/O queue command capsule supported size %d < 4", id.IOCCSZ)
	case id.IORCSZ < 1:
		return incompatiblef("I/O queue response capsule supported size %d < 1", id.IORCSZ)
	case id.ICDOFF != 0:
		return incompatiblef("icdoff %d is not supported", id.ICDOFF)
	case id.SGLS&0x3 == 0:
		return incompatiblef("Mandatory sgls are not supported (SGLS %#x)", id.SGLS)
	}
	if id.MAXCMD == 0 {
		c.log.Warn("nvme host: Firmware bug: maximum outstanding commands is 0", "addr", c.addr)
		c.id.MAXCMD = uint16(c.opts.QueueDepth)
	}
	if id.SubNQN != c.opts.SubNQN {
		c.log.Warn("nvme host: Identify SUBNQN differs from the Connect SUBNQN",
			"identify", id.SubNQN, "connect", c.opts.SubNQN)
	}
	return nil
}
