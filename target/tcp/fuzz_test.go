package tcp

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"basalt/pkg/nvme"
)

// Go native fuzzing of the PDU decoder and of the whole receive path. Seeds
// live in testdata/fuzz/<FuzzName>/ plus the f.Add calls below.

// FuzzDecodeHeader checks that header validation never panics and that a
// header it accepts describes a PDU whose pieces add up to PLEN.
func FuzzDecodeHeader(f *testing.F) {
	for _, seed := range [][]byte{
		{0x04, 0x00, 72, 0, 72, 0, 0, 0},
		{0x04, 0x03, 72, 76, 0x50, 0x04, 0, 0},
		{0x06, 0x07, 24, 28, 0x20, 0x10, 0, 0},
		{0x02, 0x00, 24, 0, 48, 0, 0, 0},
		{0x00, 0x00, 128, 0, 128, 0, 0, 0},
		{0x05, 0x00, 24, 0, 24, 0, 0, 0},
	} {
		for flags := uint8(0); flags < 4; flags++ {
			f.Add(seed, flags, uint8(0))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, dgst, cpda uint8) {
		if len(b) < nvme.CommonHeaderSize {
			return
		}
		p := headerParams{
			hdgst: dgst&1 != 0, ddgst: dgst&2 != 0, cpda: cpda % (nvme.MaxPDA + 1),
			maxICD: 8192, maxH2CData: 131072,
		}
		c := nvme.DecodeCommonHeader(b)
		var enc [8]byte
		c.Encode(enc[:])
		if !bytes.Equal(enc[:], b[:8]) {
			t.Fatalf("common header does not round-trip: %x -> %+v -> %x", b[:8], c, enc)
		}
		l, v := validateHeader(c, &p)
		_ = validateICReqHeader(c)
		if !v.ok() {
			if v.fes == 0 && !v.disconnect {
				t.Fatalf("violation without FES: %+v", v)
			}
			if v.fes == nvme.FESInvalidHeaderField && v.fei > nvme.OffsetPLEN {
				t.Fatalf("common-header violation points past the common header: %+v", v)
			}
			return
		}
		total := uint64(nvme.CommonHeaderSize) + uint64(l.pshLen) + uint64(l.padLen) + uint64(l.dataLen)
		if l.hdgst {
			total += nvme.DigestSize
		}
		if l.ddgst {
			total += nvme.DigestSize
		}
		if total != uint64(c.PLEN) {
			t.Fatalf("layout %+v adds up to %d, PLEN %d (%+v)", l, total, c.PLEN, c)
		}
		if l.padLen < 0 || (c.Type == nvme.PDUCapsuleCmd && l.dataLen > p.maxICD) ||
			(c.Type == nvme.PDUH2CData && l.dataLen > p.maxH2CData) {
			t.Fatalf("accepted layout out of bounds: %+v for %+v", l, c)
		}
	})
}

// FuzzPDUStream feeds arbitrary bytes after a valid ICReq to a queue with a
// fake core. The queue must end (EOF or a termination), never panic, and
// leave no goroutine behind; a watchdog bounds every run.
func FuzzPDUStream(f *testing.F) {
	h := &testHost{}
	connect := h.cmd(nvme.OpcodeFabrics, nvme.ConnectDataSize, nvme.SGLDataBlockOffset)
	connect.EncodeConnect(nvme.ConnectCmd{QID: 1, SQSIZE: 31})
	write := rwCmd(h, nvme.IOWrite, 0, 8, nvme.SGLTransportDataBlock)
	read := rwCmd(h, nvme.IORead, 0, 8, nvme.SGLTransportDataBlock)
	var seed bytes.Buffer
	seed.Write(h.capsule(&connect, make([]byte, nvme.ConnectDataSize)))
	seed.Write(h.capsule(&write, nil))
	seed.Write(h.h2cData(write.CID(), 32, 0, make([]byte, 4096), true))
	seed.Write(h.capsule(&read, nil))
	f.Add(seed.Bytes(), uint8(0))
	f.Add(seed.Bytes()[:100], uint8(0))
	hd := &testHost{hdgst: true, ddgst: true}
	var dseed bytes.Buffer
	dseed.Write(hd.capsule(&connect, make([]byte, nvme.ConnectDataSize)))
	dseed.Write(hd.capsule(&write, nil))
	dseed.Write(hd.h2cData(write.CID(), 32, 0, make([]byte, 4096), true))
	f.Add(dseed.Bytes(), uint8(3))
	f.Add([]byte{0x02, 0, 24, 0, 24, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(0))
	// In-capsule writes lent in place to an inline core (dgst bit 2).
	icd := rwCmd(h, nvme.IOWrite, 0, 2, nvme.SGLDataBlockOffset)
	var lseed bytes.Buffer
	lseed.Write(h.capsule(&connect, make([]byte, nvme.ConnectDataSize)))
	lseed.Write(h.capsule(&icd, make([]byte, 1024)))
	lseed.Write(h.capsule(&read, nil))
	f.Add(lseed.Bytes(), uint8(4))
	f.Fuzz(func(t *testing.T, stream []byte, dgst uint8) {
		var icreq [nvme.ICReqSize]byte
		nvme.ICReq{DGST: dgst & 3}.Encode(icreq[:])
		conn := newMemConn(append(icreq[:], stream...))
		opts := testOptions()
		opts.ReadBufferSize = 4096
		opts.EnsureDefaults()
		src := newCoreSource(func(c *fakeCore) { c.diskSize, c.lend = 64<<10, dgst&4 != 0 })
		q := newQueue(conn, src.factory, &opts, nil)
		done := make(chan struct{})
		go func() {
			q.serve()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("queue did not end on a %d-byte stream\n%s", len(stream), filterStacks(string(buf[:n])))
		}
	})
}

// memConn is a net.Conn that reads a fixed byte stream (then EOF) and
// discards what is written.
type memConn struct {
	r      *bytes.Reader
	mu     sync.Mutex
	closed bool
}

func newMemConn(b []byte) *memConn { return &memConn{r: bytes.NewReader(b)} }

func (c *memConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	return c.r.Read(p)
}

func (c *memConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	return len(p), nil
}

func (c *memConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *memConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *memConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr               { return &net.TCPAddr{Port: 4420} }
func (c *memConn) SetDeadline(t time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(t time.Time) error { return nil }

var _ io.Reader = (*memConn)(nil)
