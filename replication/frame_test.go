package replication

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

func TestHandshakeAndFrameHeaderRoundTrip(t *testing.T) {
	h := handshake{kind: streamSnapshot, from: 3, to: 1}
	got, err := decodeHandshake(h.encode())
	if err != nil || got != h {
		t.Fatalf("handshake round trip: %+v, %v", got, err)
	}
	var buf bytes.Buffer
	fw := frameWriter{w: &buf}
	m := raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Term: 5, Index: 9,
		Entries: []raftpb.Entry{{Index: 10, Term: 5, Data: []byte("payload")}}}
	if err := fw.message(7, &m); err != nil {
		t.Fatal(err)
	}
	fr := frameReader{r: &buf}
	fh, body, err := fr.next()
	if err != nil || fh.typ != frameMessage || fh.group != 7 {
		t.Fatalf("frame %+v, %v", fh, err)
	}
	back, err := decodeMessage(body)
	if err != nil || back.Index != 9 || string(back.Entries[0].Data) != "payload" {
		t.Fatalf("message %+v, %v", back, err)
	}
}

func TestHandshakeAndFramesRejectMalformedInput(t *testing.T) {
	good := handshake{kind: streamMessages, from: 1, to: 2}.encode()
	mutate := func(f func(p []byte)) []byte { p := bytes.Clone(good); f(p); return p }
	for name, b := range map[string][]byte{
		"short":      good[:20],
		"magic":      mutate(func(p []byte) { p[0] = 'X' }),
		"version":    mutate(func(p []byte) { p[8] = 9 }),
		"kind":       mutate(func(p []byte) { p[10] = 7 }),
		"reserved":   mutate(func(p []byte) { p[12] = 1 }),
		"from zero":  mutate(func(p []byte) { clear(p[16:24]) }),
		"to zero":    mutate(func(p []byte) { clear(p[24:32]) }),
		"long input": append(bytes.Clone(good), 0),
	} {
		if _, err := decodeHandshake(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("handshake %s: %v, want ErrCorrupt", name, err)
		}
	}
	header := func(length uint32, typ uint8, group GroupID) []byte {
		b := make([]byte, frameHeaderSize)
		frameHeader{length: length, typ: typ, group: group}.put(b)
		return b
	}
	for name, b := range map[string][]byte{
		"type zero":    header(1, 0, 1),
		"type unknown": header(1, 9, 1),
		"too long":     header(maxFrameBody+1, frameMessage, 1),
		"group zero":   header(1, frameMessage, 0),
		"reserved":     func() []byte { b := header(1, frameMessage, 1); b[6] = 1; return b }(),
	} {
		if _, err := decodeFrameHeader(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("frame header %s: %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := decodeMessage([]byte{0xff, 0xff, 0xff}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("garbage message: %v, want ErrCorrupt", err)
	}
}

// recordingHandler counts what a transport delivers.
type recordingHandler struct {
	messages chan raftpb.Message
}

func (r *recordingHandler) HandleMessage(_ GroupID, m raftpb.Message) { r.messages <- m }
func (r *recordingHandler) HandleSnapshot(GroupID, raftpb.Message, io.Reader) error {
	return errors.New("no snapshots here")
}
func (r *recordingHandler) ReportUnreachable(NodeID, GroupID) {}

// TestTCPTransportSurvivesMalformedConnections sends garbage, a wrong
// handshake and a malformed frame to a transport: each connection is closed,
// and a well-formed peer still gets through.
func TestTCPTransportSurvivesMalformedConnections(t *testing.T) {
	rx, err := NewTCPTransport(TCPConfig{NodeID: 1, Listen: "127.0.0.1:0", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	h := &recordingHandler{messages: make(chan raftpb.Message, 16)}
	if err := rx.Start(h); err != nil {
		t.Fatal(err)
	}
	wrongTarget := handshake{kind: streamMessages, from: 2, to: 9}.encode()
	badFrame := append(handshake{kind: streamMessages, from: 2, to: 1}.encode(), bytes.Repeat([]byte{0xff}, 32)...)
	badMessage := handshake{kind: streamMessages, from: 2, to: 1}.encode()
	hdr := make([]byte, frameHeaderSize)
	frameHeader{length: 3, typ: frameMessage, group: 1}.put(hdr)
	badMessage = append(append(badMessage, hdr...), 0xff, 0xff, 0xff)
	for name, payload := range map[string][]byte{"garbage": bytes.Repeat([]byte{1}, 64), "wrong target": wrongTarget,
		"bad frame": badFrame, "bad message": badMessage} {
		c, err := net.Dial("tcp", rx.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(payload)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: connection not closed", name)
		}
		c.Close()
	}
	tx, err := NewTCPTransport(TCPConfig{NodeID: 2, Listen: "127.0.0.1:0", Peers: map[NodeID]string{1: rx.Addr().String()},
		Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.Start(&recordingHandler{messages: make(chan raftpb.Message, 16)}); err != nil {
		t.Fatal(err)
	}
	tx.Send(1, []raftpb.Message{{Type: raftpb.MsgHeartbeat, To: 1, From: 2, Term: 3}})
	select {
	case m := <-h.messages:
		if m.Type != raftpb.MsgHeartbeat || m.Term != 3 {
			t.Fatalf("received %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a well-formed message did not arrive")
	}
}

func FuzzDecodeFrames(f *testing.F) {
	var buf bytes.Buffer
	fw := frameWriter{w: &buf}
	_ = fw.message(1, &raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Entries: []raftpb.Entry{{Data: []byte("x")}}})
	f.Add(append(handshake{kind: streamMessages, from: 1, to: 2}.encode(), buf.Bytes()...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < handshakeSize {
			return
		}
		if _, err := decodeHandshake(b[:handshakeSize]); err != nil {
			return
		}
		fr := frameReader{r: bytes.NewReader(b[handshakeSize:])}
		for {
			h, body, err := fr.next()
			if err != nil {
				return
			}
			if h.typ == frameMessage {
				_, _ = decodeMessage(body)
			}
		}
	})
}
