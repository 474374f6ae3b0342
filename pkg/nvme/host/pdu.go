package host

import (
	"encoding/binary"
	"fmt"

	"basalt/pkg/nvme"
)

// digests records what ICReq/ICResp negotiated for a connection.
type digests struct {
	header bool
	data   bool
}

func (d digests) headerSize() int {
	if d.header {
		return nvme.DigestSize
	}
	return 0
}

func (d digests) dataSize() int {
	if d.data {
		return nvme.DigestSize
	}
	return 0
}

// icreqDGST is the DGST byte of ICReq.
func (d digests) icreqDGST() uint8 {
	var v uint8
	if d.header {
		v |= nvme.DigestHeader
	}
	if d.data {
		v |= nvme.DigestData
	}
	return v
}

// checkICResp applies the Linux host's ICResp checks (nvme_tcp_init_connection)
// to a complete 128-byte PDU.
func checkICResp(b []byte, want digests) (nvme.ICResp, error) {
	ch := nvme.DecodeCommonHeader(b)
	if ch.Type != nvme.PDUICResp {
		return nvme.ICResp{}, protocolErrorf(0, "expected ICResp, got %v", ch.Type)
	}
	if ch.HLEN != nvme.ICReqSize || ch.PLEN != nvme.ICReqSize {
		return nvme.ICResp{}, protocolErrorf(0, "ICResp HLEN %d PLEN %d, both must be 128", ch.HLEN, ch.PLEN)
	}
	r := nvme.DecodeICResp(b)
	switch {
	case r.PFV != 0:
		return r, incompatiblef("ICResp PFV %d, the host speaks PFV 0 (\"bad pfv returned\")", r.PFV)
	case r.CPDA != 0:
		return r, incompatiblef("ICResp CPDA %d, the Linux host accepts only 0 (\"unsupported cpda returned\")", r.CPDA)
	case r.DGST&nvme.DigestHeader != 0 != want.header:
		return r, incompatiblef("ICResp header digest bit %v, requested %v (\"header digest mismatch\")",
			r.DGST&nvme.DigestHeader != 0, want.header)
	case r.DGST&nvme.DigestData != 0 != want.data:
		return r, incompatiblef("ICResp data digest bit %v, requested %v (\"data digest mismatch\")",
			r.DGST&nvme.DigestData != 0, want.data)
	case r.MAXH2CDATA%4 != 0 || r.MAXH2CDATA < nvme.MinMaxH2CData:
		return r, incompatiblef("ICResp MAXH2CDATA %d must be >= %d and a multiple of 4 (\"invalid maxh2cdata\")",
			r.MAXH2CDATA, nvme.MinMaxH2CData)
	}
	return r, nil
}

// Bounds of a C2HTermReq's PLEN (the Linux host ignores malformed ones).
const (
	termReqPLENMin = nvme.TermReqHLEN
	termReqPLENMax = nvme.TermReqHLEN + nvme.TermReqMaxData
)

// checkHeader validates the common header of a controller-to-host PDU on an
// established connection, lowest byte offset first (as FreeBSD's
// nvmf_tcp_validate_pdu_header does), with the Linux host's rules: HLEN 24
// for every type, digest flags exactly as negotiated, SUCCESS only with
// LAST_PDU, and, because the host sent HPDA 0, data right after the header.
// It returns a *ProtocolError or nil.
func checkHeader(qid uint16, ch nvme.CommonHeader, d digests) error {
	switch ch.Type {
	case nvme.PDUCapsuleResp, nvme.PDUC2HData, nvme.PDUR2T, nvme.PDUC2HTermReq:
	default:
		return protocolErrorf(qid, "unsupported PDU type %v", ch.Type)
	}
	if ch.Type == nvme.PDUC2HTermReq {
		if ch.HLEN != nvme.TermReqHLEN || ch.PLEN < termReqPLENMin || ch.PLEN > termReqPLENMax {
			return protocolErrorf(qid, "malformed C2HTermReq (HLEN %d, PLEN %d)", ch.HLEN, ch.PLEN)
		}
		return nil
	}
	allowed := nvme.FlagHDGSTF
	if ch.Type == nvme.PDUC2HData {
		allowed |= nvme.FlagDDGSTF | nvme.FlagLastPDU | nvme.FlagSuccess
	}
	hd := d.headerSize()
	switch {
	case ch.Flags&^allowed != 0:
		return protocolErrorf(qid, "%v with invalid flags %#02x", ch.Type, ch.Flags)
	case ch.Flags&nvme.FlagHDGSTF != 0 != d.header:
		return protocolErrorf(qid, "%v header digest flag %v, negotiated %v", ch.Type, ch.Flags&nvme.FlagHDGSTF != 0, d.header)
	case ch.Type == nvme.PDUC2HData && ch.Flags&nvme.FlagDDGSTF != 0 != d.data:
		return protocolErrorf(qid, "C2HData data digest flag %v, negotiated %v", ch.Flags&nvme.FlagDDGSTF != 0, d.data)
	case ch.Flags&nvme.FlagSuccess != 0 && ch.Flags&nvme.FlagLastPDU == 0:
		return protocolErrorf(qid, "C2HData SUCCESS set but not LAST_PDU")
	case ch.HLEN != nvme.DataHLEN:
		return protocolErrorf(qid, "%v has unexpected header length %d", ch.Type, ch.HLEN)
	}
	if ch.Type != nvme.PDUC2HData {
		if ch.PDO != 0 || ch.PLEN != uint32(nvme.DataHLEN+hd) {
			return protocolErrorf(qid, "%v PDO %d PLEN %d, want 0 and %d", ch.Type, ch.PDO, ch.PLEN, nvme.DataHLEN+hd)
		}
		return nil
	}
	pdo := nvme.DataHLEN + hd
	if int(ch.PDO) != pdo {
		return protocolErrorf(qid, "C2HData PDO %d, want %d (HPDA 0: no padding)", ch.PDO, pdo)
	}
	if ch.PLEN <= uint32(pdo+d.dataSize()) {
		return protocolErrorf(qid, "C2HData PLEN %d carries no data", ch.PLEN)
	}
	return nil
}

// encodeCapsule writes the CapsuleCmd PDU header (CH, SQE, optional HDGST)
// for cmd with icd bytes of in-capsule data into b and returns its length
// (NVMe/TCP 1.0 §3.6.2.5; Linux nvme_tcp_setup_cmd_pdu).
func encodeCapsule(b []byte, cmd *nvme.Command, icd int, d digests) int {
	hd := d.headerSize()
	ch := nvme.CommonHeader{Type: nvme.PDUCapsuleCmd, HLEN: nvme.CapsuleCmdHLEN}
	ch.PLEN = uint32(nvme.CapsuleCmdHLEN + hd)
	if d.header {
		ch.Flags |= nvme.FlagHDGSTF
	}
	if icd > 0 {
		ch.PDO = uint8(nvme.CapsuleCmdHLEN + hd)
		ch.PLEN += uint32(icd + d.dataSize())
		if d.data {
			ch.Flags |= nvme.FlagDDGSTF
		}
	}
	ch.Encode(b)
	copy(b[nvme.CommonHeaderSize:nvme.CapsuleCmdHLEN], cmd[:])
	if d.header {
		binary.LittleEndian.PutUint32(b[nvme.CapsuleCmdHLEN:], nvme.Digest(b[:nvme.CapsuleCmdHLEN]))
	}
	return nvme.CapsuleCmdHLEN + hd
}

// encodeH2CData writes an H2CData PDU header for n data bytes (NVMe/TCP 1.0
// §3.6.2.6; Linux nvme_tcp_setup_h2c_data_pdu) and returns its length.
func encodeH2CData(b []byte, dh nvme.DataHeader, last bool, d digests) int {
	hd := d.headerSize()
	ch := nvme.CommonHeader{Type: nvme.PDUH2CData, HLEN: nvme.DataHLEN, PDO: uint8(nvme.DataHLEN + hd)}
	ch.PLEN = uint32(nvme.DataHLEN+hd+d.dataSize()) + dh.DATAL
	if d.header {
		ch.Flags |= nvme.FlagHDGSTF
	}
	if d.data {
		ch.Flags |= nvme.FlagDDGSTF
	}
	if last {
		ch.Flags |= nvme.FlagLastPDU
	}
	ch.Encode(b)
	dh.Encode(b)
	if d.header {
		binary.LittleEndian.PutUint32(b[nvme.DataHLEN:], nvme.Digest(b[:nvme.DataHLEN]))
	}
	return nvme.DataHLEN + hd
}

// CID layout (like Linux nvme_cid): bits 15:12 a generation counter bumped
// each time a slot is reused, bits 11:0 the slot index. A completion whose
// generation does not match the slot's is stale or forged.
const (
	cidIndexMask = 0x0FFF
	cidGenShift  = 12
	cidGenMask   = 0xF
)

func makeCID(gen uint8, index uint16) uint16 {
	return uint16(gen&cidGenMask)<<cidGenShift | index&cidIndexMask
}

// setSGL sets PSDT=SGL and the single data descriptor the Linux host uses.
func setSGL(cmd *nvme.Command, length int, inCapsule bool) {
	cmd.SetFlags(cmd.Flags()&^0xC0 | nvme.PSDTSGL)
	if inCapsule {
		cmd.SetSGL(0, uint32(length), nvme.SGLDataBlockOffset)
		return
	}
	cmd.SetSGL(0, uint32(length), nvme.SGLTransportDataBlock)
}

func describePDU(ch nvme.CommonHeader) string {
	return fmt.Sprintf("%v flags %#02x HLEN %d PDO %d PLEN %d", ch.Type, ch.Flags, ch.HLEN, ch.PDO, ch.PLEN)
}
