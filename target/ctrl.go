package target

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/nvme"
)

const (
	// errorLogSlots is the Error Information log ring size (ELPE + 1).
	errorLogSlots = 64
	// aerLimit is the number of AERs a controller keeps outstanding (AERL + 1).
	aerLimit = 4
	// keepAliveGranularity is KAS: 10 × 100 ms.
	keepAliveGranularity = 10
	// noErrLoc marks a failure without a Parameter Error Location.
	noErrLoc = 0xFFFF
)

// Controller is one association between a host and a subsystem (≈ struct
// nvmet_ctrl): created by an admin queue Connect, it owns the admin queue
// and the I/O queues connected to it, the controller properties (CC, CSTS),
// keep-alive, asynchronous events, the error log and the features. It is
// destroyed when its admin queue goes, on keep-alive expiry, or when its
// subsystem or host access is removed; destruction closes every queue.
type Controller struct {
	t         *Target
	subsys    *Subsystem
	port      *Port
	cntlid    uint16
	hostNQN   string
	hostID    [16]byte
	discovery bool
	clock     clock.Clock

	// cc and csts are written under mu and read lock-free by the I/O path.
	cc   atomic.Uint32
	csts atomic.Uint32
	// katoMS is the keep-alive timeout in ms (0: none); lastKA is the clock
	// time (UnixNano) of the last Keep Alive or other admin command.
	katoMS atomic.Uint32
	lastKA atomic.Int64
	// kick wakes the keep-alive goroutine after KATO changes.
	kick chan struct{}
	// done is closed when the controller is destroyed.
	done chan struct{}
	// wce is the Volatile Write Cache feature: when off, every write is FUA.
	wce atomic.Bool
	// auth holds the host's DH-HMAC-CHAP secrets when it must
	// authenticate (nil: it need not); set before the controller is
	// published.
	auth *ctrlAuth

	mu struct {
		sync.Mutex
		dead bool
		// queues is indexed by QID; [0] is the admin queue.
		queues []*SQ
		// ioQueues is the number of I/O queues granted (Number of Queues).
		ioQueues int
		// aec is the enabled event mask (Set Features 0Bh); masked holds the
		// event kinds reported and not yet cleared by a log read (RAE=0).
		aec, masked uint32
		events      []uint32   // pending AEN DW0 values, one per kind at most
		aers        []*Request // outstanding AERs, at most aerLimit
		errLog      [errorLogSlots]nvme.ErrorLogEntry
		errCount    uint64
		changedNS   []uint32 // Changed Namespace List (LID 04h)
		changedOvf  bool
		feat        featureState
	}
}

// featureState holds the values of the settable features that do not
// change the controller's behaviour (accepted and reported back).
type featureState struct {
	arbitration, powerMgmt, errRecovery, intCoalescing, writeAtomicity uint32
	tempOver, tempUnder                                                uint16
	hostBehavior                                                       [nvme.FeatHostBehaviorSize]byte
}

func newController(t *Target, s *Subsystem, port *Port, cntlid uint16, d *nvme.ConnectData, kato uint32) *Controller {
	c := &Controller{
		t: t, subsys: s, port: port, cntlid: cntlid, hostNQN: d.HostNQN, hostID: d.HostID,
		discovery: s.discovery, clock: t.clock, kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if c.discovery && kato == 0 {
		kato = uint32(t.cfg.DiscoveryKATO / time.Millisecond)
	}
	c.katoMS.Store(kato)
	c.touch()
	c.wce.Store(true)
	c.mu.queues = make([]*SQ, 1, 1+t.cfg.MaxIOQueues)
	c.mu.ioQueues = t.cfg.MaxIOQueues
	c.mu.aec = c.oaes()         // all supported events enabled until the host says otherwise
	c.mu.feat.tempOver = 0x0157 // 343 K, the usual default over-temperature threshold
	return c
}

// oaes returns the Optional Asynchronous Events Supported (Identify OAES).
func (c *Controller) oaes() uint32 {
	if c.discovery {
		return nvme.AECDiscoveryChange
	}
	return nvme.AECNSAttrChanged | nvme.AECANAChange
}

// CNTLID returns the controller ID.
func (c *Controller) CNTLID() uint16 { return c.cntlid }

func (c *Controller) info() ControllerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, sq := range c.mu.queues[1:] {
		if sq != nil {
			n++
		}
	}
	return ControllerInfo{
		CNTLID: c.cntlid, SubNQN: c.subsys.nqn, HostNQN: c.hostNQN, HostID: c.hostID,
		PortID: c.port.cfg.ID, Discovery: c.discovery, Enabled: c.csts.Load()&nvme.CSTSReady != 0,
		IOQueues: n, KATO: time.Duration(c.katoMS.Load()) * time.Millisecond,
	}
}

// queueList returns the connected queues.
func (c *Controller) queueList() []*SQ {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*SQ
	for _, sq := range c.mu.queues {
		if sq != nil {
			out = append(out, sq)
		}
	}
	return out
}

func (c *Controller) isDead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// ready reports CC.EN = 1 and CSTS.RDY = 1: the controller processes
// commands other than Fabrics ones.
func (c *Controller) ready() bool {
	return c.cc.Load()&nvme.CCEnable != 0 && c.csts.Load()&nvme.CSTSReady != 0
}

// destroy ends the association once: it unregisters the controller (its
// CNTLID becomes free), stops keep-alive, aborts outstanding AERs, cancels
// in-flight backend calls and closes every queue's connection.
func (c *Controller) destroy(reason error) {
	c.mu.Lock()
	if c.mu.dead {
		c.mu.Unlock()
		return
	}
	c.mu.dead = true
	queues := slices.Clone(c.mu.queues)
	aers := c.mu.aers
	c.mu.aers = nil
	c.mu.Unlock()

	c.t.mu.Lock()
	if k := (ctrlKey{c.subsys, c.cntlid}); c.t.mu.ctrls[k] == c {
		delete(c.t.mu.ctrls, k)
	}
	c.t.mu.Unlock()
	close(c.done)
	c.t.log.Info("controller destroyed", "cntlid", c.cntlid, "subnqn", c.subsys.nqn, "hostnqn", c.hostNQN, "reason", reason)
	for _, r := range aers {
		r.sq.complete(r, nvme.StatusAbortSQDeletion)
	}
	for _, sq := range queues {
		if sq != nil {
			sq.cancel()
			sq.ops.Close(reason)
		}
	}
}

// installQueue records sq as queue qid. When it cannot, it reports
// whether the controller is gone (otherwise qid is taken).
func (c *Controller) installQueue(qid uint16, sq *SQ) (ok, gone bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.dead {
		return false, true
	}
	for int(qid) >= len(c.mu.queues) {
		c.mu.queues = append(c.mu.queues, nil)
	}
	if c.mu.queues[qid] != nil {
		return false, false
	}
	c.mu.queues[qid] = sq
	return true, false
}

// detachQueue forgets an I/O queue whose connection is gone.
func (c *Controller) detachQueue(sq *SQ) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int(sq.qid) < len(c.mu.queues) && c.mu.queues[sq.qid] == sq {
		c.mu.queues[sq.qid] = nil
	}
}

// touch records keep-alive traffic.
func (c *Controller) touch() { c.lastKA.Store(c.clock.Now().UnixNano()) }

// setKATO changes the keep-alive timeout (Set Features 0Fh).
func (c *Controller) setKATO(ms uint32) {
	c.katoMS.Store(ms)
	c.touch()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// keepAliveLoop enforces KATO (NVMe Base 2.0 §3.9): when no Keep Alive (or
// other admin command) arrived within KATO plus the grace, the controller
// fails (CSTS.CFS) and the association is torn down. It is the only goroutine
// of a controller and exits when the controller dies.
func (c *Controller) keepAliveLoop() {
	defer c.t.ctrlWG.Done()
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var fire <-chan time.Time
		if kato := time.Duration(c.katoMS.Load()) * time.Millisecond; kato > 0 {
			last := time.Unix(0, c.lastKA.Load())
			wait := kato + c.t.cfg.KeepAliveGrace - c.clock.Now().Sub(last)
			if wait <= 0 {
				c.expire()
				return
			}
			if timer == nil {
				timer = c.clock.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fire = timer.C()
		}
		select {
		case <-fire:
		case <-c.kick:
		case <-c.done:
			return
		}
	}
}

func (c *Controller) expire() {
	c.t.log.Warn("keep alive timeout", "cntlid", c.cntlid, "hostnqn", c.hostNQN, "kato_ms", c.katoMS.Load())
	c.mu.Lock()
	c.csts.Store(c.csts.Load() | nvme.CSTSFatal)
	c.mu.Unlock()
	c.destroy(ErrKeepAliveExpired)
}

// setCC applies a Property Set of CC (NVMe Base 2.0 §3.1.4.5, as
// nvmet_update_cc): EN 0→1 sets RDY when the queue entry sizes and page size
// are the NVM ones, else CFS; EN 1→0 clears RDY and deletes the I/O queues;
// SHN 00→01/10 flushes the namespaces and reports SHST 10b.
func (c *Controller) setCC(v uint32) {
	var reset []*SQ
	shutdown := false
	c.mu.Lock()
	old := c.cc.Load()
	c.cc.Store(v)
	csts := c.csts.Load()
	switch en, wasEn := v&nvme.CCEnable != 0, old&nvme.CCEnable != 0; {
	case en && !wasEn:
		if c.validCC(v) {
			csts |= nvme.CSTSReady
		} else {
			csts |= nvme.CSTSFatal
		}
	case !en && wasEn:
		csts &^= nvme.CSTSReady | nvme.CSTSFatal
		for qid := 1; qid < len(c.mu.queues); qid++ {
			if sq := c.mu.queues[qid]; sq != nil {
				reset = append(reset, sq)
				c.mu.queues[qid] = nil
			}
		}
	}
	shn, oldShn := (v>>nvme.CCSHNShift)&nvme.CCSHNMask, (old>>nvme.CCSHNShift)&nvme.CCSHNMask
	if shn != 0 && oldShn == 0 {
		csts = csts&^nvme.CSTSShstMask | nvme.CSTSShstActive
		shutdown = true
	} else if shn == 0 && oldShn != 0 {
		csts &^= nvme.CSTSShstMask
	}
	c.csts.Store(csts)
	c.mu.Unlock()
	for _, sq := range reset {
		sq.cancel()
		sq.ops.Close(ErrControllerReset)
	}
	if shutdown {
		c.t.mu.Lock()
		start := !c.t.mu.closed
		if start {
			c.t.ctrlWG.Add(1)
		}
		c.t.mu.Unlock()
		if start {
			go c.shutdown()
		}
	}
}

// validCC checks the CC fields the host must set before EN: CSS NVM,
// MPS 4 KiB, AMS round robin, IOSQES 6, IOCQES 4 (a discovery controller
// has no I/O queues and also accepts zero entry sizes).
func (c *Controller) validCC(v uint32) bool {
	css := (v >> nvme.CCCSSShift) & nvme.CCCSSMask
	mps := (v >> nvme.CCMPSShift) & nvme.CCMPSMask
	ams := (v >> nvme.CCAMSShift) & nvme.CCAMSMask
	sqes := (v >> nvme.CCIOSQESShift) & nvme.CCIOSQESMask
	cqes := (v >> nvme.CCIOCQESShift) & nvme.CCIOCQESMask
	if css != 0 || mps != 0 || ams != 0 {
		return false
	}
	if c.discovery && sqes == 0 && cqes == 0 {
		return true
	}
	return sqes == nvme.CCIOSQESNVM && cqes == nvme.CCIOCQESNVM
}

// shutdown flushes every namespace (the host shuts down expecting the
// volatile write cache to be written back) and reports SHST complete.
func (c *Controller) shutdown() {
	defer c.t.ctrlWG.Done()
	for _, ns := range c.subsys.table().list {
		if !ns.acquire() {
			continue
		}
		err := ns.be.Flush(c.t.ctx)
		switch {
		case err == nil:
		case errors.Is(err, backend.ErrInaccessible) || errors.Is(err, backend.ErrTransition):
			// A path that reports the namespace inaccessible holds no
			// writes of this host to flush: the optimized path has them.
			c.t.log.Debug("no flush at shutdown on a non-optimized path", "cntlid", c.cntlid, "nsid", ns.nsid, "err", err)
		default:
			c.t.log.Error("flush at shutdown failed", "cntlid", c.cntlid, "nsid", ns.nsid, "err", err)
		}
		ns.release()
	}
	c.mu.Lock()
	if csts := c.csts.Load(); csts&nvme.CSTSShstMask == nvme.CSTSShstActive {
		c.csts.Store(csts&^nvme.CSTSShstMask | nvme.CSTSShstDone)
	}
	c.mu.Unlock()
}

// postAll posts an event to each controller.
func postAll(ctrls []*Controller, dw0, aecBit uint32) {
	for _, c := range ctrls {
		c.postEvent(dw0, aecBit)
	}
}

// postEvent reports an asynchronous event (NVMe Base 2.0 §5.2): it
// completes an outstanding AER with dw0, or queues the event until the next
// AER. An event kind that is disabled (Set Features 0Bh), or reported and
// not yet cleared by reading its log with RAE=0, is dropped.
func (c *Controller) postEvent(dw0, aecBit uint32) {
	c.mu.Lock()
	if c.mu.dead || c.mu.aec&aecBit == 0 || c.mu.masked&aecBit != 0 {
		c.mu.Unlock()
		return
	}
	c.mu.masked |= aecBit
	var r *Request
	if len(c.mu.aers) > 0 {
		r = c.mu.aers[0]
		c.mu.aers = slices.Delete(c.mu.aers, 0, 1)
	} else {
		c.mu.events = append(c.mu.events, dw0)
	}
	c.mu.Unlock()
	if r != nil {
		r.Cpl.DW0 = dw0
		r.sq.complete(r, nvme.StatusSuccess)
	}
}

// clearEvent unmasks an event kind after its log page was read with RAE=0.
func (c *Controller) clearEvent(aecBit uint32) {
	c.mu.Lock()
	c.mu.masked &^= aecBit
	c.mu.Unlock()
}

// namespaceChanged records nsid in the Changed Namespace List and posts a
// Namespace Attribute Changed event.
func (c *Controller) namespaceChanged(nsid uint32) {
	c.mu.Lock()
	if !slices.Contains(c.mu.changedNS, nsid) {
		if len(c.mu.changedNS) == nvme.ChangedNSListMax {
			c.mu.changedOvf = true
		} else {
			c.mu.changedNS = append(c.mu.changedNS, nsid)
		}
	}
	c.mu.Unlock()
	c.postEvent(nvme.AENNSAttrChanged, nvme.AECNSAttrChanged)
}

// recordError adds a failed command to the Error Information log ring (cf.
// nvmet_set_error).
func (c *Controller) recordError(r *Request, status nvme.Status) {
	e := nvme.ErrorLogEntry{
		SQID: r.sq.qid, CID: r.Cmd.CID(), Status: status, ParamErrorLoc: r.errLoc,
		NSID: r.Cmd.NSID(), TRTYPE: nvme.TransportTypeTCP,
	}
	if r.ns != nil {
		e.LBA = r.Cmd.SLBA()
	}
	c.mu.Lock()
	c.mu.errCount++
	e.ErrorCount = c.mu.errCount
	c.mu.errLog[c.mu.errCount%errorLogSlots] = e
	c.mu.Unlock()
}
