package replication

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strings"
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
	fh, back, err := fr.nextMessage()
	if err != nil || fh.typ != frameMessage || fh.group != 7 {
		t.Fatalf("frame %+v, %v", fh, err)
	}
	if back.Index != 9 || string(back.Entries[0].Data) != "payload" {
		t.Fatalf("message %+v", back)
	}
}

// TestHandshakeRefusesOlderWireVersions: a version 1 peer (whole messages in
// the protobuf) or 2 (snapshot streams without the receiver's base) is
// refused before it sends a frame.
func TestHandshakeRefusesOlderWireVersions(t *testing.T) {
	for _, v := range []uint16{1, 2} {
		b := handshake{kind: streamMessages, from: 1, to: 2}.encode()
		binary.LittleEndian.PutUint16(b[8:], v)
		_, err := decodeHandshake(b)
		if !errors.Is(err, errFrame) || !strings.Contains(err.Error(), fmt.Sprintf("wire version %d, want 3", v)) {
			t.Fatalf("version %d handshake: %v", v, err)
		}
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
		"group zero":   header(1, frameSnapshotChunk, 0), // a message frame on group 0 is a node heartbeat
		"reserved":     func() []byte { b := header(1, frameMessage, 1); b[6] = 1; return b }(),
	} {
		if _, err := decodeFrameHeader(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("frame header %s: %v, want ErrCorrupt", name, err)
		}
	}
}

// recordingHandler counts what a transport delivers.
type recordingHandler struct {
	messages chan raftpb.Message
}

func (r *recordingHandler) HandleMessage(_ GroupID, m raftpb.Message, _ Source) { r.messages <- m }
func (r *recordingHandler) HandleSnapshot(GroupID, raftpb.Message, io.Reader) error {
	return errors.New("no snapshots here")
}
func (r *recordingHandler) ReportUnreachable(NodeID, GroupID)          {}
func (r *recordingHandler) ReportRejected(RejectReason, NodeID, error) {}

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
	version1 := handshake{kind: streamMessages, from: 2, to: 1}.encode()
	binary.LittleEndian.PutUint16(version1[8:], 1)
	for name, payload := range map[string][]byte{"garbage": bytes.Repeat([]byte{1}, 64), "wrong target": wrongTarget,
		"bad frame": badFrame, "bad message": badMessage, "version 1": version1} {
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

// FuzzDecodeFrames feeds a message stream to the frame reader: it must
// never panic, and a message it decodes must encode back to a frame that
// decodes to the same message.
func FuzzDecodeFrames(f *testing.F) {
	hs := handshake{kind: streamMessages, from: 1, to: 2}.encode()
	var buf bytes.Buffer
	fw := frameWriter{w: &buf}
	_ = fw.message(1, &raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Entries: []raftpb.Entry{{Data: []byte("x")}}})
	f.Add(append(bytes.Clone(hs), buf.Bytes()...))
	buf.Reset()
	for i, m := range testMessages(f) {
		_ = fw.message(GroupID(i+1), &m)
	}
	f.Add(append(bytes.Clone(hs), buf.Bytes()...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < handshakeSize {
			return
		}
		if _, err := decodeHandshake(b[:handshakeSize]); err != nil {
			return
		}
		fr := frameReader{r: bytes.NewReader(b[handshakeSize:])}
		for {
			h, err := fr.header()
			if err != nil {
				return
			}
			if h.typ != frameMessage {
				if _, err := fr.read(int(h.length)); err != nil {
					return
				}
				continue
			}
			m, err := fr.message(h.length)
			if err != nil {
				return
			}
			var out bytes.Buffer
			w := frameWriter{w: &out}
			if err := w.message(h.group, &m); err != nil {
				t.Fatalf("re-encoding %+v: %v", m, err)
			}
			back := frameReader{r: &out}
			if _, again, err := back.nextMessage(); err != nil || !reflect.DeepEqual(again, m) {
				t.Fatalf("re-decoded %+v, %v; want %+v", again, err, m)
			}
		}
	})
}

// testMessages are messages of every shape: without entries, with one, with
// many (empty payloads, nil and not, and a configuration change among
// them), and a snapshot.
func testMessages(t testing.TB) []raftpb.Message {
	cc, err := (&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: 4, Context: []byte("ctx")}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	many := make([]raftpb.Entry, 40)
	for i := range many {
		many[i] = raftpb.Entry{Term: 5, Index: uint64(10 + i), Data: bytes.Repeat([]byte{byte(i)}, i*97%4097)}
	}
	many[0].Data = nil      // a new leader's empty entry
	many[7].Data = []byte{} // empty, not nil
	many[20].Type, many[20].Data = raftpb.EntryConfChange, cc
	return []raftpb.Message{
		{Type: raftpb.MsgHeartbeat, To: 2, From: 1, Term: 5, Commit: 9},
		{Type: raftpb.MsgApp, To: 2, From: 1, Term: 5, LogTerm: 5, Index: 9, Commit: 9,
			Entries: []raftpb.Entry{{Term: 5, Index: 10, Data: []byte("payload")}}},
		{Type: raftpb.MsgApp, To: 3, From: 1, Term: 5, LogTerm: 5, Index: 9, Commit: 9, Entries: many},
		{Type: raftpb.MsgApp, To: 2, From: 1, Term: 6, Index: 50,
			Entries: []raftpb.Entry{{Type: raftpb.EntryConfChange, Term: 6, Index: 51, Data: cc}}},
		{Type: raftpb.MsgApp, To: 2, From: 1, Term: 6, Index: 51, Entries: []raftpb.Entry{{Term: 6, Index: 52}}},
		{Type: raftpb.MsgAppResp, To: 1, From: 2, Term: 6, Index: 52},
		{Type: raftpb.MsgSnap, To: 2, From: 1, Term: 6, Snapshot: &raftpb.Snapshot{Data: []byte("sm"),
			Metadata: raftpb.SnapshotMetadata{Index: 52, Term: 6, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}},
	}
}

// received is m as a receiver decodes it: its empty payloads are nil.
func received(m raftpb.Message) raftpb.Message {
	m.Entries = slices.Clone(m.Entries)
	for i := range m.Entries {
		if len(m.Entries[i].Data) == 0 {
			m.Entries[i].Data = nil
		}
	}
	return m
}

// readTestMessages reads testMessages' frames, group i+1 for message i, and
// compares them.
func readTestMessages(t *testing.T, r io.Reader, msgs []raftpb.Message) {
	t.Helper()
	fr := frameReader{r: bufio.NewReaderSize(r, readBufferSize)}
	for i, want := range msgs {
		h, m, err := fr.nextMessage()
		if err != nil || h.group != GroupID(i+1) {
			t.Fatalf("message %d: frame %+v, %v", i, h, err)
		}
		if !reflect.DeepEqual(m, received(want)) {
			t.Fatalf("message %d: received %+v, sent %+v", i, m, want)
		}
		for j, e := range m.Entries {
			if cap(e.Data) != len(e.Data) {
				t.Fatalf("message %d entry %d: Data has room for %d more bytes", i, j, cap(e.Data)-len(e.Data))
			}
		}
	}
}

func TestMessageFramesRoundTrip(t *testing.T) {
	msgs := testMessages(t)
	t.Run("one frame per write", func(t *testing.T) {
		var buf bytes.Buffer
		fw := frameWriter{w: &buf}
		for i := range msgs {
			if err := fw.message(GroupID(i+1), &msgs[i]); err != nil {
				t.Fatal(err)
			}
		}
		readTestMessages(t, &buf, msgs)
	})
	t.Run("one batch through writev on loopback TCP", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		sent := make(chan error, 1)
		go func() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				sent <- err
				return
			}
			defer c.Close()
			var b frameBatch
			for i := range msgs {
				if err := b.add(GroupID(i+1), &msgs[i]); err != nil {
					sent <- err
					return
				}
			}
			sent <- b.writeTo(c)
		}()
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		readTestMessages(t, c, msgs)
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	})
}

// TestFrameBatchLeavesTheMessageUntouched: Raft still holds the message
// and its entries while the transport encodes them.
func TestFrameBatchLeavesTheMessageUntouched(t *testing.T) {
	var b frameBatch
	for i, m := range testMessages(t) {
		before := m
		before.Entries = slices.Clone(m.Entries)
		for j := range before.Entries {
			before.Entries[j].Data = bytes.Clone(m.Entries[j].Data)
		}
		entries := m.Entries
		if err := b.add(1, &m); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, before) || len(entries) > 0 && &m.Entries[0] != &entries[0] {
			t.Fatalf("message %d changed by add: %+v, was %+v", i, m, before)
		}
		if err := b.writeTo(io.Discard); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, before) {
			t.Fatalf("message %d changed by writeTo: %+v, was %+v", i, m, before)
		}
	}
}

// TestFrameBatchAllocatesNothingOnceWarm: the sender's steady state.
func TestFrameBatchAllocatesNothingOnceWarm(t *testing.T) {
	msgs := testMessages(t)
	var b frameBatch
	send := func() {
		for i := range msgs {
			if err := b.add(GroupID(i+1), &msgs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.writeTo(io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(10, send); n != 0 {
		t.Fatalf("%v allocations per batch", n)
	}
}

// messageBody lays out a message body by hand.
func messageBody(count uint32, sizes []uint32, pb, payloads []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(pb)))
	b = binary.LittleEndian.AppendUint32(b, count)
	for _, n := range sizes {
		b = binary.LittleEndian.AppendUint32(b, n)
	}
	return append(append(b, pb...), payloads...)
}

// decodeBody decodes a message frame's body as the receiver does.
func decodeBody(body []byte) (raftpb.Message, error) {
	fr := frameReader{r: bytes.NewReader(body)}
	return fr.message(uint32(len(body)))
}

func TestMessageBodyRejectsMalformedInput(t *testing.T) {
	marshal := func(m raftpb.Message) []byte {
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	two := marshal(raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Entries: []raftpb.Entry{{Index: 1}, {Index: 2}}})
	inline := marshal(raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Entries: []raftpb.Entry{{Index: 1, Data: []byte("x")}}})
	good := messageBody(2, []uint32{3, 0}, two, []byte("abc"))
	if m, err := decodeBody(good); err != nil || string(m.Entries[0].Data) != "abc" || m.Entries[1].Data != nil {
		t.Fatalf("the well-formed body: %+v, %v", m, err)
	}
	setPB := func(n uint32) []byte { b := bytes.Clone(good); binary.LittleEndian.PutUint32(b, n); return b }
	for name, body := range map[string][]byte{
		"empty":                          nil,
		"truncated header":               good[:5],
		"sizes cut off":                  good[:12],
		"protobuf cut off":               good[:20],
		"payloads cut off":               good[:len(good)-1],
		"trailing bytes":                 append(bytes.Clone(good), 0),
		"count below the protobuf's":     messageBody(1, []uint32{3}, two, []byte("abc")),
		"count above the protobuf's":     messageBody(3, []uint32{3, 0, 0}, two, []byte("abc")),
		"count beyond the protobuf":      messageBody(2, []uint32{0, 0}, []byte{0x08, 0x01, 0x10}, nil),
		"count beyond the body":          messageBody(0xffffffff, nil, nil, nil),
		"payload lengths beyond body":    messageBody(2, []uint32{4, 0}, two, []byte("abc")),
		"payload lengths overflowing":    messageBody(2, []uint32{0xffffffff, 4}, two, []byte("abc")),
		"protobuf length beyond body":    setPB(0xffffffff),
		"protobuf length short":          setPB(uint32(len(two) - 1)),
		"protobuf garbage":               messageBody(0, nil, []byte{0xff, 0xff, 0xff}, nil),
		"payload inside the protobuf":    messageBody(1, []uint32{0}, inline, nil),
		"payload inside and out of band": messageBody(1, []uint32{1}, inline, []byte("y")),
	} {
		if m, err := decodeBody(body); !errors.Is(err, errFrame) {
			t.Errorf("%s: %+v, %v; want errFrame", name, m, err)
		}
	}
	// A stream that ends inside a frame is cut, not malformed.
	fr := frameReader{r: bytes.NewReader(good[:len(good)-1])}
	if _, err := fr.message(uint32(len(good))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: %v, want io.ErrUnexpectedEOF", err)
	}
	// A frame of another type where a message is due.
	var buf bytes.Buffer
	if err := (&frameWriter{w: &buf}).frame(frameSnapshotChunk, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (&frameReader{r: &buf}).nextMessage(); !errors.Is(err, errFrame) {
		t.Errorf("chunk frame on a message stream: %v, want errFrame", err)
	}
}

// BenchmarkFrameRoundTrip encodes a MsgApp of 32 entries of 4 KiB into a
// buffer and decodes it through a bufio.Reader, as a follower's stream
// does; "encode" is the sender's half alone.
func BenchmarkFrameRoundTrip(b *testing.B) {
	entries := make([]raftpb.Entry, 32)
	for i := range entries {
		entries[i] = raftpb.Entry{Term: 3, Index: uint64(100 + i), Data: make([]byte, 4096)}
	}
	m := raftpb.Message{Type: raftpb.MsgApp, To: 2, From: 1, Term: 3, LogTerm: 3, Index: 99, Commit: 99, Entries: entries}
	b.Run("msgapp=32x4KiB", func(b *testing.B) {
		var buf bytes.Buffer
		fw := frameWriter{w: &buf}
		fr := frameReader{r: bufio.NewReaderSize(&buf, readBufferSize)}
		b.SetBytes(32 * 4096)
		b.ReportAllocs()
		for b.Loop() {
			if err := fw.message(1, &m); err != nil {
				b.Fatal(err)
			}
			if _, got, err := fr.nextMessage(); err != nil || len(got.Entries) != 32 {
				b.Fatalf("%d entries, %v", len(got.Entries), err)
			}
		}
	})
	b.Run("msgapp=32x4KiB/encode", func(b *testing.B) {
		var batch frameBatch
		b.SetBytes(32 * 4096)
		b.ReportAllocs()
		for b.Loop() {
			if err := batch.add(1, &m); err != nil {
				b.Fatal(err)
			}
			if err := batch.writeTo(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	})
}
