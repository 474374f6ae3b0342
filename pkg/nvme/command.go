package nvme

import "encoding/binary"

// SQESize and CQESize are the entry sizes used by NVMe over Fabrics.
const (
	SQESize = 64
	CQESize = 16
)

// Opcode is an NVMe command opcode.
type Opcode uint8

// Admin command opcodes (NVMe Base 2.0 §5, Figure 138).
const (
	AdminGetLogPage    Opcode = 0x02
	AdminIdentify      Opcode = 0x06
	AdminAbort         Opcode = 0x08
	AdminSetFeatures   Opcode = 0x09
	AdminGetFeatures   Opcode = 0x0A
	AdminAsyncEventReq Opcode = 0x0C
	AdminKeepAlive     Opcode = 0x18
	OpcodeFabrics      Opcode = 0x7F // on any queue
)

// NVM command set I/O opcodes (NVM Command Set 1.0 §3).
const (
	IOFlush       Opcode = 0x00
	IOWrite       Opcode = 0x01
	IORead        Opcode = 0x02
	IOCompare     Opcode = 0x05
	IOWriteZeroes Opcode = 0x08
	IODatasetMgmt Opcode = 0x09
)

// FCType is the Fabrics command type (NVMe-oF 1.1 §3, Figure 19).
type FCType uint8

// Fabrics command types.
const (
	FCTypePropertySet FCType = 0x00
	FCTypeConnect     FCType = 0x01
	FCTypePropertyGet FCType = 0x04
	FCTypeAuthSend    FCType = 0x05
	FCTypeAuthRecv    FCType = 0x06
	FCTypeDisconnect  FCType = 0x08
)

// SGL descriptor identifiers (byte 15 of the descriptor: type<<4 | subtype).
const (
	SGLDataBlockOffset    uint8 = 0x01 // Data Block, Offset: in-capsule data
	SGLTransportDataBlock uint8 = 0x5A // Transport Data Block, transport specific: R2T/C2HData
	PSDTSGL               uint8 = 0x40 // CDW0 flags bits 7:6 = 01b: SGL for data
)

// Byte offsets inside the SQE, used as error locations and for field access.
const (
	SQEOffsetOpcode = 0
	SQEOffsetFlags  = 1
	SQEOffsetCID    = 2
	SQEOffsetNSID   = 4
	SQEOffsetSGL    = 24
	SQEOffsetCDW10  = 40
)

// Command is a 64-byte submission queue entry. Accessors decode fields in
// place; a Command is copied by value (no pointers inside).
type Command [SQESize]byte

// Opcode returns CDW0 bits 7:0.
func (c *Command) Opcode() Opcode { return Opcode(c[0]) }

// Flags returns CDW0 bits 15:8 (FUSE bits 1:0, PSDT bits 7:6).
func (c *Command) Flags() uint8 { return c[1] }

// CID returns the command identifier.
func (c *Command) CID() uint16 { return binary.LittleEndian.Uint16(c[2:]) }

// NSID returns the namespace identifier.
func (c *Command) NSID() uint32 { return binary.LittleEndian.Uint32(c[4:]) }

// FCType returns the Fabrics command type (byte 4 of a Fabrics command).
func (c *Command) FCType() FCType { return FCType(c[4]) }

// SGLAddress returns the SGL descriptor address (offset for in-capsule data).
func (c *Command) SGLAddress() uint64 { return binary.LittleEndian.Uint64(c[24:]) }

// SGLLength returns the SGL descriptor length in bytes.
func (c *Command) SGLLength() uint32 { return binary.LittleEndian.Uint32(c[32:]) }

// SGLIdentifier returns the SGL descriptor type/subtype byte.
func (c *Command) SGLIdentifier() uint8 { return c[39] }

// CDW returns command dword n (2..15).
func (c *Command) CDW(n int) uint32 { return binary.LittleEndian.Uint32(c[n*4:]) }

// SLBA returns the starting LBA of an NVM command (CDW10-11).
func (c *Command) SLBA() uint64 { return binary.LittleEndian.Uint64(c[40:]) }

// NLB returns the 0's based number of logical blocks (CDW12 bits 15:0).
func (c *Command) NLB() uint16 { return binary.LittleEndian.Uint16(c[48:]) }

// SetOpcode sets CDW0 bits 7:0.
func (c *Command) SetOpcode(o Opcode) { c[0] = byte(o) }

// SetFlags sets CDW0 bits 15:8.
func (c *Command) SetFlags(f uint8) { c[1] = f }

// SetCID sets the command identifier.
func (c *Command) SetCID(cid uint16) { binary.LittleEndian.PutUint16(c[2:], cid) }

// SetNSID sets the namespace identifier.
func (c *Command) SetNSID(nsid uint32) { binary.LittleEndian.PutUint32(c[4:], nsid) }

// SetFCType sets byte 4 of a Fabrics command.
func (c *Command) SetFCType(t FCType) { c[4] = byte(t) }

// SetCDW sets command dword n.
func (c *Command) SetCDW(n int, v uint32) { binary.LittleEndian.PutUint32(c[n*4:], v) }

// SetSLBA sets CDW10-11.
func (c *Command) SetSLBA(lba uint64) { binary.LittleEndian.PutUint64(c[40:], lba) }

// SetSGL sets the data pointer to a single SGL descriptor.
func (c *Command) SetSGL(addr uint64, length uint32, id uint8) {
	binary.LittleEndian.PutUint64(c[24:], addr)
	binary.LittleEndian.PutUint32(c[32:], length)
	c[36], c[37], c[38] = 0, 0, 0
	c[39] = id
}

// Completion is a decoded completion queue entry.
type Completion struct {
	DW0    uint32
	DW1    uint32
	SQHD   uint16
	SQID   uint16
	CID    uint16
	Status Status
}

// Encode writes the 16-byte CQE into b.
func (c *Completion) Encode(b []byte) {
	_ = b[15]
	binary.LittleEndian.PutUint32(b[0:], c.DW0)
	binary.LittleEndian.PutUint32(b[4:], c.DW1)
	binary.LittleEndian.PutUint16(b[8:], c.SQHD)
	binary.LittleEndian.PutUint16(b[10:], c.SQID)
	binary.LittleEndian.PutUint16(b[12:], c.CID)
	binary.LittleEndian.PutUint16(b[14:], c.Status.Wire())
}

// DecodeCompletion reads a 16-byte CQE.
func DecodeCompletion(b []byte) Completion {
	_ = b[15]
	return Completion{
		DW0: binary.LittleEndian.Uint32(b[0:]), DW1: binary.LittleEndian.Uint32(b[4:]),
		SQHD: binary.LittleEndian.Uint16(b[8:]), SQID: binary.LittleEndian.Uint16(b[10:]),
		CID: binary.LittleEndian.Uint16(b[12:]), Status: StatusFromWire(binary.LittleEndian.Uint16(b[14:])),
	}
}

// Connect command fields (NVMe-oF 1.1 §3.3, Figure 20) and data (Figure 21).
const (
	ConnectOffsetRECFMT = 40
	ConnectOffsetQID    = 42
	ConnectOffsetSQSIZE = 44
	ConnectOffsetCATTR  = 46
	ConnectOffsetKATO   = 48
	ConnectDataSize     = 1024
	ConnectDataHostID   = 0
	ConnectDataCNTLID   = 16
	ConnectDataSubNQN   = 256
	ConnectDataHostNQN  = 512
	NQNMaxSize          = 256
	// CNTLIDDynamic requests a dynamically allocated controller ID.
	CNTLIDDynamic = 0xFFFF
	// CATTRDisableSQFlow is CATTR bit 2: SQ flow control disabled (SQHD 0xFFFF).
	CATTRDisableSQFlow = 1 << 2
)

// ConnectCmd holds the decoded fields of a Connect command SQE.
type ConnectCmd struct {
	RECFMT uint16
	QID    uint16
	SQSIZE uint16 // 0's based
	CATTR  uint8
	KATO   uint32 // milliseconds
}

// DecodeConnect reads the Connect fields of an SQE.
func (c *Command) DecodeConnect() ConnectCmd {
	return ConnectCmd{
		RECFMT: binary.LittleEndian.Uint16(c[40:]), QID: binary.LittleEndian.Uint16(c[42:]),
		SQSIZE: binary.LittleEndian.Uint16(c[44:]), CATTR: c[46],
		KATO: binary.LittleEndian.Uint32(c[48:]),
	}
}

// EncodeConnect sets the Connect fields of a Fabrics SQE.
func (c *Command) EncodeConnect(cc ConnectCmd) {
	c.SetOpcode(OpcodeFabrics)
	c.SetFCType(FCTypeConnect)
	binary.LittleEndian.PutUint16(c[40:], cc.RECFMT)
	binary.LittleEndian.PutUint16(c[42:], cc.QID)
	binary.LittleEndian.PutUint16(c[44:], cc.SQSIZE)
	c[46] = cc.CATTR
	binary.LittleEndian.PutUint32(c[48:], cc.KATO)
}

// ConnectData is the 1024-byte data of a Connect command.
type ConnectData struct {
	HostID  [16]byte
	CNTLID  uint16
	SubNQN  string
	HostNQN string
}

// DecodeConnectData reads Connect data; NQNs end at the first NUL.
func DecodeConnectData(b []byte) ConnectData {
	_ = b[ConnectDataSize-1]
	var d ConnectData
	copy(d.HostID[:], b[0:16])
	d.CNTLID = binary.LittleEndian.Uint16(b[16:])
	d.SubNQN = cString(b[ConnectDataSubNQN : ConnectDataSubNQN+NQNMaxSize])
	d.HostNQN = cString(b[ConnectDataHostNQN : ConnectDataHostNQN+NQNMaxSize])
	return d
}

// Encode writes the 1024-byte Connect data into b.
func (d *ConnectData) Encode(b []byte) {
	clear(b[:ConnectDataSize])
	copy(b[0:16], d.HostID[:])
	binary.LittleEndian.PutUint16(b[16:], d.CNTLID)
	copy(b[ConnectDataSubNQN:ConnectDataSubNQN+NQNMaxSize-1], d.SubNQN)
	copy(b[ConnectDataHostNQN:ConnectDataHostNQN+NQNMaxSize-1], d.HostNQN)
}

// NQNTerminated reports whether an NQN field of a Connect data buffer holds a
// NUL within its 256 bytes (an unterminated NQN is an invalid parameter).
func NQNTerminated(field []byte) bool {
	for _, c := range field {
		if c == 0 {
			return true
		}
	}
	return false
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Property offsets (NVMe Base 2.0 §3.1.4) for Property Get/Set.
const (
	PropCAP  = 0x00
	PropVS   = 0x08
	PropCC   = 0x14
	PropCSTS = 0x1C
	PropNSSR = 0x20
)

// Property Get/Set SQE fields (NVMe-oF 1.1 §3.4, §3.5): ATTRIB@40 (bits 2:0:
// 0 = 4 bytes, 1 = 8 bytes), OFST@44, VALUE@48 (Set).
const (
	PropOffsetATTRIB = 40
	PropOffsetOFST   = 44
	PropOffsetVALUE  = 48
)

// Well-known NQNs.
const (
	DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"
)
