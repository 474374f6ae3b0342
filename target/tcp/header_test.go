package tcp

import (
	"testing"

	"basalt/pkg/nvme"
)

// Header validation follows FreeBSD's nvmf_tcp_validate_pdu_header (the
// clearest transcription of NVMe/TCP 1.0 §3.6.2 found): every field violation
// must produce the exact FES and FEI, lowest field first.

func ch(t nvme.PDUType, flags, hlen, pdo uint8, plen uint32) nvme.CommonHeader {
	return nvme.CommonHeader{Type: t, Flags: flags, HLEN: hlen, PDO: pdo, PLEN: plen}
}

const (
	hd = nvme.FlagHDGSTF
	dd = nvme.FlagDDGSTF
	lp = nvme.FlagLastPDU
)

func TestValidateHeaderReportsLowestBadFieldFirst(t *testing.T) {
	plain := headerParams{maxICD: 8192, maxH2CData: 131072}
	digests := headerParams{hdgst: true, ddgst: true, maxICD: 8192, maxH2CData: 131072}
	aligned := headerParams{hdgst: true, cpda: 1, maxICD: 8192, maxH2CData: 131072}
	tests := []struct {
		name string
		p    headerParams
		ch   nvme.CommonHeader
		fes  nvme.FES
		fei  uint32
		// for valid headers
		dataLen uint32
		padLen  int
	}{
		// NVMe/TCP 1.0 §3.6.2: PDU type bit 0 is the direction.
		{name: "CapsuleResp to controller", p: plain, ch: ch(nvme.PDUCapsuleResp, 0, 24, 0, 24), fes: 1, fei: 0},
		{name: "ICResp to controller", p: plain, ch: ch(nvme.PDUICResp, 0, 128, 0, 128), fes: 1, fei: 0},
		{name: "C2HData to controller", p: plain, ch: ch(nvme.PDUC2HData, 0, 24, 0, 24), fes: 1, fei: 0},
		{name: "R2T to controller", p: plain, ch: ch(nvme.PDUR2T, 0, 24, 0, 24), fes: 1, fei: 0},
		{name: "unused type 0x08", p: plain, ch: ch(0x08, 0, 24, 0, 24), fes: 1, fei: 0},
		{name: "unknown type 0x0a", p: plain, ch: ch(0x0a, 0, 24, 0, 24), fes: 1, fei: 0},
		// NVMe/TCP 1.0 §3.6.2.2: ICReq only as the first PDU (SPDK: sequence error).
		{name: "second ICReq", p: plain, ch: ch(nvme.PDUICReq, 0, 128, 0, 128), fes: 2, fei: 0},
		// Flags allowed per type: LAST_PDU only on data PDUs, SUCCESS only
		// on C2HData, no digest flags on TermReq, no reserved bits.
		{name: "CapsuleCmd LAST_PDU", p: plain, ch: ch(nvme.PDUCapsuleCmd, lp, 72, 0, 72), fes: 1, fei: 1},
		{name: "H2CData SUCCESS", p: plain, ch: ch(nvme.PDUH2CData, nvme.FlagSuccess, 24, 0, 24), fes: 1, fei: 1},
		{name: "H2CTermReq HDGSTF", p: digests, ch: ch(nvme.PDUH2CTermReq, hd, 24, 0, 24), fes: 1, fei: 1},
		{name: "reserved flag bit 7", p: plain, ch: ch(nvme.PDUCapsuleCmd, 0x80, 72, 0, 72), fes: 1, fei: 1},
		// §3.6.3: digests present iff negotiated.
		{name: "HDGSTF missing", p: digests, ch: ch(nvme.PDUCapsuleCmd, 0, 72, 0, 72), fes: 1, fei: 1},
		{name: "HDGSTF not negotiated", p: plain, ch: ch(nvme.PDUCapsuleCmd, hd, 72, 0, 76), fes: 1, fei: 1},
		{name: "DDGSTF not negotiated", p: plain, ch: ch(nvme.PDUCapsuleCmd, dd, 72, 72, 72+512+4), fes: 1, fei: 1},
		{name: "DDGSTF missing with data", p: digests, ch: ch(nvme.PDUH2CData, hd|lp, 24, 28, 28+512), fes: 1, fei: 1},
		{name: "DDGSTF absent without data is fine", p: digests, ch: ch(nvme.PDUCapsuleCmd, hd, 72, 0, 76)},
		{name: "lowest field first: flags before HLEN", p: plain, ch: ch(nvme.PDUCapsuleCmd, lp, 24, 0, 24), fes: 1, fei: 1},
		// HLEN is fixed per type.
		{name: "CapsuleCmd HLEN 24", p: plain, ch: ch(nvme.PDUCapsuleCmd, 0, 24, 0, 72), fes: 1, fei: 2},
		{name: "H2CData HLEN 72", p: plain, ch: ch(nvme.PDUH2CData, lp, 72, 0, 72), fes: 1, fei: 2},
		{name: "H2CTermReq HLEN 128", p: plain, ch: ch(nvme.PDUH2CTermReq, 0, 128, 0, 128), fes: 1, fei: 2},
		// PDO: 0 only without data; else >= HLEN+HDGST and <= PLEN.
		{name: "data with PDO 0", p: plain, ch: ch(nvme.PDUCapsuleCmd, 0, 72, 0, 72+512), fes: 1, fei: 3},
		{name: "PDO inside header", p: plain, ch: ch(nvme.PDUCapsuleCmd, 0, 72, 68, 72+512), fes: 1, fei: 3},
		{name: "PDO inside header digest", p: digests, ch: ch(nvme.PDUCapsuleCmd, hd|dd, 72, 72, 76+512+4), fes: 1, fei: 3},
		{name: "PDO beyond PLEN", p: plain, ch: ch(nvme.PDUH2CData, lp, 24, 200, 100), fes: 1, fei: 3},
		{name: "PLEN below HLEN is caught at PDO", p: plain, ch: ch(nvme.PDUCapsuleCmd, 0, 72, 0, 40), fes: 1, fei: 3},
		{name: "TermReq with PDO", p: plain, ch: ch(nvme.PDUH2CTermReq, 0, 24, 24, 32), fes: 1, fei: 3},
		{name: "PDO misaligned for CPDA 1", p: aligned, ch: ch(nvme.PDUCapsuleCmd, hd, 72, 76, 76+512), fes: 1, fei: 3},
		{name: "PDO aligned for CPDA 1", p: aligned, ch: ch(nvme.PDUCapsuleCmd, hd, 72, 80, 80+512), dataLen: 512, padLen: 4},
		// PLEN must leave room for a data digest.
		{name: "DDGSTF with only a digest", p: digests, ch: ch(nvme.PDUCapsuleCmd, hd|dd, 72, 76, 80), fes: 1, fei: 4},
		{name: "DDGSTF without data", p: digests, ch: ch(nvme.PDUCapsuleCmd, hd|dd, 72, 0, 76), fes: 1, fei: 4},
		// Data limits: in-capsule data and MAXH2CDATA (FES 05h).
		{name: "ICD above queue limit", p: plain, ch: ch(nvme.PDUCapsuleCmd, 0, 72, 72, 72+8192+1), fes: 5, fei: 0},
		{name: "ICD at queue limit", p: plain, ch: ch(nvme.PDUCapsuleCmd, 0, 72, 72, 72+8192), dataLen: 8192},
		{name: "H2CData above MAXH2CDATA", p: plain, ch: ch(nvme.PDUH2CData, lp, 24, 24, 24+131072+4), fes: 5, fei: 0},
		{name: "H2CData at MAXH2CDATA", p: digests, ch: ch(nvme.PDUH2CData, hd|dd|lp, 24, 28, 28+131072+4), dataLen: 131072},
		// Valid PDUs.
		{name: "CapsuleCmd without data", p: plain, ch: ch(nvme.PDUCapsuleCmd, 0, 72, 0, 72)},
		{name: "CapsuleCmd with data", p: plain, ch: ch(nvme.PDUCapsuleCmd, 0, 72, 72, 72+1024), dataLen: 1024},
		{name: "CapsuleCmd with digests", p: digests, ch: ch(nvme.PDUCapsuleCmd, hd|dd, 72, 76, 76+1024+4), dataLen: 1024},
		{name: "H2CData with padding", p: plain, ch: ch(nvme.PDUH2CData, lp, 24, 32, 32+100), dataLen: 100, padLen: 8},
		{name: "H2CData with PDO at PLEN", p: plain, ch: ch(nvme.PDUH2CData, lp, 24, 32, 32), padLen: 8},
		{name: "H2CTermReq with offending header", p: digests, ch: ch(nvme.PDUH2CTermReq, 0, 24, 0, 24+72), dataLen: 72},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, v := validateHeader(tt.ch, &tt.p)
			if v.fes != tt.fes || v.fei != tt.fei || v.disconnect {
				t.Fatalf("got FES %#x FEI %d disconnect %v (%s), want FES %#x FEI %d",
					uint16(v.fes), v.fei, v.disconnect, v.reason, uint16(tt.fes), tt.fei)
			}
			if v.ok() && (l.dataLen != tt.dataLen || l.padLen != tt.padLen) {
				t.Fatalf("layout %+v, want dataLen %d padLen %d", l, tt.dataLen, tt.padLen)
			}
		})
	}
}

// FreeBSD "7.4.7": termination requests with invalid PDU lengths end the
// connection without a TermReq.
func TestValidateHeaderBadTermReqLengthDisconnects(t *testing.T) {
	p := headerParams{maxICD: 8192, maxH2CData: 4096}
	for _, plen := range []uint32{0, 23, 153, 1 << 20} {
		if _, v := validateHeader(ch(nvme.PDUH2CTermReq, 0, 24, 0, plen), &p); !v.disconnect {
			t.Errorf("PLEN %d: got %+v, want disconnect", plen, v)
		}
	}
	for _, plen := range []uint32{24, 152} {
		if _, v := validateHeader(ch(nvme.PDUH2CTermReq, 0, 24, 0, plen), &p); !v.ok() {
			t.Errorf("PLEN %d: got %+v, want ok", plen, v)
		}
	}
}

// NVMe/TCP 1.0 §3.6.2.2: the first PDU is an ICReq with HLEN = PLEN = 128,
// no flags and PDO 0; anything else first is a PDU sequence error (SPDK).
func TestValidateICReqHeader(t *testing.T) {
	tests := []struct {
		name string
		ch   nvme.CommonHeader
		fes  nvme.FES
		fei  uint32
	}{
		{"valid", ch(nvme.PDUICReq, 0, 128, 0, 128), 0, 0},
		{"CapsuleCmd before ICReq", ch(nvme.PDUCapsuleCmd, 0, 72, 0, 72), 2, 0},
		{"ICResp before ICReq", ch(nvme.PDUICResp, 0, 128, 0, 128), 2, 0},
		{"flags", ch(nvme.PDUICReq, hd, 128, 0, 128), 1, 1},
		{"HLEN", ch(nvme.PDUICReq, 0, 72, 0, 128), 1, 2},
		{"PDO", ch(nvme.PDUICReq, 0, 128, 128, 128), 1, 3},
		{"PLEN", ch(nvme.PDUICReq, 0, 128, 0, 132), 1, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := validateICReqHeader(tt.ch)
			if v.fes != tt.fes || v.fei != tt.fei {
				t.Fatalf("got FES %#x FEI %d (%s), want %#x %d", uint16(v.fes), v.fei, v.reason, uint16(tt.fes), tt.fei)
			}
		})
	}
}

// NVMe/TCP 1.0 §3.6.2.2: PFV 0 only (SPDK nvmf_tcp_icreq_handle), HPDA 0..31,
// and digests the options refuse are an unsupported parameter at DGST.
func TestValidateICReq(t *testing.T) {
	open := &Options{}
	strict := &Options{DisableHeaderDigest: true, DisableDataDigest: true}
	tests := []struct {
		name string
		r    nvme.ICReq
		o    *Options
		fes  nvme.FES
		fei  uint32
	}{
		{"valid", nvme.ICReq{DGST: 3, MAXR2T: 7, HPDA: 31}, open, 0, 0},
		{"PFV 1", nvme.ICReq{PFV: 1}, open, 1, 8},
		{"HPDA 32", nvme.ICReq{HPDA: 32}, open, 1, 10},
		{"header digest refused", nvme.ICReq{DGST: nvme.DigestHeader}, strict, 6, 11},
		{"data digest refused", nvme.ICReq{DGST: nvme.DigestData}, strict, 6, 11},
		{"no digests asked", nvme.ICReq{}, strict, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := validateICReq(tt.r, tt.o)
			if v.fes != tt.fes || v.fei != tt.fei {
				t.Fatalf("got FES %#x FEI %d, want %#x %d", uint16(v.fes), v.fei, uint16(tt.fes), tt.fei)
			}
		})
	}
}

func TestRecvStateString(t *testing.T) {
	for s, want := range map[recvState]string{recvPDU: "recvPDU", recvData: "recvData",
		recvDDGST: "recvDDGST", recvErr: "recvErr", 9: "recvState(9)"} {
		if got := s.String(); got != want {
			t.Errorf("%d: %q, want %q", s, got, want)
		}
	}
}
