package nvme

import "encoding/binary"

// This file holds the constants and small codecs the NVMe-oF controller core
// (package target) needs beyond the PDU and identify formats: controller
// properties, feature and event bits, the error information, SMART, firmware
// slot, commands-effects and ANA log layouts, and NVM command fields.

// NSIDAll is the broadcast namespace identifier (NVMe Base 2.0 §3.2.1.2).
const NSIDAll = 0xFFFFFFFF

// IsFabrics reports whether c is a Fabrics command (opcode 7Fh). Fabrics
// commands accept up to AdminICDSize bytes of in-capsule data on any queue.
func (c *Command) IsFabrics() bool { return c.Opcode() == OpcodeFabrics }

// FUSE returns CDW0 bits 9:8 (flags bits 1:0): fused operation.
func (c *Command) FUSE() uint8 { return c[1] & 0x3 }

// PSDT returns CDW0 bits 15:14 (flags bits 7:6): PRP or SGL for data transfer.
func (c *Command) PSDT() uint8 { return c[1] >> 6 }

// More generic status codes (NVMe Base 2.0 §4.2.3.1, Figure 102).
var (
	StatusAbortSQDeletion = MakeStatus(SCTGeneric, 0x08)
	StatusHostIDInconsist = MakeStatus(SCTGeneric, 0x18).WithDNR()
	// StatusCommandAbortedByHost is host-generated only (SCT 3, SC 71h).
	StatusCommandAbortedByHost = MakeStatus(SCTPath, 0x71)
)

// Controller property values (NVMe Base 2.0 §3.1.4).
const (
	// VS13 is version 1.3.0: no CNS 08h, no CSI descriptors required.
	VS13 = 0x00010300

	// CAP fields.
	CAPCQR         = 1 << 16 // contiguous queues required
	CAPTOShift     = 24      // timeout, 500 ms units
	CAPCSSNVM      = 1 << 37 // NVM command set
	CAPMPSMINShift = 48
	CAPMPSMAXShift = 52

	// CC fields.
	CCEnable       = 1 << 0
	CCCSSShift     = 4
	CCCSSMask      = 0x7
	CCMPSShift     = 7
	CCMPSMask      = 0xF
	CCAMSShift     = 11
	CCAMSMask      = 0x7
	CCSHNShift     = 14
	CCSHNMask      = 0x3
	CCIOSQESShift  = 16
	CCIOSQESMask   = 0xF
	CCIOCQESShift  = 20
	CCIOCQESMask   = 0xF
	CCIOSQESNVM    = 6 // 64-byte SQE
	CCIOCQESNVM    = 4 // 16-byte CQE
	CSTSReady      = 1 << 0
	CSTSFatal      = 1 << 1
	CSTSShstMask   = 0x3 << 2
	CSTSShstActive = 0x1 << 2 // shutdown processing occurring
	CSTSShstDone   = 0x2 << 2 // shutdown processing complete
)

// Property Get/Set attribute sizes (ATTRIB bits 2:0).
const (
	PropSize4 = 0
	PropSize8 = 1
)

// Asynchronous Event Configuration bits (Set Features 0Bh CDW11) and the
// matching OAES bits of Identify Controller.
const (
	AECSMARTMask       = 0xFF
	AECNSAttrChanged   = 1 << 8
	AECFirmwareActive  = 1 << 9
	AECANAChange       = 1 << 11
	AECDiscoveryChange = 1 << 31
)

// More feature identifiers (NVMe Base 2.0 §5.27.1, Figure 317).
const (
	FeatInterruptVectorConfig = 0x09
	FeatAPST                  = 0x0C
	FeatTimestamp             = 0x0E
	FeatHostIdentifier        = 0x81
	// FeatHostBehaviorSize is the data size of Host Behavior Support.
	FeatHostBehaviorSize = 512
	// FeatSaveBit is Set Features CDW10 bit 31 (SV).
	FeatSaveBit = 1 << 31
	// FeatCapChangeable is the Get Features SEL=011b capability bit "changeable".
	FeatCapChangeable = 1 << 2
)

// Get Features select values (CDW10 bits 10:8).
const (
	FeatSelCurrent      = 0
	FeatSelDefault      = 1
	FeatSelSaved        = 2
	FeatSelCapabilities = 3
)

// Log page sizes.
const (
	ErrorLogEntrySize       = 64
	SMARTLogSize            = 512
	FirmwareSlotLogSize     = 512
	ChangedNSListSize       = 4096
	ChangedNSListMax        = 1024
	CommandsEffectsLogSize  = 4096
	CommandsEffectsIOOffset = 1024 // I/O command set entries start here
)

// SMART / Health Information Critical Warning bits (NVMe Base 2.0
// §5.16.1.3, byte 0).
const (
	SMARTWarnSpare        = 1 << 0 // available spare below the threshold
	SMARTWarnTemperature  = 1 << 1 // temperature at or beyond a threshold
	SMARTWarnReliability  = 1 << 2 // reliability degraded (media or internal errors)
	SMARTWarnReadOnly     = 1 << 3 // media placed in read-only mode
	SMARTWarnVolatileBack = 1 << 4 // volatile memory backup device failed
)

// Commands Supported and Effects entry bits (NVMe Base 2.0 §5.16.1.6).
const (
	EffectCSUPP = 1 << 0 // command supported
	EffectLBCC  = 1 << 1 // logical block content change
	EffectNCC   = 1 << 2 // namespace capability change
	EffectNIC   = 1 << 3 // namespace inventory change
	EffectCCC   = 1 << 4 // controller capability change
)

// ErrorLogEntry is one 64-byte Error Information log entry (NVMe Base 2.0
// §5.16.1.2, Figure 206).
//
//	 0  ERRCNT (8)   8 SQID (2)  10 CID (2)  12 status (2, bit0 phase)
//	14  PEL (2)     16 LBA (8)   24 NSID (4) 28 VSIA (1) 29 TRTYPE (1)
//	32  CSI (8)     40 TTSI (2)  42..63 reserved
type ErrorLogEntry struct {
	ErrorCount    uint64
	SQID          uint16
	CID           uint16
	Status        Status
	ParamErrorLoc uint16 // bits 7:0 byte, bits 10:8 bit in the SQE; 0xFFFF none
	LBA           uint64
	NSID          uint32
	TRTYPE        uint8
}

// Marshal writes the entry into b[:64].
func (e *ErrorLogEntry) Marshal(b []byte) {
	b = b[:ErrorLogEntrySize]
	clear(b)
	le := binary.LittleEndian
	le.PutUint64(b[0:], e.ErrorCount)
	le.PutUint16(b[8:], e.SQID)
	le.PutUint16(b[10:], e.CID)
	le.PutUint16(b[12:], e.Status.Wire())
	le.PutUint16(b[14:], e.ParamErrorLoc)
	le.PutUint64(b[16:], e.LBA)
	le.PutUint32(b[24:], e.NSID)
	b[29] = e.TRTYPE
}

// UnmarshalErrorLogEntry decodes a 64-byte entry.
func UnmarshalErrorLogEntry(b []byte) ErrorLogEntry {
	_ = b[ErrorLogEntrySize-1]
	le := binary.LittleEndian
	return ErrorLogEntry{
		ErrorCount: le.Uint64(b[0:]), SQID: le.Uint16(b[8:]), CID: le.Uint16(b[10:]),
		Status: StatusFromWire(le.Uint16(b[12:])), ParamErrorLoc: le.Uint16(b[14:]),
		LBA: le.Uint64(b[16:]), NSID: le.Uint32(b[24:]), TRTYPE: b[29],
	}
}

// SMARTLog holds the SMART / Health Information fields Basalt reports (NVMe
// Base 2.0 §5.16.1.3, Figure 207). Data units are thousands of 512-byte units.
//
//	0 critical warning (1)  1 composite temperature K (2)  3 available spare (1)
//	4 spare threshold (1)   5 percentage used (1)
//	32 data units read (16)  48 data units written (16)
//	64 host read commands (16)  80 host write commands (16)
//	128 power on hours (16)  144 unsafe shutdowns (16)
//	160 media and data integrity errors (16)  176 error log entries (16)
type SMARTLog struct {
	CriticalWarning    uint8 // SMARTWarn* bits
	CompositeTemp      uint16
	AvailableSpare     uint8
	SpareThreshold     uint8
	PercentageUsed     uint8
	DataUnitsRead      uint64
	DataUnitsWritten   uint64
	HostReadCommands   uint64
	HostWriteCommands  uint64
	PowerOnHours       uint64
	UnsafeShutdowns    uint64
	MediaErrors        uint64
	ErrorLogEntriesNum uint64
}

// Marshal writes the 512-byte log into b.
func (s *SMARTLog) Marshal(b []byte) {
	b = b[:SMARTLogSize]
	clear(b)
	le := binary.LittleEndian
	b[0] = s.CriticalWarning
	le.PutUint16(b[1:], s.CompositeTemp)
	b[3], b[4], b[5] = s.AvailableSpare, s.SpareThreshold, s.PercentageUsed
	le.PutUint64(b[32:], s.DataUnitsRead)
	le.PutUint64(b[48:], s.DataUnitsWritten)
	le.PutUint64(b[64:], s.HostReadCommands)
	le.PutUint64(b[80:], s.HostWriteCommands)
	le.PutUint64(b[128:], s.PowerOnHours)
	le.PutUint64(b[144:], s.UnsafeShutdowns)
	le.PutUint64(b[160:], s.MediaErrors)
	le.PutUint64(b[176:], s.ErrorLogEntriesNum)
}

// UnmarshalSMARTLog decodes the fields Marshal writes (low 64 bits of the
// 128-bit counters).
func UnmarshalSMARTLog(b []byte) SMARTLog {
	_ = b[SMARTLogSize-1]
	le := binary.LittleEndian
	return SMARTLog{
		CriticalWarning: b[0], CompositeTemp: le.Uint16(b[1:]), AvailableSpare: b[3], SpareThreshold: b[4],
		PercentageUsed: b[5], DataUnitsRead: le.Uint64(b[32:]), DataUnitsWritten: le.Uint64(b[48:]),
		HostReadCommands: le.Uint64(b[64:]), HostWriteCommands: le.Uint64(b[80:]),
		PowerOnHours: le.Uint64(b[128:]), UnsafeShutdowns: le.Uint64(b[144:]),
		MediaErrors: le.Uint64(b[160:]), ErrorLogEntriesNum: le.Uint64(b[176:]),
	}
}

// EncodeFirmwareSlotLog writes the Firmware Slot Information log (AFI = slot
// 1 active, FRS1 = fw) into b[:512].
func EncodeFirmwareSlotLog(b []byte, fw string) {
	b = b[:FirmwareSlotLogSize]
	clear(b)
	b[0] = 0x01
	putPadded(b[8:16], fw)
}

// SetPowerStateDescriptor0 writes power state descriptor 0 of an Identify
// Controller buffer (offset 2048): MP (centiwatts), ENLAT and EXLAT (µs).
func SetPowerStateDescriptor0(b []byte, maxPower uint16, enlat, exlat uint32) {
	le := binary.LittleEndian
	le.PutUint16(b[2048:], maxPower)
	le.PutUint32(b[2048+4:], enlat)
	le.PutUint32(b[2048+8:], exlat)
}

// ANAHeader is the ANA log page header (NVMe Base 2.0 §5.16.1.13).
type ANAHeader struct {
	CHGCNT uint64
	NGRPS  uint16
}

// Marshal writes the 16-byte header into b.
func (h *ANAHeader) Marshal(b []byte) {
	b = b[:ANALogHeaderSize]
	clear(b)
	binary.LittleEndian.PutUint64(b[0:], h.CHGCNT)
	binary.LittleEndian.PutUint16(b[8:], h.NGRPS)
}

// UnmarshalANAHeader decodes the 16-byte header.
func UnmarshalANAHeader(b []byte) ANAHeader {
	_ = b[ANALogHeaderSize-1]
	return ANAHeader{CHGCNT: binary.LittleEndian.Uint64(b[0:]), NGRPS: binary.LittleEndian.Uint16(b[8:])}
}

// ANAGroupDescriptor is the 32-byte head of an ANA group descriptor; NNSIDS
// NSIDs (4 bytes each, ascending) follow it.
type ANAGroupDescriptor struct {
	ANAGRPID uint32
	NNSIDS   uint32
	CHGCNT   uint64
	State    ANAState
}

// Marshal writes the 32-byte descriptor head into b.
func (d *ANAGroupDescriptor) Marshal(b []byte) {
	b = b[:ANAGroupHeaderSize]
	clear(b)
	binary.LittleEndian.PutUint32(b[0:], d.ANAGRPID)
	binary.LittleEndian.PutUint32(b[4:], d.NNSIDS)
	binary.LittleEndian.PutUint64(b[8:], d.CHGCNT)
	b[16] = uint8(d.State) & 0xF
}

// UnmarshalANAGroupDescriptor decodes a 32-byte descriptor head.
func UnmarshalANAGroupDescriptor(b []byte) ANAGroupDescriptor {
	_ = b[ANAGroupHeaderSize-1]
	return ANAGroupDescriptor{
		ANAGRPID: binary.LittleEndian.Uint32(b[0:]), NNSIDS: binary.LittleEndian.Uint32(b[4:]),
		CHGCNT: binary.LittleEndian.Uint64(b[8:]), State: ANAState(b[16] & 0xF),
	}
}

// NVM command fields (NVM Command Set 1.0 §3).
const (
	// RWFUA is CDW12 bit 30 of Read/Write: Force Unit Access.
	RWFUA = 1 << 30
	// WZDEAC is CDW12 bit 25 of Write Zeroes: deallocate.
	WZDEAC = 1 << 25
	// DSMAttrDeallocate is CDW11 bit 2 of Dataset Management (AD).
	DSMAttrDeallocate = 1 << 2
	// DSMRangeSize is the size of one Dataset Management range.
	DSMRangeSize = 16
	// DSMMaxRanges is the most ranges one command carries (NR is 0's based, 8 bits).
	DSMMaxRanges = 256
	// DSMPayloadSize is what the Linux host always transfers for DSM.
	DSMPayloadSize = DSMMaxRanges * DSMRangeSize
	// DLFEATReadZeroes is DLFEAT bits 2:0 = 001b (deallocated blocks read
	// as zeroes); DLFEATWriteZeroesDeac is bit 3 (DEAC supported in Write
	// Zeroes).
	DLFEATReadZeroes      = 0x1
	DLFEATWriteZeroesDeac = 0x8
)

// DSMRange is one Dataset Management range: CATTR@0 (4), NLB@4 (4, a count,
// not 0's based), SLBA@8 (8).
type DSMRange struct {
	CATTR uint32
	NLB   uint32
	SLBA  uint64
}

// DecodeDSMRange reads the i-th range of a DSM payload.
func DecodeDSMRange(b []byte, i int) DSMRange {
	r := b[i*DSMRangeSize : (i+1)*DSMRangeSize]
	return DSMRange{
		CATTR: binary.LittleEndian.Uint32(r[0:]), NLB: binary.LittleEndian.Uint32(r[4:]),
		SLBA: binary.LittleEndian.Uint64(r[8:]),
	}
}

// EncodeDSMRange writes the i-th range of a DSM payload.
func EncodeDSMRange(b []byte, i int, r DSMRange) {
	p := b[i*DSMRangeSize : (i+1)*DSMRangeSize]
	binary.LittleEndian.PutUint32(p[0:], r.CATTR)
	binary.LittleEndian.PutUint32(p[4:], r.NLB)
	binary.LittleEndian.PutUint64(p[8:], r.SLBA)
}

// Identify command fields: CDW10 CNS[7:0], CNTID[31:16]; CDW11 CSI[31:24].
const (
	IdentifyOffsetCNS = 40
	IdentifyOffsetCSI = 47
)

// Connect error location encoding (NVMe-oF 1.1 §3.3, Figure 22): completion
// DW0 bits 15:0 IPO (byte offset), bits 23:16 IATTR (bit 0: the offset is in
// the Connect data rather than the SQE).
func ConnectInvalidParam(inData bool, offset uint16) uint32 {
	v := uint32(offset)
	if inData {
		v |= 1 << 16
	}
	return v
}

// Discovery log entry constants.
const (
	// DiscoveryASQSZ is the admin queue size advertised in discovery entries.
	DiscoveryASQSZ = 32
	// SECTYPENone: no transport security (TSAS for TCP).
	SECTYPENone = 0
)
