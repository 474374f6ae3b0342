package target

import (
	"encoding/binary"

	"basalt/pkg/nvme"
)

// Fabrics commands (NVMe-oF 1.1 §3): Connect, Property Get/Set and
// Authentication Send/Receive (fabrics_cmd_auth.go). Disconnect is not
// supported and answers Invalid Opcode (the Linux host never sends it).

// parseFabricsCmd validates a Fabrics command (cf. nvmet_parse_fabrics_admin_cmd
// and nvmet_parse_fabrics_io_cmd).
func (sq *SQ) parseFabricsCmd(r *Request) nvme.Status {
	switch r.Cmd.FCType() {
	case nvme.FCTypeConnect:
		r.execute = executeConnect
		return r.expectData(DirH2C, nvme.ConnectDataSize)
	case nvme.FCTypePropertyGet, nvme.FCTypePropertySet:
		if !sq.connected.Load() {
			return r.fail(nvme.StatusCommandSequenceError, nvme.SQEOffsetNSID)
		}
		if sq.qid != 0 {
			return r.fail(nvme.StatusInvalidOpcode, nvme.SQEOffsetNSID)
		}
		c := sq.ctrl.Load()
		if c.isDead() {
			return nvme.StatusAbortSQDeletion
		}
		if !sq.authenticated() {
			return r.fail(nvme.StatusAuthRequired, nvme.SQEOffsetOpcode)
		}
		c.touch()
		r.execute = executePropertyGet
		if r.Cmd.FCType() == nvme.FCTypePropertySet {
			r.execute = executePropertySet
		}
		return r.expectData(DirNone, 0)
	case nvme.FCTypeAuthSend, nvme.FCTypeAuthRecv:
		return sq.parseAuthCmd(r)
	default:
		if !sq.connected.Load() {
			return r.fail(nvme.StatusCommandSequenceError, nvme.SQEOffsetNSID)
		}
		return r.fail(nvme.StatusInvalidOpcode, nvme.SQEOffsetNSID)
	}
}

// connectError completes a failed Connect. For Invalid Parameters the
// completion DW0 holds the offset of the offending field (IPO) and whether
// it lies in the Connect data (IATTR bit 0) (NVMe-oF 1.1 §3.3, Figure 22).
func connectError(r *Request, status nvme.Status, inData bool, offset uint16) {
	r.Cpl.DW0 = nvme.ConnectInvalidParam(inData, offset)
	if !inData {
		r.errLoc = offset
	}
	r.sq.complete(r, status)
}

// executeConnect binds the queue to a new controller (QID 0) or to an
// existing one (QID > 0) (NVMe-oF 1.1 §3.3).
func executeConnect(r *Request) {
	sq := r.sq
	cmd := r.Cmd.DecodeConnect()
	data := r.Data[:nvme.ConnectDataSize]
	if sq.connected.Load() {
		// A second Connect on a connected queue (nvmet: Controller Busy).
		sq.complete(r, nvme.StatusConnectControllerBusy)
		return
	}
	if cmd.RECFMT != 0 {
		r.errLoc = nvme.ConnectOffsetRECFMT
		sq.complete(r, nvme.StatusConnectIncompatibleFormat)
		return
	}
	if !nvme.NQNTerminated(data[nvme.ConnectDataSubNQN : nvme.ConnectDataSubNQN+nvme.NQNMaxSize]) {
		connectError(r, nvme.StatusConnectInvalidParameters, true, nvme.ConnectDataSubNQN)
		return
	}
	if !nvme.NQNTerminated(data[nvme.ConnectDataHostNQN : nvme.ConnectDataHostNQN+nvme.NQNMaxSize]) {
		connectError(r, nvme.StatusConnectInvalidParameters, true, nvme.ConnectDataHostNQN)
		return
	}
	if cmd.SQSIZE == 0 {
		connectError(r, nvme.StatusConnectInvalidParameters, false, nvme.ConnectOffsetSQSIZE)
		return
	}
	d := nvme.DecodeConnectData(data)
	if !sq.t.checkSecureChannel(r, &d) {
		return
	}
	if cmd.QID == 0 {
		sq.t.connectAdmin(r, cmd, &d)
	} else {
		sq.t.connectIO(r, cmd, &d)
	}
}

// connectAdmin creates a controller with a dynamic CNTLID (the Connect data's
// CNTLID must be FFFFh; unknown SUBNQN → Invalid Parameters on SUBNQN; host
// not allowed → Invalid Host).
func (t *Target) connectAdmin(r *Request, cmd nvme.ConnectCmd, d *nvme.ConnectData) {
	sq := r.sq
	if d.CNTLID != nvme.CNTLIDDynamic {
		connectError(r, nvme.StatusConnectInvalidParameters, true, nvme.ConnectDataCNTLID)
		return
	}
	creds, authConfigured := t.dhchapCredentials(d.SubNQN, d.HostNQN)
	if int(cmd.SQSIZE) > max(int(t.cfg.MQES), AdminQueueDepth-1) {
		connectError(r, nvme.StatusConnectInvalidParameters, false, nvme.ConnectOffsetSQSIZE)
		return
	}
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		sq.complete(r, nvme.StatusConnectControllerBusy)
		return
	}
	s := t.subsystemLocked(d.SubNQN)
	if s == nil {
		t.mu.Unlock()
		t.log.Info("connect to unknown subsystem", "subnqn", d.SubNQN, "hostnqn", d.HostNQN)
		connectError(r, nvme.StatusConnectInvalidParameters, true, nvme.ConnectDataSubNQN)
		return
	}
	if !s.hostAllowedLocked(d.HostNQN) {
		t.mu.Unlock()
		t.log.Info("connect from host not allowed", "subnqn", d.SubNQN, "hostnqn", d.HostNQN)
		connectError(r, nvme.StatusConnectInvalidHost, true, nvme.ConnectDataHostNQN)
		return
	}
	if authConfigured && len(creds) == 0 {
		// nvmet_setup_auth failing: the host's secret cannot be used.
		t.mu.Unlock()
		t.log.Warn("connect from a host whose DH-HMAC-CHAP secrets are unusable", "subnqn", d.SubNQN, "hostnqn", d.HostNQN)
		connectError(r, nvme.StatusConnectInvalidHost, true, nvme.ConnectDataHostNQN)
		return
	}
	id, ok := t.allocCNTLIDLocked(s)
	if !ok {
		t.mu.Unlock()
		t.log.Warn("controller IDs exhausted", "subnqn", d.SubNQN, "min", t.cfg.CNTLIDMin, "max", t.cfg.CNTLIDMax)
		sq.complete(r, nvme.StatusConnectControllerBusy)
		return
	}
	c := newController(t, s, sq.port, id, d, cmd.KATO)
	if len(creds) > 0 {
		c.auth = &ctrlAuth{creds: creds}
	}
	c.mu.queues[0] = sq
	t.mu.ctrls[ctrlKey{s, id}] = c
	t.ctrlWG.Add(1)
	t.mu.Unlock()

	sq.installAuth(c)
	sq.install(c, 0, cmd)
	go c.keepAliveLoop()
	if sq.released.Load() {
		// The connection went away while Connect ran.
		c.destroy(ErrAdminQueueGone)
	}
	t.log.Info("controller created", "cntlid", id, "subnqn", d.SubNQN, "hostnqn", d.HostNQN,
		"port", sq.port.cfg.ID, "kato_ms", c.katoMS.Load(), "discovery", c.discovery, "dhchap", c.auth != nil)
	r.Cpl.DW0 = c.connectResult()
	sq.complete(r, nvme.StatusSuccess)
}

// connectIO attaches an I/O queue to the controller named by the Connect data
// (controller found by SUBNQN, HOSTNQN and CNTLID; SQSIZE ≤ MQES; QID within
// the granted queues; controller enabled).
func (t *Target) connectIO(r *Request, cmd nvme.ConnectCmd, d *nvme.ConnectData) {
	sq := r.sq
	t.mu.Lock()
	s := t.subsystemLocked(d.SubNQN)
	var c *Controller
	if s != nil {
		c = t.mu.ctrls[ctrlKey{s, d.CNTLID}]
	}
	allowed := s != nil && s.hostAllowedLocked(d.HostNQN)
	t.mu.Unlock()
	switch {
	case s == nil:
		connectError(r, nvme.StatusConnectInvalidParameters, true, nvme.ConnectDataSubNQN)
		return
	case !allowed:
		connectError(r, nvme.StatusConnectInvalidHost, true, nvme.ConnectDataHostNQN)
		return
	case c == nil || c.subsys != s || c.hostNQN != d.HostNQN || c.isDead():
		connectError(r, nvme.StatusConnectInvalidParameters, true, nvme.ConnectDataCNTLID)
		return
	case c.discovery:
		connectError(r, nvme.StatusConnectInvalidParameters, false, nvme.ConnectOffsetQID)
		return
	case cmd.SQSIZE > t.cfg.MQES:
		connectError(r, nvme.StatusConnectInvalidParameters, false, nvme.ConnectOffsetSQSIZE)
		return
	case !c.ready():
		// SPDK: I/O queue Connect before CC.EN=1 is a sequence error.
		r.errLoc = nvme.ConnectOffsetQID
		sq.complete(r, nvme.StatusCommandSequenceError)
		return
	}
	c.mu.Lock()
	granted := c.mu.ioQueues
	c.mu.Unlock()
	if int(cmd.QID) > granted {
		connectError(r, nvme.StatusConnectInvalidParameters, false, nvme.ConnectOffsetQID)
		return
	}
	switch ok, gone := c.installQueue(cmd.QID, sq); {
	case gone: // as if the Connect had come a moment later
		connectError(r, nvme.StatusConnectInvalidParameters, true, nvme.ConnectDataCNTLID)
		return
	case !ok:
		// The QID is connected already: a sequence error (nvmet_install_queue),
		// not Controller Busy, which is for a Connect on a connected queue.
		r.errLoc = nvme.ConnectOffsetQID
		sq.complete(r, nvme.StatusCommandSequenceError)
		return
	}
	sq.installAuth(c)
	sq.install(c, cmd.QID, cmd)
	if sq.released.Load() {
		c.detachQueue(sq)
	}
	r.Cpl.DW0 = c.connectResult()
	sq.complete(r, nvme.StatusSuccess)
}

// install binds the queue to c; from here on the queue accepts commands.
func (sq *SQ) install(c *Controller, qid uint16, cmd nvme.ConnectCmd) {
	sq.ctrl.Store(c)
	sq.qid = qid
	sq.size = uint32(cmd.SQSIZE) + 1
	sq.noSQHD = cmd.CATTR&nvme.CATTRDisableSQFlow != 0
	if qid > 0 {
		sq.work = make(chan *Request, sq.size)
	}
	sq.connected.Store(true)
}

// subsystemLocked finds a subsystem by NQN, the discovery one included.
func (t *Target) subsystemLocked(nqn string) *Subsystem {
	if nqn == nvme.DiscoveryNQN {
		return t.discovery
	}
	return t.mu.subsystems[nqn]
}

// capProperty returns the CAP property (NVMe Base 2.0 §3.1.4.1): MQES, CQR 1,
// TO 15 (7.5 s), CSS NVM only, MPSMIN = MPSMAX = 0 (4 KiB).
func (c *Controller) capProperty() uint64 {
	// Discovery controllers report the same MQES as I/O controllers, as
	// nvmet does: the Linux host warns when its queue_size exceeds MQES+1,
	// even on a discovery controller that has no I/O queues.
	mqes := uint64(c.t.cfg.MQES)
	return mqes | nvme.CAPCQR | 15<<nvme.CAPTOShift | nvme.CAPCSSNVM
}

// executePropertyGet reads CAP (4 or 8 bytes), VS, CC or CSTS (NVMe-oF 1.1
// §3.4). Other offsets and sizes are Invalid Field.
func executePropertyGet(r *Request) {
	c := r.sq.ctrl.Load()
	attrib := r.Cmd[nvme.PropOffsetATTRIB] & 0x7
	ofst := binary.LittleEndian.Uint32(r.Cmd[nvme.PropOffsetOFST:])
	var v uint64
	ok := true
	switch {
	case attrib == nvme.PropSize8 && ofst == nvme.PropCAP:
		v = c.capProperty()
	case attrib != nvme.PropSize4:
		ok = false
	case ofst == nvme.PropCAP:
		v = c.capProperty() & 0xFFFFFFFF
	case ofst == nvme.PropCAP+4:
		v = c.capProperty() >> 32
	case ofst == nvme.PropVS:
		v = nvme.VS13
	case ofst == nvme.PropCC:
		v = uint64(c.cc.Load())
	case ofst == nvme.PropCSTS:
		v = uint64(c.csts.Load())
	default:
		ok = false
	}
	if !ok {
		r.sq.complete(r, r.fail(nvme.StatusInvalidField, nvme.PropOffsetOFST))
		return
	}
	r.Cpl.DW0, r.Cpl.DW1 = uint32(v), uint32(v>>32)
	r.sq.complete(r, nvme.StatusSuccess)
}

// executePropertySet writes CC, the only writable property (NVMe-oF 1.1
// §3.5; nvmet allows nothing else).
func executePropertySet(r *Request) {
	c := r.sq.ctrl.Load()
	attrib := r.Cmd[nvme.PropOffsetATTRIB] & 0x7
	ofst := binary.LittleEndian.Uint32(r.Cmd[nvme.PropOffsetOFST:])
	if attrib != nvme.PropSize4 || ofst != nvme.PropCC {
		r.sq.complete(r, r.fail(nvme.StatusInvalidField, nvme.PropOffsetOFST))
		return
	}
	c.setCC(binary.LittleEndian.Uint32(r.Cmd[nvme.PropOffsetVALUE:]))
	r.sq.complete(r, nvme.StatusSuccess)
}
