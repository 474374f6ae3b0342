package tcp

import (
	"bytes"
	"testing"

	"basalt/pkg/nvme"
)

// Data movement: R2T/H2CData (NVMe/TCP 1.0 §3.6.2.6, §3.6.2.8) and C2HData
// (§3.6.2.7).

// NVMe/TCP 1.0 §3.6.2.8: one R2T covers the whole transfer (as nvmet and
// SPDK send it) and the host answers with several H2CData PDUs of at most
// MAXH2CDATA bytes, the last with LAST_PDU.
func TestR2TAcceptsManyH2CDataPDUs(t *testing.T) {
	checkNoGoroutineLeaks(t)
	opts := testOptions()
	opts.MAXH2CDATA = 4096
	s := startServer(t, opts, func(c *fakeCore) { c.async = true })
	h, _ := s.dial(t)
	resp := h.icreq(0)
	if resp.MAXH2CDATA != 4096 {
		t.Fatalf("MAXH2CDATA %d", resp.MAXH2CDATA)
	}
	h.connect(1, 63, 0)
	data := pattern(256<<10, 9)
	h.writeR2T(0, data, 4096) // 64 H2CData PDUs for one R2T
	if got := h.read(0, len(data)/fakeBlockSize); !bytes.Equal(got, data) {
		t.Fatalf("read back differs")
	}
	// Uneven split, and two writes interleaving their R2Ts.
	a := rwCmd(h, nvme.IOWrite, 1000, 24, nvme.SGLTransportDataBlock)
	b := rwCmd(h, nvme.IOWrite, 2000, 24, nvme.SGLTransportDataBlock)
	h.sendCapsule(&a, nil)
	h.sendCapsule(&b, nil)
	ra, rb := h.expectR2T(a.CID()), h.expectR2T(b.CID())
	if ra.TTAG == rb.TTAG {
		t.Fatalf("two outstanding R2Ts share TTAG %d", ra.TTAG)
	}
	da, db := pattern(12288, 1), pattern(12288, 2)
	// Alternate PDUs of the two transfers, b split unevenly.
	var buf bytes.Buffer
	cutsA, cutsB := []int{0, 4096, 8192, 12288}, []int{0, 1000, 5096, 9192, 12288}
	for i := 0; i < len(cutsB)-1; i++ {
		if i < len(cutsA)-1 {
			buf.Write(h.h2cData(a.CID(), ra.TTAG, uint32(cutsA[i]), da[cutsA[i]:cutsA[i+1]], i == len(cutsA)-2))
		}
		buf.Write(h.h2cData(b.CID(), rb.TTAG, uint32(cutsB[i]), db[cutsB[i]:cutsB[i+1]], i == len(cutsB)-2))
	}
	h.write(buf.Bytes())
	for range 2 {
		p := h.readPDU()
		if cpl := nvme.DecodeCompletion(p.hdr[8:]); p.ch.Type != nvme.PDUCapsuleResp || !cpl.Status.Success() {
			t.Fatalf("got %v %+v", p.ch.Type, cpl)
		}
	}
	if !bytes.Equal(h.read(1000, 24), da) || !bytes.Equal(h.read(2000, 24), db) {
		t.Fatalf("interleaved writes read back wrong")
	}
}

// SPDK nvmf_tcp_h2c_data_hdr_handle and FreeBSD nvmf_tcp_handle_h2c_data:
// each H2CData must name an R2T in progress and continue it exactly.
func TestH2CDataViolationsTerminate(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	const n = 8192
	tests := []struct {
		name string
		// pdu builds the bad PDU from the R2T the target sent.
		pdu func(h *testHost, cid uint16, r2t nvme.DataHeader) []byte
		fes nvme.FES
		fei uint32
	}{
		{"unknown TTAG", func(h *testHost, cid uint16, r nvme.DataHeader) []byte {
			return h.h2cData(cid, 60000, 0, make([]byte, n), true)
		}, nvme.FESPDUSequenceError, nvme.OffsetTTAG},
		{"TTAG not waiting for data", func(h *testHost, cid uint16, r nvme.DataHeader) []byte {
			idle := uint16(0) // the Connect's slot, free again
			if r.TTAG == 0 {
				idle = 1
			}
			return h.h2cData(cid, idle, 0, make([]byte, n), true)
		}, nvme.FESInvalidHeaderField, nvme.OffsetTTAG},
		{"wrong CCCID", func(h *testHost, cid uint16, r nvme.DataHeader) []byte {
			return h.h2cData(cid+1, r.TTAG, 0, make([]byte, n), true)
		}, nvme.FESPDUSequenceError, nvme.OffsetCCCID},
		{"DATAL differs from PDU data", func(h *testHost, cid uint16, r nvme.DataHeader) []byte {
			b := h.h2cData(cid, r.TTAG, 0, make([]byte, 4096), false)
			b[nvme.OffsetDATAL+1]++ // DATAL 4352, 4096 bytes in the PDU
			return b
		}, nvme.FESInvalidHeaderField, nvme.OffsetDATAL},
		{"DATAO skips ahead", func(h *testHost, cid uint16, r nvme.DataHeader) []byte {
			return h.h2cData(cid, r.TTAG, 4096, make([]byte, 4096), true)
		}, nvme.FESDataOutOfRange, 0},
		{"data beyond the transfer", func(h *testHost, cid uint16, r nvme.DataHeader) []byte {
			return h.h2cData(cid, r.TTAG, 0, make([]byte, n+512), true)
		}, nvme.FESDataOutOfRange, 0},
		{"LAST_PDU too early", func(h *testHost, cid uint16, r nvme.DataHeader) []byte {
			return h.h2cData(cid, r.TTAG, 0, make([]byte, 4096), true)
		}, nvme.FESPDUSequenceError, 0},
		{"LAST_PDU missing", func(h *testHost, cid uint16, r nvme.DataHeader) []byte {
			return h.h2cData(cid, r.TTAG, 0, make([]byte, n), false)
		}, nvme.FESPDUSequenceError, 0},
		{"H2CData without any R2T", func(h *testHost, cid uint16, r nvme.DataHeader) []byte {
			return h.h2cData(cid, 0, 0, make([]byte, 512), true)
		}, nvme.FESInvalidHeaderField, nvme.OffsetTTAG},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, core := s.dial(t)
			h.icreq(0)
			h.connect(1, 31, 0)
			var cid uint16
			var r2t nvme.DataHeader
			if tt.name != "H2CData without any R2T" {
				c := rwCmd(h, nvme.IOWrite, 0, n/fakeBlockSize, nvme.SGLTransportDataBlock)
				h.sendCapsule(&c, nil)
				cid, r2t = c.CID(), h.expectR2T(c.CID())
			}
			h.write(tt.pdu(h, cid, r2t))
			h.expectTermReq(tt.fes, tt.fei)
			waitFor(t, func() bool { return core.released.Load() == 1 })
			if got := core.executed.Load(); got != 1 {
				t.Fatalf("executed %d, want only the Connect", got)
			}
		})
	}
}

// NVMe/TCP 1.0 §3.6.2.7: C2HData PDUs have HLEN 24, contiguous in-order
// DATAO, LAST_PDU on the last; without SQ flow control disabled a
// CapsuleResp follows.
func TestC2HDataIsSplitInOrder(t *testing.T) {
	checkNoGoroutineLeaks(t)
	opts := testOptions()
	opts.C2HDataSize = 4096
	s := startServer(t, opts, nil)
	h, _ := s.dial(t)
	h.icreq(nvme.DigestHeader | nvme.DigestData)
	h.connect(1, 31, 0)
	data := pattern(18*512, 3)
	h.writeR2T(50, data, 8192)
	c := rwCmd(h, nvme.IORead, 50, 18, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	var sizes []int
	var got []byte
	for {
		p := h.readPDU()
		if p.ch.Type != nvme.PDUC2HData || p.ch.HLEN != 24 || p.ch.PDO != 28 {
			t.Fatalf("got %+v", p.ch)
		}
		d := nvme.DecodeDataHeader(p.hdr)
		if int(d.DATAO) != len(got) || d.CCCID != c.CID() || d.TTAG != 0 {
			t.Fatalf("C2HData %+v after %d bytes", d, len(got))
		}
		if p.ch.Flags&nvme.FlagSuccess != 0 {
			t.Fatalf("SUCCESS without DISSQFC")
		}
		got = append(got, p.data...)
		sizes = append(sizes, len(p.data))
		if p.ch.Flags&nvme.FlagLastPDU != 0 {
			break
		}
	}
	if want := []int{4096, 4096, 1024}; !equalInts(sizes, want) || !bytes.Equal(got, data) {
		t.Fatalf("PDU sizes %v, want %v; data equal %v", sizes, want, bytes.Equal(got, data))
	}
	if cpl := h.expectResp(c.CID()); !cpl.Status.Success() || cpl.SQHD != 7 {
		t.Fatalf("completion %+v", cpl)
	}
}

// NVMe/TCP 1.0 §3.6.2.7: SUCCESS (with LAST_PDU) replaces the CapsuleResp
// only when the Connect disabled SQ flow control and DW0/DW1 are zero
// (SPDK _nvmf_tcp_send_c2h_data; nvmet with sqhd_disabled).
func TestC2HSuccessFlag(t *testing.T) {
	checkNoGoroutineLeaks(t)
	tests := []struct {
		name    string
		cattr   uint8
		disable bool
		op      nvme.Opcode
		success bool
	}{
		{"flow control disabled", nvme.CATTRDisableSQFlow, false, nvme.IORead, true},
		{"flow control enabled", 0, false, nvme.IORead, false},
		{"DW0 not zero", nvme.CATTRDisableSQFlow, false, opIdentifyDW0, false},
		{"option off", nvme.CATTRDisableSQFlow, true, nvme.IORead, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions()
			opts.DisableC2HSuccess = tt.disable
			s := startServer(t, opts, nil)
			h, _ := s.dial(t)
			h.icreq(0)
			if cpl := h.connect(1, 31, tt.cattr); tt.cattr != 0 && cpl.SQHD != 0xFFFF {
				t.Fatalf("Connect SQHD %#x", cpl.SQHD)
			}
			c := rwCmd(h, nvme.IORead, 0, 8, nvme.SGLTransportDataBlock)
			if tt.op == opIdentifyDW0 {
				c = h.cmd(opIdentifyDW0, nvme.IdentifySize, nvme.SGLTransportDataBlock)
			}
			h.sendCapsule(&c, nil)
			data, success := h.readData(c.CID())
			if len(data) != 4096 || success != tt.success {
				t.Fatalf("got %d bytes, SUCCESS %v; want 4096, %v", len(data), success, tt.success)
			}
			if !success {
				cpl := h.expectResp(c.CID())
				if tt.op == opIdentifyDW0 && cpl.DW0 != 1 {
					t.Fatalf("DW0 %d", cpl.DW0)
				}
			}
			// The next response must be for the next command: nothing
			// extra was sent.
			f := h.cmd(nvme.IOFlush, 0, nvme.SGLTransportDataBlock)
			h.sendCapsule(&f, nil)
			h.expectResp(f.CID())
		})
	}
}

// A failed read sends no data, only the CapsuleResp with the status.
func TestFailedReadSendsNoData(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, _ := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, nvme.CATTRDisableSQFlow)
	c := rwCmd(h, nvme.IORead, fakeDiskSize/fakeBlockSize, 1, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	if cpl := h.expectResp(c.CID()); cpl.Status != nvme.StatusLBAOutOfRange {
		t.Fatalf("status %v", cpl.Status)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// NVMe/TCP 1.0 §3.6.2.2: C2HData PDO is a multiple of (HPDA+1) dwords, the
// gap zero-filled (the Linux host sends HPDA 0; others may not).
func TestC2HDataHonoursHPDA(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, _ := s.dial(t)
	var b [nvme.ICReqSize]byte
	nvme.ICReq{HPDA: 7, DGST: nvme.DigestHeader}.Encode(b[:]) // 32-byte alignment
	h.write(b[:])
	if p := h.readPDU(); p.ch.Type != nvme.PDUICResp || nvme.DecodeICResp(p.hdr).CPDA != 0 {
		t.Fatalf("ICResp %+v", p.ch)
	}
	h.hdgst = true
	h.connect(1, 31, 0)
	c := rwCmd(h, nvme.IORead, 0, 1, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	var chb [nvme.CommonHeaderSize]byte
	if err := h.readFull(chb[:]); err != nil {
		t.Fatal(err)
	}
	ch := nvme.DecodeCommonHeader(chb[:])
	if ch.Type != nvme.PDUC2HData || ch.PDO != 32 || ch.PLEN != 32+512 {
		t.Fatalf("C2HData header %+v, want PDO 32", ch)
	}
	rest := make([]byte, ch.PLEN-nvme.CommonHeaderSize)
	if err := h.readFull(rest); err != nil {
		t.Fatal(err)
	}
	if pad := rest[nvme.DataHLEN+nvme.DigestSize-8 : 32-8]; !bytes.Equal(pad, make([]byte, 4)) {
		t.Fatalf("padding %x not zero", pad)
	}
	h.expectResp(c.CID())
}
