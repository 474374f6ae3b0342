package tcp

import (
	"fmt"

	"basalt/pkg/nvme"
)

// violation describes a fatal transport error: the C2HTermReq to send (FES,
// FEI) and a reason for the log. The zero value means "no violation".
// disconnect marks errors that end the connection without a TermReq
// (a malformed H2CTermReq, FreeBSD "7.4.7").
type violation struct {
	fes        nvme.FES
	fei        uint32
	disconnect bool
	reason     string
}

func (v violation) ok() bool { return v.fes == 0 && !v.disconnect }

func (v violation) Error() string {
	if v.disconnect {
		return "tcp: " + v.reason
	}
	return fmt.Sprintf("tcp: %s (FES %#x %v, FEI %d)", v.reason, uint16(v.fes), v.fes, v.fei)
}

func invalidField(fei uint32, reason string) violation {
	return violation{fes: nvme.FESInvalidHeaderField, fei: fei, reason: reason}
}

// headerParams are the receive-side parameters of an established
// connection that PDU header validation needs.
type headerParams struct {
	hdgst, ddgst bool   // digests negotiated in ICReq/ICResp
	cpda         uint8  // CPDA sent in ICResp (always 0 for now)
	maxICD       uint32 // largest in-capsule data accepted on this queue
	maxH2CData   uint32 // MAXH2CDATA sent in ICResp
}

// pduLayout is what a valid common header says about the rest of the PDU.
type pduLayout struct {
	pshLen  int    // bytes after the common header up to HLEN
	hdgst   bool   // a header digest follows the header
	padLen  int    // bytes between the header (+digest) and PDO
	dataLen uint32 // data bytes, excluding the data digest
	ddgst   bool   // a data digest follows the data
}

// validateICReqHeader checks the common header of the first PDU on a
// connection, which must be an ICReq (NVMe/TCP 1.0 §3.6.2.2; SPDK
// nvmf_tcp_pdu_ch_handle: anything else before ICReq is a PDU sequence
// error). Fields are checked in header order.
func validateICReqHeader(ch nvme.CommonHeader) violation {
	switch {
	case ch.Type != nvme.PDUICReq:
		return violation{fes: nvme.FESPDUSequenceError, reason: fmt.Sprintf("%v before ICReq", ch.Type)}
	case ch.Flags != 0:
		return invalidField(nvme.OffsetFlags, "ICReq flags not 0")
	case ch.HLEN != nvme.ICReqSize:
		return invalidField(nvme.OffsetHLEN, "ICReq HLEN not 128")
	case ch.PDO != 0:
		return invalidField(nvme.OffsetPDO, "ICReq PDO not 0")
	case ch.PLEN != nvme.ICReqSize:
		return invalidField(nvme.OffsetPLEN, "ICReq PLEN not 128")
	}
	return violation{}
}

// validateICReq checks the ICReq's own fields (SPDK nvmf_tcp_icreq_handle:
// PFV must be 0, reported as an invalid header field at PFV). HPDA above 31
// is outside the field's range. Digests the Options refuse are an
// unsupported parameter at DGST.
func validateICReq(r nvme.ICReq, o *Options) violation {
	switch {
	case r.PFV != 0:
		return invalidField(nvme.OffsetICPFV, fmt.Sprintf("ICReq PFV %d", r.PFV))
	case r.HPDA > nvme.MaxPDA:
		return invalidField(nvme.OffsetICHPDA, fmt.Sprintf("ICReq HPDA %d > 31", r.HPDA))
	case r.DGST&nvme.DigestHeader != 0 && o.DisableHeaderDigest,
		r.DGST&nvme.DigestData != 0 && o.DisableDataDigest:
		return violation{fes: nvme.FESUnsupportedParameter, fei: nvme.OffsetICDGST,
			reason: fmt.Sprintf("ICReq asks for refused digests %#x", r.DGST)}
	}
	return violation{}
}

// validateHeader checks the common header of a PDU received on an
// established connection and returns the layout of the rest of the PDU.
//
// It follows FreeBSD's nvmf_tcp_validate_pdu_header (sys/dev/nvmf/nvmf_tcp.h),
// which reports "the lowest incorrect field first": type and direction,
// flags, digest flags, HLEN, PDO, PLEN, then the data size limits. Two
// deliberate differences:
//   - a second ICReq is a PDU sequence error (SPDK nvmf_tcp_pdu_ch_handle,
//     nvmet), not an invalid type;
//   - DDGSTF is required only on PDUs that carry data: the Linux host sets it
//     only when there is data (nvme_tcp_setup_cmd_pdu in
//     drivers/nvme/host/tcp.c), and nvmet checks "len && !DDGSTF".
//
// PDO alignment is checked only when CPDA is non-zero (SPDK
// nvmf_tcp_pdu_ch_handle); this controller always sends CPDA 0.
func validateHeader(ch nvme.CommonHeader, p *headerParams) (pduLayout, violation) {
	if v := validateType(ch); !v.ok() {
		return pduLayout{}, v
	}
	if v := validateFlags(ch, p); !v.ok() {
		return pduLayout{}, v
	}
	hlen, _ := nvme.HeaderLength(ch.Type)
	if int(ch.HLEN) != hlen {
		return pduLayout{}, invalidField(nvme.OffsetHLEN, fmt.Sprintf("%v HLEN %d, want %d", ch.Type, ch.HLEN, hlen))
	}
	fullHLEN := uint32(ch.HLEN)
	if ch.Flags&nvme.FlagHDGSTF != 0 {
		fullHLEN += nvme.DigestSize
	}
	if v := validatePDO(ch, fullHLEN, p); !v.ok() {
		return pduLayout{}, v
	}
	return layoutFromPLEN(ch, fullHLEN, p)
}

func validateType(ch nvme.CommonHeader) violation {
	if !ch.Type.HostToController() {
		return invalidField(nvme.OffsetType, fmt.Sprintf("%v sent to a controller", ch.Type))
	}
	switch ch.Type {
	case nvme.PDUICReq:
		return violation{fes: nvme.FESPDUSequenceError, reason: "second ICReq"}
	case nvme.PDUH2CTermReq:
		// FreeBSD: TermReqs with an invalid PLEN end the connection
		// without reporting an error.
		if ch.PLEN < nvme.TermReqHLEN || ch.PLEN > nvme.TermReqMaxPLEN {
			return violation{disconnect: true, reason: fmt.Sprintf("H2CTermReq with PLEN %d", ch.PLEN)}
		}
	case nvme.PDUCapsuleCmd, nvme.PDUH2CData:
	default:
		return invalidField(nvme.OffsetType, fmt.Sprintf("unknown PDU type %v", ch.Type))
	}
	return violation{}
}

func validateFlags(ch nvme.CommonHeader, p *headerParams) violation {
	allowed := nvme.AllowedFlags(ch.Type)
	if ch.Flags&^allowed != 0 {
		return invalidField(nvme.OffsetFlags, fmt.Sprintf("%v flags %#x", ch.Type, ch.Flags))
	}
	// Once negotiated, every PDU type that may carry a digest must.
	if allowed&nvme.FlagHDGSTF != 0 && (ch.Flags&nvme.FlagHDGSTF != 0) != p.hdgst {
		return invalidField(nvme.OffsetFlags, fmt.Sprintf("%v HDGSTF %v, negotiated %v",
			ch.Type, ch.Flags&nvme.FlagHDGSTF != 0, p.hdgst))
	}
	if allowed&nvme.FlagDDGSTF == 0 {
		return violation{}
	}
	ddgstf := ch.Flags&nvme.FlagDDGSTF != 0
	if ddgstf && !p.ddgst {
		return invalidField(nvme.OffsetFlags, fmt.Sprintf("%v DDGSTF without data digest", ch.Type))
	}
	fullHLEN := uint32(ch.HLEN)
	if p.hdgst {
		fullHLEN += nvme.DigestSize
	}
	if p.ddgst && !ddgstf && ch.PLEN > fullHLEN {
		return invalidField(nvme.OffsetFlags, fmt.Sprintf("%v with data but no DDGSTF", ch.Type))
	}
	return violation{}
}

func validatePDO(ch nvme.CommonHeader, fullHLEN uint32, p *headerParams) violation {
	pdo := uint32(ch.PDO)
	if ch.Type == nvme.PDUH2CTermReq {
		if pdo != 0 {
			return invalidField(nvme.OffsetPDO, fmt.Sprintf("%v PDO %d", ch.Type, pdo))
		}
		return violation{}
	}
	// Permit PDO 0 if there is no data (FreeBSD).
	if ch.PLEN == fullHLEN && pdo == 0 {
		return violation{}
	}
	if pdo < fullHLEN || pdo > ch.PLEN {
		return invalidField(nvme.OffsetPDO, fmt.Sprintf("%v PDO %d outside [%d, PLEN %d]", ch.Type, pdo, fullHLEN, ch.PLEN))
	}
	if p.cpda != 0 && pdo%((uint32(p.cpda)+1)*4) != 0 {
		return invalidField(nvme.OffsetPDO, fmt.Sprintf("%v PDO %d not aligned to CPDA %d", ch.Type, pdo, p.cpda))
	}
	return violation{}
}

func layoutFromPLEN(ch nvme.CommonHeader, fullHLEN uint32, p *headerParams) (pduLayout, violation) {
	if ch.PLEN < uint32(ch.HLEN) {
		return pduLayout{}, invalidField(nvme.OffsetPLEN, fmt.Sprintf("%v PLEN %d < HLEN", ch.Type, ch.PLEN))
	}
	l := pduLayout{
		pshLen: int(ch.HLEN) - nvme.CommonHeaderSize,
		hdgst:  ch.Flags&nvme.FlagHDGSTF != 0,
		ddgst:  ch.Flags&nvme.FlagDDGSTF != 0,
	}
	if ch.Type == nvme.PDUH2CTermReq {
		l.dataLen = ch.PLEN - uint32(ch.HLEN) // the offending header, at most 128 bytes
		return l, violation{}
	}
	if ch.PLEN != fullHLEN {
		l.dataLen = ch.PLEN - uint32(ch.PDO)
		l.padLen = int(uint32(ch.PDO) - fullHLEN)
	}
	if l.ddgst {
		if l.dataLen <= nvme.DigestSize {
			return pduLayout{}, invalidField(nvme.OffsetPLEN, fmt.Sprintf("%v PLEN %d too short for a data digest", ch.Type, ch.PLEN))
		}
		l.dataLen -= nvme.DigestSize
	}
	switch {
	case ch.Type == nvme.PDUCapsuleCmd && l.dataLen > p.maxICD:
		return pduLayout{}, violation{fes: nvme.FESDataLimitExceeded,
			reason: fmt.Sprintf("in-capsule data %d > %d", l.dataLen, p.maxICD)}
	case ch.Type == nvme.PDUH2CData && l.dataLen > p.maxH2CData:
		return pduLayout{}, violation{fes: nvme.FESDataLimitExceeded,
			reason: fmt.Sprintf("H2CData data %d > MAXH2CDATA %d", l.dataLen, p.maxH2CData)}
	}
	return l, violation{}
}
