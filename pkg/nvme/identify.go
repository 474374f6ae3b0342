package nvme

import "encoding/binary"

// IdentifySize is the size of every Identify data structure.
const IdentifySize = 4096

// Identify CNS values (NVMe Base 2.0 §5.17.2, Figure 273).
const (
	CNSNamespace        = 0x00
	CNSController       = 0x01
	CNSActiveNSList     = 0x02
	CNSNSDescriptorList = 0x03
	CNSCSController     = 0x06
	CNSCSIndepNamespace = 0x08
)

// Controller types (Identify Controller CNTRLTYPE).
const (
	ControllerTypeIO        = 1
	ControllerTypeDiscovery = 2
)

// IdentifyController holds the Identify Controller fields Basalt sets or a host
// reads (NVMe Base 2.0 §5.17.2.1, Figure 275; offsets in the comments).
type IdentifyController struct {
	VID       uint16 // 0
	SSVID     uint16 // 2
	SN        string // 4, 20 bytes ASCII space padded
	MN        string // 24, 40 bytes
	FR        string // 64, 8 bytes
	RAB       uint8  // 72
	IEEE      [3]byte
	CMIC      uint8  // 76: bit0 multi-port, bit1 multi-controller, bit3 ANA
	MDTS      uint8  // 77: 2^n * 4 KiB, 0 = no limit
	CNTLID    uint16 // 78
	VER       uint32 // 80
	RTD3E     uint32 // 88
	OAES      uint32 // 92
	CTRATT    uint32 // 96
	CNTRLTYPE uint8  // 111
	OACS      uint16 // 256
	ACL       uint8  // 258
	AERL      uint8  // 259
	FRMW      uint8  // 260
	LPA       uint8  // 261
	ELPE      uint8  // 262
	KAS       uint16 // 320, 100 ms units
	ANATT     uint8  // 342, seconds
	ANACAP    uint8  // 343
	ANAGRPMAX uint32 // 344
	NANAGRPID uint32 // 348
	SQES      uint8  // 512
	CQES      uint8  // 513
	MAXCMD    uint16 // 514
	NN        uint32 // 516
	ONCS      uint16 // 520
	FUSES     uint16 // 522
	VWC       uint8  // 525
	AWUN      uint16 // 526
	AWUPF     uint16 // 528
	SGLS      uint32 // 536
	MNAN      uint32 // 540
	SubNQN    string // 768, 256 bytes NUL terminated
	IOCCSZ    uint32 // 1792, 16-byte units
	IORCSZ    uint32 // 1796
	ICDOFF    uint16 // 1800
	FCATT     uint8  // 1802
	MSDBD     uint8  // 1803
	OFCS      uint16 // 1804
}

// Marshal writes the structure into b (len >= IdentifySize), zeroing the rest.
func (c *IdentifyController) Marshal(b []byte) {
	b = b[:IdentifySize]
	clear(b)
	le := binary.LittleEndian
	le.PutUint16(b[0:], c.VID)
	le.PutUint16(b[2:], c.SSVID)
	putPadded(b[4:24], c.SN)
	putPadded(b[24:64], c.MN)
	putPadded(b[64:72], c.FR)
	b[72] = c.RAB
	copy(b[73:76], c.IEEE[:])
	b[76], b[77] = c.CMIC, c.MDTS
	le.PutUint16(b[78:], c.CNTLID)
	le.PutUint32(b[80:], c.VER)
	le.PutUint32(b[88:], c.RTD3E)
	le.PutUint32(b[92:], c.OAES)
	le.PutUint32(b[96:], c.CTRATT)
	b[111] = c.CNTRLTYPE
	le.PutUint16(b[256:], c.OACS)
	b[258], b[259], b[260], b[261], b[262] = c.ACL, c.AERL, c.FRMW, c.LPA, c.ELPE
	le.PutUint16(b[320:], c.KAS)
	b[342], b[343] = c.ANATT, c.ANACAP
	le.PutUint32(b[344:], c.ANAGRPMAX)
	le.PutUint32(b[348:], c.NANAGRPID)
	b[512], b[513] = c.SQES, c.CQES
	le.PutUint16(b[514:], c.MAXCMD)
	le.PutUint32(b[516:], c.NN)
	le.PutUint16(b[520:], c.ONCS)
	le.PutUint16(b[522:], c.FUSES)
	b[525] = c.VWC
	le.PutUint16(b[526:], c.AWUN)
	le.PutUint16(b[528:], c.AWUPF)
	le.PutUint32(b[536:], c.SGLS)
	le.PutUint32(b[540:], c.MNAN)
	copy(b[768:768+NQNMaxSize-1], c.SubNQN)
	le.PutUint32(b[1792:], c.IOCCSZ)
	le.PutUint32(b[1796:], c.IORCSZ)
	le.PutUint16(b[1800:], c.ICDOFF)
	b[1802], b[1803] = c.FCATT, c.MSDBD
	le.PutUint16(b[1804:], c.OFCS)
}

// UnmarshalIdentifyController decodes an Identify Controller buffer.
func UnmarshalIdentifyController(b []byte) IdentifyController {
	_ = b[IdentifySize-1]
	le := binary.LittleEndian
	c := IdentifyController{
		VID: le.Uint16(b[0:]), SSVID: le.Uint16(b[2:]),
		SN: trimPadded(b[4:24]), MN: trimPadded(b[24:64]), FR: trimPadded(b[64:72]),
		RAB: b[72], CMIC: b[76], MDTS: b[77], CNTLID: le.Uint16(b[78:]),
		VER: le.Uint32(b[80:]), RTD3E: le.Uint32(b[88:]), OAES: le.Uint32(b[92:]),
		CTRATT: le.Uint32(b[96:]), CNTRLTYPE: b[111], OACS: le.Uint16(b[256:]),
		ACL: b[258], AERL: b[259], FRMW: b[260], LPA: b[261], ELPE: b[262],
		KAS: le.Uint16(b[320:]), ANATT: b[342], ANACAP: b[343],
		ANAGRPMAX: le.Uint32(b[344:]), NANAGRPID: le.Uint32(b[348:]),
		SQES: b[512], CQES: b[513], MAXCMD: le.Uint16(b[514:]), NN: le.Uint32(b[516:]),
		ONCS: le.Uint16(b[520:]), FUSES: le.Uint16(b[522:]), VWC: b[525],
		AWUN: le.Uint16(b[526:]), AWUPF: le.Uint16(b[528:]), SGLS: le.Uint32(b[536:]),
		MNAN: le.Uint32(b[540:]), SubNQN: cString(b[768 : 768+NQNMaxSize]),
		IOCCSZ: le.Uint32(b[1792:]), IORCSZ: le.Uint32(b[1796:]), ICDOFF: le.Uint16(b[1800:]),
		FCATT: b[1802], MSDBD: b[1803], OFCS: le.Uint16(b[1804:]),
	}
	copy(c.IEEE[:], b[73:76])
	return c
}

// IdentifyNamespace holds the Identify Namespace fields Basalt uses (NVM
// Command Set 1.0 §4.1.5.1, Figure 97). One LBA format (index 0).
type IdentifyNamespace struct {
	NSZE     uint64   // 0, LBAs
	NCAP     uint64   // 8, 0 = namespace not allocated
	NUSE     uint64   // 16
	NSFEAT   uint8    // 24
	NLBAF    uint8    // 25, 0's based
	FLBAS    uint8    // 26
	DPS      uint8    // 29
	NMIC     uint8    // 30, bit0 shared
	DLFEAT   uint8    // 33
	NAWUPF   uint16   // 42
	NOIOB    uint16   // 46
	ANAGRPID uint32   // 92
	NSATTR   uint8    // 99
	ENDGID   uint16   // 102
	NGUID    [16]byte // 104
	EUI64    [8]byte  // 120
	LBADS    uint8    // LBAF0 bits 23:16 at 128: log2 of the LBA size
}

// Marshal writes the structure into b (len >= IdentifySize), zeroing the rest.
func (n *IdentifyNamespace) Marshal(b []byte) {
	b = b[:IdentifySize]
	clear(b)
	le := binary.LittleEndian
	le.PutUint64(b[0:], n.NSZE)
	le.PutUint64(b[8:], n.NCAP)
	le.PutUint64(b[16:], n.NUSE)
	b[24], b[25], b[26], b[29], b[30], b[33] = n.NSFEAT, n.NLBAF, n.FLBAS, n.DPS, n.NMIC, n.DLFEAT
	le.PutUint16(b[42:], n.NAWUPF)
	le.PutUint16(b[46:], n.NOIOB)
	le.PutUint32(b[92:], n.ANAGRPID)
	b[99] = n.NSATTR
	le.PutUint16(b[102:], n.ENDGID)
	copy(b[104:120], n.NGUID[:])
	copy(b[120:128], n.EUI64[:])
	le.PutUint32(b[128:], uint32(n.LBADS)<<16)
}

// UnmarshalIdentifyNamespace decodes an Identify Namespace buffer (LBA format
// FLBAS selects is decoded into LBADS).
func UnmarshalIdentifyNamespace(b []byte) IdentifyNamespace {
	_ = b[IdentifySize-1]
	le := binary.LittleEndian
	n := IdentifyNamespace{
		NSZE: le.Uint64(b[0:]), NCAP: le.Uint64(b[8:]), NUSE: le.Uint64(b[16:]),
		NSFEAT: b[24], NLBAF: b[25], FLBAS: b[26], DPS: b[29], NMIC: b[30], DLFEAT: b[33],
		NAWUPF: le.Uint16(b[42:]), NOIOB: le.Uint16(b[46:]), ANAGRPID: le.Uint32(b[92:]),
		NSATTR: b[99], ENDGID: le.Uint16(b[102:]),
	}
	copy(n.NGUID[:], b[104:120])
	copy(n.EUI64[:], b[120:128])
	f := int(n.FLBAS & 0xF)
	n.LBADS = uint8(le.Uint32(b[128+4*f:]) >> 16)
	return n
}

// Namespace identification descriptor types (NVMe Base 2.0 §5.17.2.3, Figure 278).
const (
	NIDTEUI64 = 0x01 // NIDL 8
	NIDTNGUID = 0x02 // NIDL 16
	NIDTUUID  = 0x03 // NIDL 16
	NIDTCSI   = 0x04 // NIDL 1
)

// AppendNSDescriptor writes one descriptor {NIDT, NIDL, 2 reserved, NID} at
// b[off:] and returns the offset after it.
func AppendNSDescriptor(b []byte, off int, nidt uint8, nid []byte) int {
	b[off], b[off+1], b[off+2], b[off+3] = nidt, uint8(len(nid)), 0, 0
	copy(b[off+4:], nid)
	return off + 4 + len(nid)
}

func putPadded(dst []byte, s string) {
	n := copy(dst, s)
	for i := n; i < len(dst); i++ {
		dst[i] = ' '
	}
}

func trimPadded(b []byte) string {
	end := len(b)
	for end > 0 && (b[end-1] == ' ' || b[end-1] == 0) {
		end--
	}
	return string(b[:end])
}
