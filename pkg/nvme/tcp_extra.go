package nvme

import "encoding/binary"

// This file adds NVMe/TCP helpers used by the target transport (target/tcp)
// and by host-side test clients: field offsets for TermReq FEI values, the
// per-type flag table, and encoders for the fixed-size controller-to-host
// PDU headers. Nothing here allocates.

// Byte offsets of ICReq/ICResp fields inside the 128-byte PDU, used as FEI.
const (
	OffsetICPFV        = 8  // PFV (2)
	OffsetICHPDA       = 10 // ICReq HPDA / ICResp CPDA (1)
	OffsetICDGST       = 11 // DGST (1)
	OffsetICMAXR2T     = 12 // ICReq MAXR2T / ICResp MAXH2CDATA (4)
	OffsetICMAXH2CDATA = 12
)

// Byte offsets inside a CapsuleCmd PDU.
const (
	// OffsetCapsuleSQE is where the 64-byte SQE starts.
	OffsetCapsuleSQE = 8
	// OffsetCapsuleCID is the SQE's CID as a PDU offset.
	OffsetCapsuleCID = OffsetCapsuleSQE + SQEOffsetCID
	// OffsetCapsuleSGL is the SQE's SGL descriptor as a PDU offset.
	OffsetCapsuleSGL = OffsetCapsuleSQE + SQEOffsetSGL
)

// Byte offsets of the TermReq PDU-specific header fields.
const (
	OffsetTermReqFES = 8
	OffsetTermReqFEI = 10
)

// More NVMe/TCP limits (NVMe/TCP 1.0 §3.6.2.2–3.6.2.4).
const (
	// MaxPDA is the largest HPDA/CPDA value (0's based dwords).
	MaxPDA = 31
	// TermReqMaxPLEN is the largest valid TermReq PLEN: header plus 128
	// bytes of the offending PDU header.
	TermReqMaxPLEN = TermReqHLEN + TermReqMaxData
	// MaxHeaderSize is the largest PDU header including its digest
	// (ICReq/ICResp carry no digest, so 128 is the maximum).
	MaxHeaderSize = ICReqSize
)

// HostToController reports whether PDU type t travels from host to
// controller: bit 0 of the type is the direction (even = host to controller).
func (t PDUType) HostToController() bool { return t&1 == 0 }

// AllowedFlags returns the FLAGS bits that may be set in a PDU of type t
// (NVMe/TCP 1.0 §3.6.2; FreeBSD nvmf_tcp_validate_pdu_header). Unknown types
// and the IC PDUs allow none.
func AllowedFlags(t PDUType) uint8 {
	switch t {
	case PDUCapsuleCmd:
		return FlagHDGSTF | FlagDDGSTF
	case PDUCapsuleResp, PDUR2T:
		return FlagHDGSTF
	case PDUH2CData:
		return FlagHDGSTF | FlagDDGSTF | FlagLastPDU
	case PDUC2HData:
		return FlagHDGSTF | FlagDDGSTF | FlagLastPDU | FlagSuccess
	}
	return 0
}

// PutDigest stores a header or data digest (little-endian CRC32C) in b[0:4].
func PutDigest(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

// GetDigest loads a digest stored by PutDigest.
func GetDigest(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// EncodeCapsuleResp writes a complete CapsuleResp PDU (CH + CQE, plus the
// header digest when hdgst) into b and returns its length, 24 or 28.
func EncodeCapsuleResp(b []byte, cpl *Completion, hdgst bool) int {
	plen := CapsuleRespHLEN
	var flags uint8
	if hdgst {
		plen += DigestSize
		flags = FlagHDGSTF
	}
	CommonHeader{Type: PDUCapsuleResp, Flags: flags, HLEN: CapsuleRespHLEN, PLEN: uint32(plen)}.Encode(b)
	cpl.Encode(b[CommonHeaderSize:CapsuleRespHLEN])
	if hdgst {
		PutDigest(b[CapsuleRespHLEN:], Digest(b[:CapsuleRespHLEN]))
	}
	return plen
}

// EncodeDataHeader writes the 24-byte header of an R2T, H2CData or C2HData
// PDU, followed by its header digest when FlagHDGSTF is set in flags, and
// returns the number of bytes written (24 or 28). The caller computes PDO and
// PLEN (they depend on padding and data digests).
func EncodeDataHeader(b []byte, t PDUType, flags, pdo uint8, plen uint32, d DataHeader) int {
	CommonHeader{Type: t, Flags: flags, HLEN: DataHLEN, PDO: pdo, PLEN: plen}.Encode(b)
	d.Encode(b)
	if flags&FlagHDGSTF == 0 {
		return DataHLEN
	}
	PutDigest(b[DataHLEN:], Digest(b[:DataHLEN]))
	return DataHLEN + DigestSize
}

// EncodeCapsuleCmdHeader writes the header of a CapsuleCmd PDU carrying
// icdLen bytes of in-capsule data (CPDA 0: the data follows the header and
// its digest directly) and returns the header length including the header
// digest (72 or 76). The caller appends the data and, when ddgst and
// icdLen > 0, its digest.
func EncodeCapsuleCmdHeader(b []byte, cmd *Command, icdLen int, hdgst, ddgst bool) int {
	hlen := CapsuleCmdHLEN
	var flags uint8
	if hdgst {
		hlen += DigestSize
		flags |= FlagHDGSTF
	}
	plen, pdo := hlen, 0
	if icdLen > 0 {
		pdo = hlen
		plen += icdLen
		if ddgst {
			flags |= FlagDDGSTF
			plen += DigestSize
		}
	}
	CommonHeader{Type: PDUCapsuleCmd, Flags: flags, HLEN: CapsuleCmdHLEN, PDO: uint8(pdo), PLEN: uint32(plen)}.Encode(b)
	copy(b[OffsetCapsuleSQE:CapsuleCmdHLEN], cmd[:])
	if hdgst {
		PutDigest(b[CapsuleCmdHLEN:], Digest(b[:CapsuleCmdHLEN]))
	}
	return hlen
}
