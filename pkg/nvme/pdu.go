package nvme

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// PDUType is the NVMe/TCP PDU type (NVMe/TCP 1.0 §3.6.2, Figure 21).
type PDUType uint8

// PDU types.
const (
	PDUICReq       PDUType = 0x00
	PDUICResp      PDUType = 0x01
	PDUH2CTermReq  PDUType = 0x02
	PDUC2HTermReq  PDUType = 0x03
	PDUCapsuleCmd  PDUType = 0x04
	PDUCapsuleResp PDUType = 0x05
	PDUH2CData     PDUType = 0x06
	PDUC2HData     PDUType = 0x07
	PDUR2T         PDUType = 0x09
)

var pduTypeNames = map[PDUType]string{
	PDUICReq: "ICReq", PDUICResp: "ICResp", PDUH2CTermReq: "H2CTermReq",
	PDUC2HTermReq: "C2HTermReq", PDUCapsuleCmd: "CapsuleCmd",
	PDUCapsuleResp: "CapsuleResp", PDUH2CData: "H2CData", PDUC2HData: "C2HData",
	PDUR2T: "R2T",
}

func (t PDUType) String() string {
	if s, ok := pduTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("PDUType(%#x)", uint8(t))
}

// PDU header flags (NVMe/TCP 1.0 §3.6.1).
const (
	FlagHDGSTF  uint8 = 1 << 0 // header digest present
	FlagDDGSTF  uint8 = 1 << 1 // data digest present
	FlagLastPDU uint8 = 1 << 2 // last H2CData/C2HData PDU of a transfer
	FlagSuccess uint8 = 1 << 3 // C2HData: command completed successfully, no CapsuleResp follows
)

// Fixed header lengths (HLEN) per PDU type.
const (
	CommonHeaderSize = 8
	ICReqSize        = 128 // ICReq and ICResp HLEN and PLEN
	CapsuleCmdHLEN   = 72  // 8 + 64-byte SQE
	CapsuleRespHLEN  = 24  // 8 + 16-byte CQE
	DataHLEN         = 24  // H2CData, C2HData, R2T
	TermReqHLEN      = 24  // H2CTermReq, C2HTermReq
	DigestSize       = 4
	// TermReqMaxData is the most bytes of the offending header a TermReq carries.
	TermReqMaxData = 128
	// MinMaxH2CData is the smallest MAXH2CDATA the Linux host accepts.
	MinMaxH2CData = 4096
	// AdminICDSize is the in-capsule data every controller accepts on the admin
	// queue and for Fabrics commands on any queue (NVMe/TCP 1.0 §3.3).
	AdminICDSize = 8192
)

// HeaderLength returns the fixed HLEN of a PDU type and whether the type is known.
func HeaderLength(t PDUType) (int, bool) {
	switch t {
	case PDUICReq, PDUICResp:
		return ICReqSize, true
	case PDUH2CTermReq, PDUC2HTermReq:
		return TermReqHLEN, true
	case PDUCapsuleCmd:
		return CapsuleCmdHLEN, true
	case PDUCapsuleResp:
		return CapsuleRespHLEN, true
	case PDUH2CData, PDUC2HData, PDUR2T:
		return DataHLEN, true
	}
	return 0, false
}

// CommonHeader is the 8-byte header that starts every PDU.
type CommonHeader struct {
	Type  PDUType
	Flags uint8
	HLEN  uint8
	PDO   uint8
	PLEN  uint32
}

// Byte offsets of the common header fields, used as FEI in TermReqs.
const (
	OffsetType  = 0
	OffsetFlags = 1
	OffsetHLEN  = 2
	OffsetPDO   = 3
	OffsetPLEN  = 4
)

// DecodeCommonHeader reads the common header from b (len(b) >= 8).
func DecodeCommonHeader(b []byte) CommonHeader {
	_ = b[7]
	return CommonHeader{
		Type: PDUType(b[0]), Flags: b[1], HLEN: b[2], PDO: b[3],
		PLEN: binary.LittleEndian.Uint32(b[4:8]),
	}
}

// Encode writes the common header into b[0:8].
func (h CommonHeader) Encode(b []byte) {
	_ = b[7]
	b[0], b[1], b[2], b[3] = byte(h.Type), h.Flags, h.HLEN, h.PDO
	binary.LittleEndian.PutUint32(b[4:8], h.PLEN)
}

// ICReq is the Initialize Connection Request (NVMe/TCP 1.0 §3.6.2.2).
//
//	8 PFV(2) 10 HPDA(1) 11 DGST(1: bit0 HDGST_ENABLE, bit1 DDGST_ENABLE) 12 MAXR2T(4) 16..127 reserved
type ICReq struct {
	PFV    uint16
	HPDA   uint8
	DGST   uint8
	MAXR2T uint32
}

// ICResp is the Initialize Connection Response (NVMe/TCP 1.0 §3.6.2.3).
//
//	8 PFV(2) 10 CPDA(1) 11 DGST(1) 12 MAXH2CDATA(4) 16..127 reserved
type ICResp struct {
	PFV        uint16
	CPDA       uint8
	DGST       uint8
	MAXH2CDATA uint32
}

// Digest enable bits of ICReq/ICResp DGST.
const (
	DigestHeader uint8 = 1 << 0
	DigestData   uint8 = 1 << 1
)

// DecodeICReq reads an ICReq from a full 128-byte PDU.
func DecodeICReq(b []byte) ICReq {
	_ = b[15]
	return ICReq{
		PFV: binary.LittleEndian.Uint16(b[8:]), HPDA: b[10], DGST: b[11],
		MAXR2T: binary.LittleEndian.Uint32(b[12:]),
	}
}

// Encode writes a complete 128-byte ICReq PDU into b.
func (r ICReq) Encode(b []byte) {
	clear(b[:ICReqSize])
	CommonHeader{Type: PDUICReq, HLEN: ICReqSize, PLEN: ICReqSize}.Encode(b)
	binary.LittleEndian.PutUint16(b[8:], r.PFV)
	b[10], b[11] = r.HPDA, r.DGST
	binary.LittleEndian.PutUint32(b[12:], r.MAXR2T)
}

// DecodeICResp reads an ICResp from a full 128-byte PDU.
func DecodeICResp(b []byte) ICResp {
	_ = b[15]
	return ICResp{
		PFV: binary.LittleEndian.Uint16(b[8:]), CPDA: b[10], DGST: b[11],
		MAXH2CDATA: binary.LittleEndian.Uint32(b[12:]),
	}
}

// Encode writes a complete 128-byte ICResp PDU into b.
func (r ICResp) Encode(b []byte) {
	clear(b[:ICReqSize])
	CommonHeader{Type: PDUICResp, HLEN: ICReqSize, PLEN: ICReqSize}.Encode(b)
	binary.LittleEndian.PutUint16(b[8:], r.PFV)
	b[10], b[11] = r.CPDA, r.DGST
	binary.LittleEndian.PutUint32(b[12:], r.MAXH2CDATA)
}

// DataHeader is the PDU-specific header of H2CData, C2HData and R2T
// (NVMe/TCP 1.0 §3.6.2.6–3.6.2.8).
//
//	8 CCCID(2) 10 TTAG(2, reserved in C2HData) 12 DATAO/R2TO(4) 16 DATAL/R2TL(4) 20 reserved(4)
type DataHeader struct {
	CCCID uint16
	TTAG  uint16
	DATAO uint32
	DATAL uint32
}

// Byte offsets of DataHeader fields, used as FEI in TermReqs.
const (
	OffsetCCCID = 8
	OffsetTTAG  = 10
	OffsetDATAO = 12
	OffsetDATAL = 16
)

// DecodeDataHeader reads the PDU-specific part of a data or R2T PDU header.
func DecodeDataHeader(b []byte) DataHeader {
	_ = b[23]
	return DataHeader{
		CCCID: binary.LittleEndian.Uint16(b[8:]), TTAG: binary.LittleEndian.Uint16(b[10:]),
		DATAO: binary.LittleEndian.Uint32(b[12:]), DATAL: binary.LittleEndian.Uint32(b[16:]),
	}
}

// Encode writes the PDU-specific part into b[8:24] (the caller writes the common header).
func (d DataHeader) Encode(b []byte) {
	_ = b[23]
	binary.LittleEndian.PutUint16(b[8:], d.CCCID)
	binary.LittleEndian.PutUint16(b[10:], d.TTAG)
	binary.LittleEndian.PutUint32(b[12:], d.DATAO)
	binary.LittleEndian.PutUint32(b[16:], d.DATAL)
	clear(b[20:24])
}

// FES is a TermReq Fatal Error Status (NVMe/TCP 1.0 §3.6.2.4, Figure 27).
type FES uint16

// Fatal error statuses.
const (
	FESInvalidHeaderField   FES = 0x01 // FEI = byte offset of the bad field
	FESPDUSequenceError     FES = 0x02
	FESHeaderDigestError    FES = 0x03
	FESDataOutOfRange       FES = 0x04
	FESDataLimitExceeded    FES = 0x05 // also R2T limit exceeded
	FESUnsupportedParameter FES = 0x06 // FEI = byte offset of the parameter
)

func (f FES) String() string {
	switch f {
	case FESInvalidHeaderField:
		return "invalid PDU header field"
	case FESPDUSequenceError:
		return "PDU sequence error"
	case FESHeaderDigestError:
		return "header digest error"
	case FESDataOutOfRange:
		return "data transfer out of range"
	case FESDataLimitExceeded:
		return "data transfer limit exceeded"
	case FESUnsupportedParameter:
		return "unsupported parameter"
	}
	return fmt.Sprintf("FES(%#x)", uint16(f))
}

// TermReq is the PDU-specific header of H2CTermReq and C2HTermReq.
//
//	8 FES(2) 10 FEI(4) 14..23 reserved; then up to 128 bytes of the offending PDU header
type TermReq struct {
	FES FES
	FEI uint32
}

// EncodeTermReq writes a complete TermReq PDU of type t into b and returns its
// length. offending (truncated to TermReqMaxData) is copied after the header.
// b must hold TermReqHLEN+TermReqMaxData bytes.
func EncodeTermReq(b []byte, t PDUType, tr TermReq, offending []byte) int {
	if len(offending) > TermReqMaxData {
		offending = offending[:TermReqMaxData]
	}
	n := TermReqHLEN + len(offending)
	clear(b[:TermReqHLEN])
	CommonHeader{Type: t, HLEN: TermReqHLEN, PLEN: uint32(n)}.Encode(b)
	binary.LittleEndian.PutUint16(b[8:], uint16(tr.FES))
	binary.LittleEndian.PutUint32(b[10:], tr.FEI)
	copy(b[TermReqHLEN:], offending)
	return n
}

// DecodeTermReq reads the PDU-specific part of a TermReq header.
func DecodeTermReq(b []byte) TermReq {
	_ = b[23]
	return TermReq{FES: FES(binary.LittleEndian.Uint16(b[8:])), FEI: binary.LittleEndian.Uint32(b[10:])}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Digest returns the NVMe/TCP header or data digest of b: CRC32C
// (NVMe/TCP 1.0 §3.6.3), the same as the Linux host's ~crc32c(~0, b).
func Digest(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateDigest continues a digest over more bytes (for data split across buffers).
func UpdateDigest(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }
