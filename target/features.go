package target

import (
	"basalt/pkg/nvme"
)

// Get/Set Features (NVMe Base 2.0 §5.15, §5.27). Features are per controller
// and not saveable. Number of Queues, Keep Alive Timer, Asynchronous Event
// Configuration and Volatile Write Cache change the controller's behaviour;
// the others are accepted and reported back.

const (
	featOffsetFID  = nvme.SQEOffsetCDW10
	featOffsetSV   = nvme.SQEOffsetCDW10 + 3
	featOffsetSEL  = nvme.SQEOffsetCDW10 + 1
	featOffsetCDW  = nvme.SQEOffsetCDW10 + 4 // CDW11
	tempDefaultOvr = 0x0157                  // 343 K
	psMask         = 0x1F
	dulbeBit       = 1 << 16
)

// featureDataLen is the data a feature carries (Set: host to controller,
// Get: controller to host).
func featureDataLen(fid uint8) uint32 {
	switch fid {
	case nvme.FeatHostBehavior:
		return nvme.FeatHostBehaviorSize
	case nvme.FeatHostIdentifier:
		return 16
	}
	return 0
}

// discoveryFeature reports whether a discovery controller supports fid
// (nvmet_parse_discovery_cmd: Keep Alive Timer and Async Event Config).
func discoveryFeature(fid uint8) bool {
	return fid == nvme.FeatKeepAliveTimer || fid == nvme.FeatAsyncEventConfig
}

func (c *Controller) parseSetFeatures(r *Request) nvme.Status {
	d10 := r.Cmd.CDW(10)
	fid := uint8(d10)
	if d10&nvme.FeatSaveBit != 0 {
		return r.fail(nvme.StatusFeatureNotSaveable, featOffsetSV)
	}
	if c.discovery && !discoveryFeature(fid) {
		return r.fail(nvme.StatusInvalidField, featOffsetFID)
	}
	r.execute = executeSetFeatures
	return r.expectData(DirH2C, featureDataLen(fid))
}

func (c *Controller) parseGetFeatures(r *Request) nvme.Status {
	d10 := r.Cmd.CDW(10)
	fid := uint8(d10)
	if c.discovery && !discoveryFeature(fid) {
		return r.fail(nvme.StatusInvalidField, featOffsetFID)
	}
	if (d10>>8)&0x7 > nvme.FeatSelCapabilities {
		return r.fail(nvme.StatusInvalidField, featOffsetSEL)
	}
	r.execute = executeGetFeatures
	if (d10>>8)&0x7 == nvme.FeatSelCapabilities {
		return r.expectData(DirNone, 0)
	}
	return r.expectData(DirC2H, featureDataLen(fid))
}

// executeSetFeatures applies one feature.
func executeSetFeatures(r *Request) {
	c := r.sq.ctrl.Load()
	fid, d11 := uint8(r.Cmd.CDW(10)), r.Cmd.CDW(11)
	st := nvme.StatusSuccess
	kato := false
	c.mu.Lock()
	f := &c.mu.feat
	switch fid {
	case nvme.FeatArbitration:
		f.arbitration = d11
	case nvme.FeatPowerManagement:
		if d11&psMask != 0 { // NPSS = 0: only power state 0 exists
			st = r.fail(nvme.StatusInvalidField, featOffsetCDW)
		} else {
			f.powerMgmt = d11 & 0xFF
		}
	case nvme.FeatTemperatureThresh:
		st = c.setTempThresholdLocked(r, d11)
	case nvme.FeatErrorRecovery:
		if d11&dulbeBit != 0 { // deallocated/unwritten logical block errors: unsupported
			st = r.fail(nvme.StatusInvalidField, featOffsetCDW+2)
		} else {
			f.errRecovery = d11 & 0xFFFF
		}
	case nvme.FeatVolatileWC:
		c.wce.Store(d11&1 != 0)
	case nvme.FeatNumberOfQueues:
		st = c.setNumQueuesLocked(r, d11)
	case nvme.FeatInterruptCoalesce:
		f.intCoalescing = d11 & 0xFFFF
	case nvme.FeatWriteAtomicity:
		f.writeAtomicity = d11 & 1
	case nvme.FeatAsyncEventConfig:
		if d11&^(nvme.AECSMARTMask|c.oaes()) != 0 {
			st = r.fail(nvme.StatusInvalidField, featOffsetCDW)
		} else {
			c.mu.aec = d11
		}
	case nvme.FeatKeepAliveTimer:
		kato = true
	case nvme.FeatHostBehavior:
		copy(f.hostBehavior[:], r.Data[:nvme.FeatHostBehaviorSize])
	case nvme.FeatHostIdentifier:
		// The host ID is set by Connect on fabrics (nvmet).
		st = r.fail(nvme.StatusCommandSequenceError, featOffsetFID)
	default:
		st = r.fail(nvme.StatusInvalidField, featOffsetFID)
	}
	c.mu.Unlock()
	if kato {
		c.setKATO(d11)
	}
	r.sq.complete(r, st)
}

// setNumQueuesLocked grants I/O queues: the smaller of the requested
// submission and completion queue counts, at most MaxIOQueues; DW0 holds
// NSQA and NCQA (0's based). FFFFh is Invalid Field; a change once I/O
// queues exist is a Command Sequence Error.
func (c *Controller) setNumQueuesLocked(r *Request, d11 uint32) nvme.Status {
	nsqr, ncqr := d11&0xFFFF, d11>>16
	if nsqr == 0xFFFF || ncqr == 0xFFFF {
		return r.fail(nvme.StatusInvalidField, featOffsetCDW)
	}
	for _, sq := range c.mu.queues[1:] {
		if sq != nil {
			return r.fail(nvme.StatusCommandSequenceError, featOffsetFID)
		}
	}
	n := min(int(min(nsqr, ncqr))+1, c.t.cfg.MaxIOQueues)
	c.mu.ioQueues = n
	r.Cpl.DW0 = uint32(n-1) | uint32(n-1)<<16
	return nvme.StatusSuccess
}

// setTempThresholdLocked accepts the composite temperature (TMPSEL 0 or
// Fh) over (THSEL 0) and under (THSEL 1) thresholds.
func (c *Controller) setTempThresholdLocked(r *Request, d11 uint32) nvme.Status {
	tmpsel, thsel := (d11>>16)&0xF, (d11>>20)&0x3
	if tmpsel != 0 && tmpsel != 0xF || thsel > 1 {
		return r.fail(nvme.StatusInvalidField, featOffsetCDW+2)
	}
	if thsel == 0 {
		c.mu.feat.tempOver = uint16(d11)
	} else {
		c.mu.feat.tempUnder = uint16(d11)
	}
	return nvme.StatusSuccess
}

// executeGetFeatures reports a feature: current (SEL 0), default or saved
// (SEL 1, 2; nothing is saveable so both are the default), or capabilities
// (SEL 3: changeable).
func executeGetFeatures(r *Request) {
	c := r.sq.ctrl.Load()
	d10, d11 := r.Cmd.CDW(10), r.Cmd.CDW(11)
	fid, sel := uint8(d10), (d10>>8)&0x7
	c.mu.Lock()
	v, st := c.featureValueLocked(r, fid, sel == nvme.FeatSelCurrent, d11)
	c.mu.Unlock()
	if st.Success() && sel == nvme.FeatSelCapabilities {
		v = nvme.FeatCapChangeable
	}
	r.Cpl.DW0 = v
	r.sq.complete(r, st)
}

// featureValueLocked returns the DW0 of Get Features fid (current or
// default value) and fills the data of features that have some.
func (c *Controller) featureValueLocked(r *Request, fid uint8, current bool, d11 uint32) (uint32, nvme.Status) {
	f := c.mu.feat
	if !current {
		f = featureState{tempOver: tempDefaultOvr}
	}
	maxQ := uint32(c.t.cfg.MaxIOQueues - 1)
	switch fid {
	case nvme.FeatArbitration:
		return f.arbitration, nvme.StatusSuccess
	case nvme.FeatPowerManagement:
		return f.powerMgmt, nvme.StatusSuccess
	case nvme.FeatTemperatureThresh:
		if tmpsel, thsel := (d11>>16)&0xF, (d11>>20)&0x3; tmpsel != 0 && tmpsel != 0xF || thsel > 1 {
			return 0, r.fail(nvme.StatusInvalidField, featOffsetCDW+2)
		} else if thsel == 1 {
			return uint32(f.tempUnder), nvme.StatusSuccess
		}
		return uint32(f.tempOver), nvme.StatusSuccess
	case nvme.FeatErrorRecovery:
		return f.errRecovery, nvme.StatusSuccess
	case nvme.FeatVolatileWC:
		if !current || c.wce.Load() {
			return 1, nvme.StatusSuccess
		}
		return 0, nvme.StatusSuccess
	case nvme.FeatNumberOfQueues:
		if current {
			n := uint32(c.mu.ioQueues - 1)
			return n | n<<16, nvme.StatusSuccess
		}
		return maxQ | maxQ<<16, nvme.StatusSuccess
	case nvme.FeatInterruptCoalesce:
		return f.intCoalescing, nvme.StatusSuccess
	case nvme.FeatWriteAtomicity:
		return f.writeAtomicity, nvme.StatusSuccess
	case nvme.FeatAsyncEventConfig:
		if current {
			return c.mu.aec, nvme.StatusSuccess
		}
		return c.oaes(), nvme.StatusSuccess
	case nvme.FeatKeepAliveTimer:
		return c.katoMS.Load(), nvme.StatusSuccess
	case nvme.FeatHostBehavior:
		if r.TransferLen > 0 {
			copy(r.Data[:nvme.FeatHostBehaviorSize], f.hostBehavior[:])
		}
		return 0, nvme.StatusSuccess
	case nvme.FeatHostIdentifier:
		if d11&1 == 0 { // EXHID: only the 128-bit host identifier exists
			return 0, r.fail(nvme.StatusInvalidField, featOffsetCDW)
		}
		if r.TransferLen > 0 {
			copy(r.Data[:16], c.hostID[:])
		}
		return 0, nvme.StatusSuccess
	}
	return 0, r.fail(nvme.StatusInvalidField, featOffsetFID)
}
