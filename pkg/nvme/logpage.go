package nvme

import "encoding/binary"

// Log page identifiers (NVMe Base 2.0 §5.16, Figure 202).
const (
	LogError           = 0x01
	LogSMART           = 0x02
	LogFirmwareSlot    = 0x03
	LogChangedNSList   = 0x04
	LogCommandsEffects = 0x05
	LogANA             = 0x0C
	LogDiscovery       = 0x70
)

// Get Log Page CDW10 fields: LID[7:0], LSP[14:8], RAE bit15, NUMDL[31:16];
// CDW11 NUMDU[15:0]; CDW12/13 offset (LPOL/LPOU).
type GetLogPageCmd struct {
	LID    uint8
	LSP    uint8
	RAE    bool
	Length uint32 // bytes, from NUMD (0's based dwords)
	Offset uint64
}

// DecodeGetLogPage reads the Get Log Page fields of an SQE.
func (c *Command) DecodeGetLogPage() GetLogPageCmd {
	d10, d11 := c.CDW(10), c.CDW(11)
	numd := uint32(d10>>16) | uint32(d11&0xFFFF)<<16
	return GetLogPageCmd{
		LID: uint8(d10), LSP: uint8(d10>>8) & 0x7F, RAE: d10&(1<<15) != 0,
		Length: (numd + 1) * 4,
		Offset: uint64(c.CDW(12)) | uint64(c.CDW(13))<<32,
	}
}

// EncodeGetLogPage sets the Get Log Page fields (length in bytes, multiple of 4).
func (c *Command) EncodeGetLogPage(g GetLogPageCmd) {
	c.SetOpcode(AdminGetLogPage)
	numd := g.Length/4 - 1
	d10 := uint32(g.LID) | uint32(g.LSP&0x7F)<<8 | (numd&0xFFFF)<<16
	if g.RAE {
		d10 |= 1 << 15
	}
	c.SetCDW(10, d10)
	c.SetCDW(11, numd>>16)
	c.SetCDW(12, uint32(g.Offset))
	c.SetCDW(13, uint32(g.Offset>>32))
}

// Discovery log page (NVMe-oF 1.1 §5.3, Figures 38–39): a 1024-byte header
// followed by 1024-byte entries.
const (
	DiscoveryLogHeaderSize  = 1024
	DiscoveryLogEntrySize   = 1024
	TransportTypeTCP        = 3
	AddressFamilyIPv4       = 1
	AddressFamilyIPv6       = 2
	SubtypeReferral         = 1
	SubtypeNVM              = 2
	SubtypeCurrentDiscovery = 3
	// TREQ 0: secure channel "not specified" (TREQ 2 breaks Debian 12's libnvme).
	TREQNotSpecified = 0x00
)

// DiscoveryLogEntry is one entry of the discovery log page.
type DiscoveryLogEntry struct {
	TRTYPE  uint8  // 0
	ADRFAM  uint8  // 1
	SUBTYPE uint8  // 2
	TREQ    uint8  // 3
	PORTID  uint16 // 4
	CNTLID  uint16 // 6
	ASQSZ   uint16 // 8
	EFLAGS  uint16 // 10
	TRSVCID string // 32, 32 bytes ASCII
	SUBNQN  string // 256, 256 bytes
	TRADDR  string // 512, 256 bytes ASCII
	SECTYPE uint8  // 768 (TSAS for TCP)
}

// Marshal writes the entry into b[:1024].
func (e *DiscoveryLogEntry) Marshal(b []byte) {
	b = b[:DiscoveryLogEntrySize]
	clear(b)
	b[0], b[1], b[2], b[3] = e.TRTYPE, e.ADRFAM, e.SUBTYPE, e.TREQ
	binary.LittleEndian.PutUint16(b[4:], e.PORTID)
	binary.LittleEndian.PutUint16(b[6:], e.CNTLID)
	binary.LittleEndian.PutUint16(b[8:], e.ASQSZ)
	binary.LittleEndian.PutUint16(b[10:], e.EFLAGS)
	copy(b[32:63], e.TRSVCID)
	copy(b[256:511], e.SUBNQN)
	copy(b[512:767], e.TRADDR)
	b[768] = e.SECTYPE
}

// UnmarshalDiscoveryLogEntry decodes one 1024-byte entry.
func UnmarshalDiscoveryLogEntry(b []byte) DiscoveryLogEntry {
	_ = b[DiscoveryLogEntrySize-1]
	return DiscoveryLogEntry{
		TRTYPE: b[0], ADRFAM: b[1], SUBTYPE: b[2], TREQ: b[3],
		PORTID: binary.LittleEndian.Uint16(b[4:]), CNTLID: binary.LittleEndian.Uint16(b[6:]),
		ASQSZ: binary.LittleEndian.Uint16(b[8:]), EFLAGS: binary.LittleEndian.Uint16(b[10:]),
		TRSVCID: trimPadded(b[32:64]), SUBNQN: cString(b[256:512]),
		TRADDR: trimPadded(b[512:768]), SECTYPE: b[768],
	}
}

// EncodeDiscoveryLogHeader writes GENCTR, NUMREC and RECFMT 0 into b[:1024].
func EncodeDiscoveryLogHeader(b []byte, genctr, numrec uint64) {
	b = b[:DiscoveryLogHeaderSize]
	clear(b)
	binary.LittleEndian.PutUint64(b[0:], genctr)
	binary.LittleEndian.PutUint64(b[8:], numrec)
}

// DecodeDiscoveryLogHeader reads GENCTR and NUMREC.
func DecodeDiscoveryLogHeader(b []byte) (genctr, numrec uint64) {
	return binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
}

// ANA states (NVMe Base 2.0 §8.1.3).
type ANAState uint8

// ANA states.
const (
	ANAOptimized      ANAState = 0x1
	ANANonOptimized   ANAState = 0x2
	ANAInaccessible   ANAState = 0x3
	ANAPersistentLoss ANAState = 0x4
	ANAChange         ANAState = 0xF
)

func (s ANAState) String() string {
	switch s {
	case ANAOptimized:
		return "optimized"
	case ANANonOptimized:
		return "non-optimized"
	case ANAInaccessible:
		return "inaccessible"
	case ANAPersistentLoss:
		return "persistent-loss"
	case ANAChange:
		return "change"
	}
	return "invalid"
}

// ANA log page layout (NVMe Base 2.0 §5.16.1.13): header CHGCNT@0 (8),
// NGRPS@8 (2), reserved to 16; then per group ANAGRPID@0 (4), NNSIDS@4 (4),
// CHGCNT@8 (8), state@16 (1), reserved to 32, NSIDs (4 each, ascending).
const (
	ANALogHeaderSize       = 16
	ANAGroupHeaderSize     = 32
	ANALSPReturnGroupsOnly = 0x1
)

// Asynchronous event completion DW0 values (type 2 = notice).
const (
	AENNSAttrChanged   = 0x00040002 // LID 04h
	AENANAChange       = 0x000C0302 // LID 0Ch
	AENDiscoveryChange = 0x0070F002 // LID 70h
)

// Feature identifiers (NVMe Base 2.0 §5.27.1, Figure 317).
const (
	FeatArbitration       = 0x01
	FeatPowerManagement   = 0x02
	FeatTemperatureThresh = 0x04
	FeatErrorRecovery     = 0x05
	FeatVolatileWC        = 0x06
	FeatNumberOfQueues    = 0x07
	FeatInterruptCoalesce = 0x08
	FeatWriteAtomicity    = 0x0A
	FeatAsyncEventConfig  = 0x0B
	FeatKeepAliveTimer    = 0x0F
	FeatHostBehavior      = 0x16
)
