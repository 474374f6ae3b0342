package tcp

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"

	"basalt/pkg/nvme"
)

// Benchmarks: the PDU header path alone, and full round trips over loopback
// TCP against the fake core (sync: the numbers are the transport's cost).
// Run: go test -run '^$' -bench . -benchmem ./target/tcp

// BenchmarkHeader decodes and validates a CapsuleCmd common header with
// digests and encodes a CapsuleResp with its header digest.
func BenchmarkHeader(b *testing.B) {
	var cmd nvme.Command
	cmd.SetOpcode(nvme.IOWrite)
	in := make([]byte, 128)
	nvme.EncodeCapsuleCmdHeader(in, &cmd, 4096, true, true)
	p := headerParams{hdgst: true, ddgst: true, maxICD: 8192, maxH2CData: 131072}
	out := make([]byte, 32)
	cpl := nvme.Completion{CID: 7, SQID: 1, SQHD: 3}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c := nvme.DecodeCommonHeader(in)
		l, v := validateHeader(c, &p)
		if !v.ok() || l.dataLen != 4096 {
			b.Fatalf("%+v %+v", l, v)
		}
		if nvme.GetDigest(in[72:]) != nvme.Digest(in[:72]) {
			b.Fatal("digest")
		}
		nvme.EncodeCapsuleResp(out, &cpl, true)
	}
}

// benchHost is an allocation-free client for round-trip benchmarks.
type benchHost struct {
	c    net.Conn
	req  []byte // qd commands, encoded back to back
	resp []byte // room for their responses
}

func newBenchHost(b *testing.B, dgst uint8, sqsize uint16) (*benchHost, *testHost) {
	opts := testOptions()
	s := startServer(b, opts, nil)
	h, _ := s.dial(b)
	h.icreq(dgst)
	h.connect(1, sqsize, 0)
	return &benchHost{c: h.c}, h
}

// roundTrip writes the prepared commands in one write and reads exactly
// respLen bytes of responses.
func (bh *benchHost) roundTrip(b *testing.B) {
	if _, err := bh.c.Write(bh.req); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(bh.c, bh.resp); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRoundTrip_Read measures 4 KiB reads: CapsuleCmd in, C2HData and
// CapsuleResp out, qd commands per write.
func BenchmarkRoundTrip_Read(b *testing.B) {
	for _, qd := range []int{1, 32} {
		for _, dgst := range []uint8{0, 3} {
			b.Run(fmt.Sprintf("bs=4k/qd=%d/dgst=%d", qd, dgst), func(b *testing.B) {
				bh, h := newBenchHost(b, dgst, 127)
				var req bytes.Buffer
				for i := range qd {
					c := rwCmd(h, nvme.IORead, uint64(i*8), 8, nvme.SGLTransportDataBlock)
					req.Write(h.capsule(&c, nil))
				}
				bh.req = req.Bytes()
				per := 24 + 4096 + 24
				if dgst != 0 {
					per += 4 + 4 + 4
				}
				bh.resp = make([]byte, qd*per)
				benchmarkRoundTrip(b, bh, int64(qd*4096))
			})
		}
	}
}

// BenchmarkRoundTrip_WriteICD measures 4 KiB writes with in-capsule data.
func BenchmarkRoundTrip_WriteICD(b *testing.B) {
	for _, qd := range []int{1, 32} {
		b.Run(fmt.Sprintf("bs=4k/qd=%d", qd), func(b *testing.B) {
			bh, h := newBenchHost(b, 0, 127)
			var req bytes.Buffer
			for i := range qd {
				c := rwCmd(h, nvme.IOWrite, uint64(i*8), 8, nvme.SGLDataBlockOffset)
				req.Write(h.capsule(&c, pattern(4096, byte(i))))
			}
			bh.req = req.Bytes()
			bh.resp = make([]byte, qd*24)
			benchmarkRoundTrip(b, bh, int64(qd*4096))
		})
	}
}

// BenchmarkRoundTrip_WriteR2T measures 128 KiB writes through R2T: two
// round trips (capsule → R2T, H2CData → CapsuleResp).
func BenchmarkRoundTrip_WriteR2T(b *testing.B) {
	bh, h := newBenchHost(b, 0, 127)
	const n = 128 << 10
	c := rwCmd(h, nvme.IOWrite, 0, n/fakeBlockSize, nvme.SGLTransportDataBlock)
	capsule := h.capsule(&c, nil)
	h.write(capsule)
	r2t := h.expectR2T(c.CID())
	data := h.h2cData(c.CID(), r2t.TTAG, 0, pattern(n, 1), true)
	h.write(data)
	h.expectResp(c.CID())
	r2tBuf, respBuf := make([]byte, 24), make([]byte, 24)
	b.SetBytes(n)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		bh.c.Write(capsule)
		if _, err := io.ReadFull(bh.c, r2tBuf); err != nil {
			b.Fatal(err)
		}
		copy(data[nvme.OffsetTTAG:nvme.OffsetTTAG+2], r2tBuf[nvme.OffsetTTAG:])
		bh.c.Write(data)
		if _, err := io.ReadFull(bh.c, respBuf); err != nil {
			b.Fatal(err)
		}
	}
}

func benchmarkRoundTrip(b *testing.B, bh *benchHost, bytesPerOp int64) {
	// Warm-up: slot buffers are allocated on first use, and at qd > 1 the
	// set of slots in use takes a while to settle.
	for range 500 {
		bh.roundTrip(b)
	}
	b.SetBytes(bytesPerOp)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		bh.roundTrip(b)
	}
}
