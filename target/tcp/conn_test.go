package tcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"basalt/pkg/nvme"
)

// Connection-level tests: a fake core behind a real loopback listener, a
// raw-PDU host in front. Each test states the rule it checks.

// NVMe/TCP 1.0 §3.6.2.3: ICResp has PFV 0, CPDA 0 (the Linux host rejects
// anything else), the digest bits echoed exactly, and MAXH2CDATA >= 4096,
// a multiple of 4.
func TestICRespEchoesDigestsWithCPDAZero(t *testing.T) {
	checkNoGoroutineLeaks(t)
	opts := testOptions()
	opts.MAXH2CDATA = 64 << 10
	s := startServer(t, opts, nil)
	for dgst := uint8(0); dgst < 4; dgst++ {
		t.Run(fmt.Sprintf("dgst=%d", dgst), func(t *testing.T) {
			h, _ := s.dial(t)
			var b [nvme.ICReqSize]byte
			nvme.ICReq{DGST: dgst | 0xF0, HPDA: 0, MAXR2T: 3}.Encode(b[:])
			h.write(b[:])
			p := h.readPDU()
			if p.ch != (nvme.CommonHeader{Type: nvme.PDUICResp, HLEN: 128, PLEN: 128}) {
				t.Fatalf("ICResp header %+v", p.ch)
			}
			resp := nvme.DecodeICResp(p.hdr)
			want := nvme.ICResp{PFV: 0, CPDA: 0, DGST: dgst, MAXH2CDATA: 64 << 10}
			if resp != want {
				t.Fatalf("ICResp %+v, want %+v", resp, want)
			}
			if !bytes.Equal(p.hdr[16:], make([]byte, 112)) {
				t.Fatalf("ICResp reserved bytes not zero")
			}
		})
	}
}

// NVMe/TCP 1.0 §3.6.2.2 and SPDK nvmf_tcp_pdu_ch_handle/nvmf_tcp_icreq_handle:
// a malformed ICReq, or another PDU first, ends the connection with a
// C2HTermReq naming the field.
func TestICReqViolationsTerminate(t *testing.T) {
	checkNoGoroutineLeaks(t)
	opts := testOptions()
	opts.DisableDataDigest = true
	s := startServer(t, opts, nil)
	icreq := func(mod func(b []byte)) []byte {
		b := make([]byte, nvme.ICReqSize)
		nvme.ICReq{}.Encode(b)
		mod(b)
		return b
	}
	capsule := make([]byte, 72)
	var cmd nvme.Command
	nvme.EncodeCapsuleCmdHeader(capsule, &cmd, 0, false, false)
	tests := []struct {
		name string
		pdu  []byte
		fes  nvme.FES
		fei  uint32
	}{
		{"CapsuleCmd before ICReq", capsule, nvme.FESPDUSequenceError, 0},
		{"flags", icreq(func(b []byte) { b[1] = 1 }), nvme.FESInvalidHeaderField, 1},
		{"HLEN", icreq(func(b []byte) { b[2] = 72 }), nvme.FESInvalidHeaderField, 2},
		{"PDO", icreq(func(b []byte) { b[3] = 8 }), nvme.FESInvalidHeaderField, 3},
		{"PLEN", icreq(func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 132) }), nvme.FESInvalidHeaderField, 4},
		{"PFV 1", icreq(func(b []byte) { b[8] = 1 }), nvme.FESInvalidHeaderField, 8},
		{"HPDA 32", icreq(func(b []byte) { b[10] = 32 }), nvme.FESInvalidHeaderField, 10},
		{"refused data digest", icreq(func(b []byte) { b[11] = nvme.DigestData }), nvme.FESUnsupportedParameter, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, core := s.dial(t)
			h.write(tt.pdu)
			offending := h.expectTermReq(tt.fes, tt.fei)
			if len(offending) < nvme.CommonHeaderSize || !bytes.Equal(offending[:8], tt.pdu[:8]) {
				t.Fatalf("TermReq carries %x, want the offending header %x", offending, tt.pdu[:8])
			}
			waitFor(t, func() bool { return core.released.Load() == 1 })
		})
	}
}

// NVMe/TCP 1.0 §3.6.2.2: ICReq is only valid as the first PDU; a second one
// is a PDU sequence error (SPDK "Already received ICreq PDU").
func TestSecondICReqIsSequenceError(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, _ := s.dial(t)
	h.icreq(0)
	var b [nvme.ICReqSize]byte
	nvme.ICReq{}.Encode(b[:])
	h.write(b[:])
	h.expectTermReq(nvme.FESPDUSequenceError, 0)
}

// Header violations after the handshake end the connection with the FES/FEI
// of the lowest bad field and the offending header.
func TestHeaderViolationsTerminate(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	raw := func(c nvme.CommonHeader, extra int) []byte {
		b := make([]byte, 8+extra)
		c.Encode(b)
		return b
	}
	tests := []struct {
		name string
		pdu  []byte
		fes  nvme.FES
		fei  uint32
	}{
		{"CapsuleResp from host", raw(ch(nvme.PDUCapsuleResp, 0, 24, 0, 24), 16), 1, 0},
		{"unknown type", raw(ch(0x0c, 0, 24, 0, 24), 16), 1, 0},
		{"H2CData SUCCESS", raw(ch(nvme.PDUH2CData, nvme.FlagSuccess, 24, 0, 24), 16), 1, 1},
		{"HDGSTF not negotiated", raw(ch(nvme.PDUCapsuleCmd, hd, 72, 0, 76), 68), 1, 1},
		{"CapsuleCmd HLEN", raw(ch(nvme.PDUCapsuleCmd, 0, 24, 0, 24), 16), 1, 2},
		{"PDO 0 with data", raw(ch(nvme.PDUCapsuleCmd, 0, 72, 0, 80), 72), 1, 3},
		{"ICD beyond 8 KiB", raw(ch(nvme.PDUCapsuleCmd, 0, 72, 72, 72+8192+4), 64), 5, 0},
		{"H2CData beyond MAXH2CDATA", raw(ch(nvme.PDUH2CData, lp, 24, 24, 24+DefaultMAXH2CDATA+4), 16), 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := s.dial(t)
			h.icreq(0)
			h.write(tt.pdu)
			offending := h.expectTermReq(tt.fes, tt.fei)
			if !bytes.Equal(offending, tt.pdu[:8]) {
				t.Fatalf("TermReq carries %x, want %x", offending, tt.pdu[:8])
			}
		})
	}
}

// A host H2CTermReq ends the connection; the controller sends nothing back
// (FreeBSD nvmf_tcp_handle_term_req).
func TestHostTermReqClosesSilently(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, core := s.dial(t)
	h.icreq(0)
	b := make([]byte, nvme.TermReqMaxPLEN)
	n := nvme.EncodeTermReq(b, nvme.PDUH2CTermReq, nvme.TermReq{FES: nvme.FESDataOutOfRange}, make([]byte, 24))
	h.write(b[:n])
	h.expectClosed()
	waitFor(t, func() bool { return core.released.Load() == 1 })
}

// Digests are CRC32C, present on every PDU once negotiated; the whole write
// (ICD and R2T) and read path works with every combination.
func TestRoundTripWithEveryDigestCombination(t *testing.T) {
	checkNoGoroutineLeaks(t)
	opts := testOptions()
	opts.C2HDataSize = 8192
	s := startServer(t, opts, nil)
	for dgst := uint8(0); dgst < 4; dgst++ {
		t.Run(fmt.Sprintf("dgst=%d", dgst), func(t *testing.T) {
			h, _ := s.dial(t)
			h.icreq(dgst)
			h.connect(1, 31, 0)
			small := pattern(2048, dgst)
			c := rwCmd(h, nvme.IOWrite, 8, 4, nvme.SGLDataBlockOffset)
			h.sendCapsule(&c, small)
			if cpl := h.expectResp(c.CID()); !cpl.Status.Success() {
				t.Fatalf("ICD write: %v", cpl.Status)
			}
			big := pattern(40960, dgst+1)
			h.writeR2T(100, big, 16384)
			if got := h.read(8, 4); !bytes.Equal(got, small) {
				t.Fatalf("read back of the ICD write differs")
			}
			if got := h.read(100, 80); !bytes.Equal(got, big) {
				t.Fatalf("read back of the R2T write differs")
			}
		})
	}
}

// NVMe/TCP 1.0 §3.6.3: a bad header digest is fatal, FES 03h.
func TestBadHeaderDigestTerminates(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, _ := s.dial(t)
	h.icreq(nvme.DigestHeader)
	c := h.cmd(nvme.IOFlush, 0, nvme.SGLTransportDataBlock)
	b := h.capsule(&c, nil)
	b[nvme.CapsuleCmdHLEN] ^= 1
	h.write(b)
	h.expectTermReq(nvme.FESHeaderDigestError, 0)
}

// A bad data digest on host data ends the connection with FES 03h (nvmet
// tears the queue down; SPDK up to v22 sends FES 03h) — both for in-capsule
// data and for H2CData.
func TestBadDataDigestTerminates(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	t.Run("in-capsule", func(t *testing.T) {
		h, _ := s.dial(t)
		h.icreq(nvme.DigestData)
		h.connect(1, 31, 0)
		c := rwCmd(h, nvme.IOWrite, 0, 1, nvme.SGLDataBlockOffset)
		b := h.capsule(&c, pattern(512, 1))
		b[len(b)-1] ^= 0x80
		h.write(b)
		h.expectTermReq(nvme.FESHeaderDigestError, 0)
	})
	t.Run("H2CData", func(t *testing.T) {
		h, core := s.dial(t)
		h.icreq(nvme.DigestHeader | nvme.DigestData)
		h.connect(1, 31, 0)
		c := rwCmd(h, nvme.IOWrite, 0, 16, nvme.SGLTransportDataBlock)
		h.sendCapsule(&c, nil)
		r2t := h.expectR2T(c.CID())
		b := h.h2cData(c.CID(), r2t.TTAG, 0, pattern(8192, 2), true)
		b[40] ^= 1
		h.write(b)
		h.expectTermReq(nvme.FESHeaderDigestError, 0)
		waitFor(t, func() bool { return core.released.Load() == 1 })
		if core.executed.Load() != 1 { // only the Connect
			t.Fatalf("write with a bad digest was executed")
		}
	})
}

// Once negotiated, PDUs must carry the digest flags.
func TestMissingDigestFlagsTerminate(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, _ := s.dial(t)
	h.icreq(nvme.DigestHeader)
	h.hdgst = false // the host "forgets" its header digest
	c := h.cmd(nvme.IOFlush, 0, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	h.expectTermReq(nvme.FESInvalidHeaderField, nvme.OffsetFlags)
}

// 8 KiB of in-capsule data on the admin queue and for Fabrics commands (the
// Linux host's NVME_TCP_ADMIN_CCSZ); on I/O queues the larger of that and the
// queue's limit. Beyond the queue's largest ICD the PDU is refused with FES
// 05h.
func TestInCapsuleDataLimits(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), func(c *fakeCore) { c.icdLimit = 16384 })
	t.Run("admin queue at 8 KiB", func(t *testing.T) {
		h, _ := s.dial(t)
		h.icreq(0)
		h.connect(0, 31, 0)
		c := rwCmd(h, nvme.IOWrite, 0, 16, nvme.SGLDataBlockOffset)
		h.sendCapsule(&c, pattern(8192, 3))
		if cpl := h.expectResp(c.CID()); !cpl.Status.Success() {
			t.Fatalf("8 KiB ICD: %v", cpl.Status)
		}
		c = rwCmd(h, nvme.IOWrite, 0, 17, nvme.SGLDataBlockOffset)
		h.sendCapsule(&c, pattern(8192+512, 3))
		h.expectTermReq(nvme.FESDataLimitExceeded, 0)
	})
	t.Run("I/O queue at its limit", func(t *testing.T) {
		h, _ := s.dial(t)
		h.icreq(nvme.DigestData | nvme.DigestHeader)
		h.connect(1, 31, 0)
		c := rwCmd(h, nvme.IOWrite, 0, 32, nvme.SGLDataBlockOffset)
		h.sendCapsule(&c, pattern(16384, 4))
		if cpl := h.expectResp(c.CID()); !cpl.Status.Success() {
			t.Fatalf("16 KiB ICD: %v", cpl.Status)
		}
		if got := h.read(0, 32); !bytes.Equal(got, pattern(16384, 4)) {
			t.Fatalf("read back differs")
		}
		c = rwCmd(h, nvme.IOWrite, 0, 33, nvme.SGLDataBlockOffset)
		h.sendCapsule(&c, pattern(16384+512, 4))
		h.expectTermReq(nvme.FESDataLimitExceeded, 0)
	})
}

// The SGL must describe the in-capsule data the PDU carries; a mismatch is
// a command error (status), and the stream stays usable.
func TestInCapsuleDataMismatchGetsStatus(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	tests := []struct {
		name   string
		sglLen uint32
		sglID  uint8
		icd    int
		want   nvme.Status
	}{
		{"SGL shorter than ICD", 512, nvme.SGLDataBlockOffset, 1024, nvme.StatusDataSGLLengthInvalid},
		{"SGL longer than ICD", 2048, nvme.SGLDataBlockOffset, 1024, nvme.StatusDataSGLLengthInvalid},
		{"ICD with transport SGL", 1024, nvme.SGLTransportDataBlock, 1024, nvme.StatusSGLTypeInvalid},
		{"in-capsule SGL without ICD", 1024, nvme.SGLDataBlockOffset, 0, nvme.StatusDataSGLLengthInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inits := core.inits.Load()
			c := rwCmd(h, nvme.IOWrite, 0, 2, tt.sglID)
			c.SetSGL(0, tt.sglLen, tt.sglID)
			h.sendCapsule(&c, pattern(tt.icd, 5))
			cpl := h.expectResp(c.CID())
			if cpl.Status != tt.want || cpl.SQID != 1 {
				t.Fatalf("status %v SQID %d, want %v SQID 1", cpl.Status, cpl.SQID, tt.want)
			}
			if core.inits.Load() != inits {
				t.Fatalf("the core saw the command")
			}
		})
	}
	// Still in sync: a normal write and read work.
	h.writeR2T(0, pattern(4096, 6), 4096)
	if !bytes.Equal(h.read(0, 8), pattern(4096, 6)) {
		t.Fatalf("read back differs")
	}
}

// A command the core rejects in Init is completed by the core; its
// in-capsule data is consumed and nothing is executed.
func TestInitFailureIsCompletedByCore(t *testing.T) {
	checkNoGoroutineLeaks(t)
	s := startServer(t, testOptions(), nil)
	h, core := s.dial(t)
	h.icreq(0)
	h.connect(1, 31, 0)
	c := h.cmd(opFailInit, 512, nvme.SGLDataBlockOffset)
	h.sendCapsule(&c, pattern(512, 7))
	if cpl := h.expectResp(c.CID()); cpl.Status != nvme.StatusInvalidOpcode {
		t.Fatalf("status %v", cpl.Status)
	}
	c = h.cmd(opFailInit, 65536, nvme.SGLTransportDataBlock)
	h.sendCapsule(&c, nil)
	if cpl := h.expectResp(c.CID()); cpl.Status != nvme.StatusInvalidOpcode {
		t.Fatalf("status %v", cpl.Status)
	}
	if got := core.executed.Load(); got != 1 {
		t.Fatalf("executed %d commands, want only the Connect", got)
	}
	if !bytes.Equal(h.read(0, 1), make([]byte, 512)) {
		t.Fatalf("read after failures differs")
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 5000 {
			t.Fatalf("condition not reached")
		}
		sleepBriefly()
	}
}
