package tcp

import (
	"bytes"
	"testing"

	"basalt/pkg/nvme"
)

// onlyQueue returns the one connection s serves.
func (s *server) onlyQueue(t *testing.T) *queue {
	t.Helper()
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if len(s.l.mu.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(s.l.mu.conns))
	}
	for q := range s.l.mu.conns {
		return q
	}
	return nil
}

// A burst of commands that arrives in one read and completes inline is
// answered with one gathered write: completions queued while the receiver
// works through its buffer do not wake the sender; the receiver wakes it
// once, before it blocks for more input.
func TestBurstAnsweredByOneWrite(t *testing.T) {
	for _, write := range []bool{false, true} {
		s := startServer(t, testOptions(), nil)
		h, _ := s.dial(t)
		h.icreq(0)
		h.connect(1, 127, 0)
		q := s.onlyQueue(t)
		const burst = 32
		var buf bytes.Buffer
		for i := range burst {
			c := rwCmd(h, nvme.IORead, uint64(i*8), 8, nvme.SGLTransportDataBlock)
			var icd []byte
			if write {
				c = rwCmd(h, nvme.IOWrite, uint64(i*8), 2, nvme.SGLDataBlockOffset)
				icd = pattern(2*fakeBlockSize, byte(i))
			}
			buf.Write(h.capsule(&c, icd))
		}
		h.write(buf.Bytes()) // one loopback segment: one read on the target
		for done := 0; done < burst; {
			if p := h.readPDU(); p.ch.Type == nvme.PDUCapsuleResp {
				done++
			}
		}
		h.c.Close()
		s.l.Wait()
		// The Connect's response, then the burst.
		if q.send.writes != 2 {
			t.Fatalf("write %v: %d gathered writes for the Connect and a burst of %d, want 2",
				write, q.send.writes, burst)
		}
	}
}

// In-capsule data that is already in the read buffer is lent in place to a
// core that executes the command inline, and copied into the slot buffer
// for one that does not; either way every block reads back as written,
// including when the data digest forces the ordinary path.
func TestInCapsuleDataLentInPlace(t *testing.T) {
	for _, tc := range []struct {
		name string
		lend bool
		dgst uint8
	}{
		{"inline core", true, 0},
		{"core with workers", false, 0},
		{"inline core, data digest", true, nvme.DigestData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, testOptions(), func(c *fakeCore) { c.lend = tc.lend })
			h, core := s.dial(t)
			h.icreq(tc.dgst)
			h.connect(1, 127, 0)
			const burst = 32
			var buf bytes.Buffer
			for i := range burst {
				c := rwCmd(h, nvme.IOWrite, uint64(i*2), 2, nvme.SGLDataBlockOffset)
				buf.Write(h.capsule(&c, pattern(2*fakeBlockSize, byte(i))))
			}
			h.write(buf.Bytes())
			for done := 0; done < burst; done++ {
				if cpl := nvme.DecodeCompletion(h.readPDU().hdr[8:]); !cpl.Status.Success() {
					t.Fatalf("write CID %d: %v", cpl.CID, cpl.Status)
				}
			}
			for i := range burst {
				c := rwCmd(h, nvme.IORead, uint64(i*2), 2, nvme.SGLTransportDataBlock)
				h.write(h.capsule(&c, nil))
				if p := h.readPDU(); p.ch.Type != nvme.PDUC2HData || !bytes.Equal(p.data, pattern(2*fakeBlockSize, byte(i))) {
					t.Fatalf("block %d read back wrong (%v)", i, p.ch.Type)
				}
				h.expectResp(c.CID())
			}
			lent := core.lentWrites.Load()
			if want := tc.lend && tc.dgst == 0; (lent > 0) != want {
				t.Fatalf("%d writes lent in place, want lending %v", lent, want)
			}
		})
	}
}

// A response completed on a goroutine that may block (the core's worker)
// is written by that goroutine when nobody else is writing: at queue depth
// 1 a read is answered without waking the send goroutine. The data read
// back is what was written.
func TestWorkerWritesItsResponse(t *testing.T) {
	s := startServer(t, testOptions(), func(c *fakeCore) { c.async = true })
	h, _ := s.dial(t)
	h.icreq(0)
	h.connect(1, 127, 0)
	q := s.onlyQueue(t)
	const n = 20
	for i := range n {
		c := rwCmd(h, nvme.IOWrite, uint64(i*2), 2, nvme.SGLDataBlockOffset)
		h.sendCapsule(&c, pattern(2*fakeBlockSize, byte(i)))
		if cpl := h.expectResp(c.CID()); !cpl.Status.Success() {
			t.Fatalf("write %d: %v", i, cpl.Status)
		}
	}
	for i := range n {
		c := rwCmd(h, nvme.IORead, uint64(i*2), 2, nvme.SGLTransportDataBlock)
		h.sendCapsule(&c, nil)
		var got []byte
		for {
			p := h.readPDU()
			if p.ch.Type == nvme.PDUCapsuleResp {
				break
			}
			got = append(got, p.data...)
		}
		if !bytes.Equal(got, pattern(2*fakeBlockSize, byte(i))) {
			t.Fatalf("read %d: %d bytes, not what was written", i, len(got))
		}
	}
	h.c.Close()
	s.l.Wait()
	// Not every one: the receiver, about to wait for the next command, may
	// wake the send goroutine first when it sees the response queued.
	if q.send.inlineBatches == 0 {
		t.Fatalf("no send list written by the completing goroutine for %d commands at queue depth 1", 2*n)
	}
	t.Logf("%d of %d responses (the Connect's and %d I/O) written by the completing goroutine", q.send.inlineBatches, 2*n+1, 2*n)
}
