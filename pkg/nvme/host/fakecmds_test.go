package host

import (
	"encoding/binary"
	"fmt"

	"basalt/pkg/nvme"
)

// execute answers one command whose data (if any) has arrived.
func (fc *fakeConn) execute(cmd *nvme.Command, data []byte) error {
	if cmd.Opcode() == nvme.OpcodeFabrics {
		return fc.executeFabrics(cmd, data)
	}
	if fc.ctrl == nil {
		fc.tgt.violation("qid %d: command %#x before Connect", fc.qid, cmd.Opcode())
		return fc.sendResp(cmd.CID(), nvme.StatusCommandSequenceError, 0, 0)
	}
	if fc.qid == 0 {
		return fc.executeAdmin(cmd, data)
	}
	return fc.executeIO(cmd, data)
}

func (fc *fakeConn) executeFabrics(cmd *nvme.Command, data []byte) error {
	cid := cmd.CID()
	f := fc.tgt
	switch cmd.FCType() {
	case nvme.FCTypeConnect:
		cc := cmd.DecodeConnect()
		cd := nvme.DecodeConnectData(data)
		f.record(cc.QID, fmt.Sprintf("Connect sqsize=%d kato=%d cntlid=%#x", cc.SQSIZE, cc.KATO, cd.CNTLID))
		if cd.SubNQN != f.cfg.SubNQN && cd.SubNQN != nvme.DiscoveryNQN {
			return fc.sendResp(cid, nvme.StatusConnectInvalidParameters, nvme.ConnectInvalidParam(true, nvme.ConnectDataSubNQN), 0)
		}
		f.mu.Lock()
		if cc.QID == 0 {
			fc.ctrl = &fakeCtrl{cntlid: f.nextCNTLID, kato: cc.KATO}
			f.ctrls[fc.ctrl.cntlid] = fc.ctrl
			f.nextCNTLID++
		} else {
			fc.ctrl = f.ctrls[cd.CNTLID]
		}
		f.mu.Unlock()
		if fc.ctrl == nil {
			return fc.sendResp(cid, nvme.StatusConnectInvalidParameters, nvme.ConnectInvalidParam(true, nvme.ConnectDataCNTLID), 0)
		}
		fc.qid, fc.sqsize = cc.QID, cc.SQSIZE
		return fc.sendResp(cid, nvme.StatusSuccess, uint32(fc.ctrl.cntlid), 0)
	case nvme.FCTypePropertyGet:
		off := binary.LittleEndian.Uint32(cmd[nvme.PropOffsetOFST:])
		size := 4 << cmd[nvme.PropOffsetATTRIB]
		f.record(0, fmt.Sprintf("PropGet %#x/%d", off, size))
		v := fc.property(off)
		return fc.sendResp(cid, nvme.StatusSuccess, uint32(v), uint32(v>>32))
	case nvme.FCTypePropertySet:
		off := binary.LittleEndian.Uint32(cmd[nvme.PropOffsetOFST:])
		v := binary.LittleEndian.Uint64(cmd[nvme.PropOffsetVALUE:])
		f.record(0, fmt.Sprintf("PropSet %#x=%#x", off, v))
		if off == nvme.PropCC {
			fc.setCC(uint32(v))
		}
		return fc.sendResp(cid, nvme.StatusSuccess, 0, 0)
	}
	return fc.sendResp(cid, nvme.StatusInvalidOpcode, 0, 0)
}

func (fc *fakeConn) property(off uint32) uint64 {
	switch off {
	case nvme.PropCAP:
		return uint64(fc.tgt.cfg.MQES) | nvme.CAPCQR | 15<<nvme.CAPTOShift | nvme.CAPCSSNVM
	case nvme.PropVS:
		return nvme.VS13
	case nvme.PropCC:
		return uint64(fc.ctrl.cc)
	case nvme.PropCSTS:
		return uint64(fc.ctrl.csts)
	}
	return 0
}

func (fc *fakeConn) setCC(v uint32) {
	c := fc.ctrl
	c.cc = v
	if v&nvme.CCEnable != 0 {
		c.csts |= nvme.CSTSReady
	} else {
		c.csts &^= nvme.CSTSReady
	}
	if v>>nvme.CCSHNShift&nvme.CCSHNMask != 0 {
		c.csts = c.csts&^nvme.CSTSShstMask | nvme.CSTSShstDone
	}
}

func (fc *fakeConn) executeAdmin(cmd *nvme.Command, data []byte) error {
	cid := cmd.CID()
	f := fc.tgt
	switch cmd.Opcode() {
	case nvme.AdminIdentify:
		cns := uint8(cmd.CDW(10))
		f.record(0, fmt.Sprintf("Identify cns=%d nsid=%d", cns, cmd.NSID()))
		return fc.sendData(cid, fc.identify(cns, cmd.NSID()))
	case nvme.AdminGetLogPage:
		g := cmd.DecodeGetLogPage()
		f.record(0, fmt.Sprintf("GetLog lid=%#x len=%d off=%d rae=%v", g.LID, g.Length, g.Offset, g.RAE))
		page := fc.logPage(g)
		if uint64(len(page)) < g.Offset+uint64(g.Length) {
			page = append(page, make([]byte, int(g.Offset)+int(g.Length)-len(page))...)
		}
		return fc.sendData(cid, page[g.Offset:g.Offset+uint64(g.Length)])
	case nvme.AdminSetFeatures:
		fid := uint8(cmd.CDW(10))
		f.record(0, fmt.Sprintf("SetFeatures fid=%#x cdw11=%#x", fid, cmd.CDW(11)))
		if fid == nvme.FeatNumberOfQueues {
			return fc.sendResp(cid, nvme.StatusSuccess, 3|3<<16, 0) // 4 I/O queues granted
		}
		return fc.sendResp(cid, nvme.StatusSuccess, 0, 0)
	case nvme.AdminGetFeatures:
		f.record(0, fmt.Sprintf("GetFeatures fid=%#x", uint8(cmd.CDW(10))))
		return fc.sendResp(cid, nvme.StatusSuccess, 0, 0)
	case nvme.AdminKeepAlive:
		f.record(0, "KeepAlive")
		f.mu.Lock()
		fc.ctrl.keepAlives++
		f.mu.Unlock()
		return fc.sendResp(cid, nvme.StatusSuccess, 0, 0)
	case nvme.AdminAsyncEventReq:
		f.record(0, "AER")
		f.mu.Lock()
		defer f.mu.Unlock()
		if fc.ctrl.aerSet {
			f.violations = append(f.violations, "second AER outstanding")
		}
		fc.ctrl.aer, fc.ctrl.aerCID, fc.ctrl.aerSet = fc, cid, true
		return nil
	}
	return fc.sendResp(cid, nvme.StatusInvalidOpcode, 0, 0)
}

// postEvent completes the outstanding AER with dw0; false if none is.
func (f *fakeTarget) postEvent(cntlid uint16, dw0 uint32) bool {
	f.mu.Lock()
	c := f.ctrls[cntlid]
	if c == nil || !c.aerSet {
		f.mu.Unlock()
		return false
	}
	fc, cid := c.aer, c.aerCID
	c.aerSet = false
	f.mu.Unlock()
	return fc.sendResp(cid, nvme.StatusSuccess, dw0, 0) == nil
}

func (fc *fakeConn) identify(cns uint8, nsid uint32) []byte {
	f := fc.tgt
	b := make([]byte, nvme.IdentifySize)
	switch cns {
	case nvme.CNSController:
		id := nvme.IdentifyController{
			VID: 0x1d1d, SN: "FAKE0001", MN: "basalt fake target", FR: "1.0", CNTLID: fc.ctrl.cntlid,
			VER: nvme.VS13, KAS: 10, SQES: 0x66, CQES: 0x44, MAXCMD: 128, NN: 1, ONCS: 0x0C, VWC: 1,
			SGLS: 0x100001, SubNQN: f.cfg.SubNQN, IOCCSZ: f.cfg.IOCCSZ, IORCSZ: 1, MDTS: f.cfg.MDTS,
			CNTRLTYPE: nvme.ControllerTypeIO, LPA: 1 << 2, AERL: 3,
		}
		if f.cfg.ANA {
			id.CMIC, id.OAES, id.MNAN, id.ANAGRPMAX, id.NANAGRPID, id.ANACAP = 0x0B, nvme.AECANAChange, 1, 1, 1, 0x1F
		}
		if len(f.cfg.Discovery) > 0 {
			id.CNTRLTYPE, id.SubNQN, id.OAES, id.KAS = nvme.ControllerTypeDiscovery, nvme.DiscoveryNQN, nvme.AECDiscoveryChange, 0
		}
		if f.cfg.Identify != nil {
			f.cfg.Identify(&id)
		}
		id.Marshal(b)
	case nvme.CNSNamespace:
		if nsid == 1 {
			lbads := uint8(12)
			if f.cfg.BlockSize == 512 {
				lbads = 9
			}
			ns := nvme.IdentifyNamespace{NSZE: f.cfg.Blocks, NCAP: f.cfg.Blocks, NUSE: f.cfg.Blocks, NMIC: 1,
				LBADS: lbads, ANAGRPID: 1, DLFEAT: nvme.DLFEATReadZeroes | nvme.DLFEATWriteZeroesDeac}
			ns.Marshal(b)
		}
	case nvme.CNSActiveNSList:
		if nsid < 1 {
			binary.LittleEndian.PutUint32(b, 1)
		}
	case nvme.CNSNSDescriptorList:
		off := nvme.AppendNSDescriptor(b, 0, nvme.NIDTNGUID, []byte("0123456789abcdef"))
		nvme.AppendNSDescriptor(b, off, nvme.NIDTCSI, []byte{0})
	}
	return b
}

func (fc *fakeConn) logPage(g nvme.GetLogPageCmd) []byte {
	f := fc.tgt
	switch g.LID {
	case nvme.LogANA:
		b := make([]byte, nvme.ANALogHeaderSize+nvme.ANAGroupHeaderSize+4)
		(&nvme.ANAHeader{CHGCNT: 1, NGRPS: 1}).Marshal(b)
		f.mu.Lock()
		st := f.cfg.ANAState
		f.mu.Unlock()
		(&nvme.ANAGroupDescriptor{ANAGRPID: 1, NNSIDS: 1, CHGCNT: 1, State: st}).Marshal(b[16:])
		binary.LittleEndian.PutUint32(b[48:], 1)
		return b
	case nvme.LogDiscovery:
		return fc.discoveryLog(g)
	}
	return make([]byte, g.Length)
}

// discoveryLog builds the whole log; GENCTR changes on the first
// GenctrBumps header re-reads (a full header read after a full log read).
func (fc *fakeConn) discoveryLog(g nvme.GetLogPageCmd) []byte {
	f := fc.tgt
	f.mu.Lock()
	c := fc.ctrl
	if g.Offset == 0 && g.Length == nvme.DiscoveryLogHeaderSize && c.bumps < f.cfg.GenctrBumps {
		c.bumps++
		c.genctr++
	}
	genctr := c.genctr
	f.mu.Unlock()
	entries := f.cfg.Discovery
	b := make([]byte, nvme.DiscoveryLogHeaderSize+len(entries)*nvme.DiscoveryLogEntrySize)
	nvme.EncodeDiscoveryLogHeader(b, genctr, uint64(len(entries)))
	for i := range entries {
		entries[i].Marshal(b[nvme.DiscoveryLogHeaderSize+i*nvme.DiscoveryLogEntrySize:])
	}
	return b
}

// executeIO serves NVM commands for namespace 1 from the block map.
func (fc *fakeConn) executeIO(cmd *nvme.Command, data []byte) error {
	f := fc.tgt
	cid, bs := cmd.CID(), uint64(f.cfg.BlockSize)
	slba, nlb := cmd.SLBA(), uint64(cmd.NLB())+1
	if cmd.NSID() != 1 && cmd.Opcode() != nvme.IOFlush {
		return fc.sendResp(cid, nvme.StatusInvalidNamespace, 0, 0)
	}
	switch cmd.Opcode() {
	case nvme.IOFlush:
		return fc.sendResp(cid, nvme.StatusSuccess, 0, 0)
	case nvme.IORead:
		if int(cmd.SGLLength()) != int(nlb*bs) {
			return fc.sendResp(cid, nvme.StatusDataSGLLengthInvalid, 0, 0)
		}
		return fc.sendData(cid, f.readBlocks(slba, nlb))
	case nvme.IOWrite:
		if len(data) != int(nlb*bs) {
			return fc.sendResp(cid, nvme.StatusDataSGLLengthInvalid, 0, 0)
		}
		f.writeBlocks(slba, data)
		return fc.sendResp(cid, nvme.StatusSuccess, 0, 0)
	case nvme.IOWriteZeroes:
		f.writeBlocks(slba, make([]byte, nlb*bs))
		return fc.sendResp(cid, nvme.StatusSuccess, 0, 0)
	case nvme.IODatasetMgmt:
		if len(data) != nvme.DSMPayloadSize {
			fc.tgt.violation("DSM payload of %d bytes, Linux always sends 4096", len(data))
		}
		for i := 0; i <= int(cmd.CDW(10)&0xFF); i++ {
			r := nvme.DecodeDSMRange(data, i)
			f.writeBlocks(r.SLBA, make([]byte, uint64(r.NLB)*bs))
		}
		return fc.sendResp(cid, nvme.StatusSuccess, 0, 0)
	}
	return fc.sendResp(cid, nvme.StatusInvalidOpcode, 0, 0)
}

func (f *fakeTarget) readBlocks(slba, nlb uint64) []byte {
	bs := f.cfg.BlockSize
	out := make([]byte, int(nlb)*bs)
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := uint64(0); i < nlb; i++ {
		if b, ok := f.blocks[slba+i]; ok {
			copy(out[int(i)*bs:], b)
		}
	}
	return out
}

func (f *fakeTarget) writeBlocks(slba uint64, data []byte) {
	bs := f.cfg.BlockSize
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 0; i*bs < len(data); i++ {
		f.blocks[slba+uint64(i)] = append([]byte(nil), data[i*bs:(i+1)*bs]...)
	}
}
