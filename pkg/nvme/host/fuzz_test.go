package host

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/nvme"
)

// pduBytes builds controller PDUs for the stream fuzz seeds.
func pduBytes(t nvme.PDUType, flags uint8, psh func(b []byte), data []byte) []byte {
	b := make([]byte, 24+len(data))
	ch := nvme.CommonHeader{Type: t, Flags: flags, HLEN: 24, PLEN: uint32(len(b))}
	if len(data) > 0 {
		ch.PDO = 24
	}
	ch.Encode(b)
	psh(b)
	copy(b[24:], data)
	return b
}

// FuzzReceiveStream feeds arbitrary controller bytes to a queue with a read,
// an R2T write and a flush in flight: the receive path must never panic and
// must complete each command exactly once.
func FuzzReceiveStream(f *testing.F) {
	const readCID, writeCID, flushCID = 0x1000, 0x1001, 0x1002
	resp := func(cid uint16) []byte {
		return pduBytes(nvme.PDUCapsuleResp, 0, func(b []byte) { (&nvme.Completion{CID: cid, SQID: 1}).Encode(b[8:]) }, nil)
	}
	c2h := func(cid uint16, off uint32, n int, flags uint8) []byte {
		return pduBytes(nvme.PDUC2HData, flags, func(b []byte) { nvme.DataHeader{CCCID: cid, DATAO: off, DATAL: uint32(n)}.Encode(b) }, make([]byte, n))
	}
	r2t := pduBytes(nvme.PDUR2T, 0, func(b []byte) { nvme.DataHeader{CCCID: writeCID, TTAG: 1, DATAL: 8192}.Encode(b) }, nil)
	term := pduBytes(nvme.PDUC2HTermReq, 0, func(b []byte) { binary.LittleEndian.PutUint16(b[8:], 2) }, nil)
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	f.Add(cat(c2h(readCID, 0, 8192, nvme.FlagLastPDU), resp(readCID), r2t, resp(writeCID), resp(flushCID)))
	f.Add(cat(c2h(readCID, 0, 4096, 0), c2h(readCID, 4096, 4096, nvme.FlagLastPDU|nvme.FlagSuccess), term))
	f.Add(cat(resp(flushCID), r2t, r2t))
	f.Add([]byte{0x05, 0, 24, 0, 24, 0, 0, 0, 1})
	f.Fuzz(fuzzReceiveOne)
}

// fuzzReceiveOne runs one stream; a receive path that does not finish within
// 3 s after the stream ends is reported as a hang with every goroutine's stack.
func fuzzReceiveOne(t *testing.T, stream []byte) {
	hostEnd, ctrlEnd := net.Pipe()
	go io.Copy(io.Discard, ctrlEnd) //nolint:errcheck // drains what the host sends
	q := newQueue(hostEnd, bufio.NewReader(hostEnd), queueConfig{
		qid: 1, depth: 4, maxH2CData: 4096, log: slog.New(slog.DiscardHandler), callbacks: &atomic.Int32{},
	})
	var calls [3]atomic.Int32
	read, write := make([]byte, 8192), make([]byte, 8192)
	for i, buffers := range [][2][]byte{{read, nil}, {nil, write}, {nil, nil}} {
		s := &q.slots[<-q.free]
		s.cmd = nvme.Command{}
		prepareData(s, buffers[0], buffers[1], 0)
		s.io = &IO{Done: func(*IO) { calls[i].Add(1) }}
		if err := q.start(s, sendDeferred); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		ctrlEnd.Write(stream) //nolint:errcheck // the host may hang up first
		ctrlEnd.Close()
	}()
	select {
	case <-q.receiveDone:
	case <-time.After(3 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		panic(fmt.Sprintf("hang on %x\n%s", stream, buf[:n]))
	}
	for i := range calls {
		if n := calls[i].Load(); n != 1 {
			t.Fatalf("command %d completed %d times", i, n)
		}
	}
}
