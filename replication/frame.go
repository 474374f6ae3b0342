package replication

import (
	"encoding/binary"
	"fmt"
	"io"

	"go.etcd.io/raft/v3/raftpb"
)

// Wire format of the TCP transport (doc.go, "Transport wire format").
const (
	handshakeSize   = 32
	handshakeMagic  = "BSLTRAFT"
	wireVersion     = 1
	frameHeaderSize = 16
	maxFrameBody    = 64 << 20 // a message: MaxSizePerMsg plus one large entry
	snapshotChunk   = 1 << 20  // data bytes per snapshot chunk frame
)

// Stream kinds, named in the handshake.
const (
	streamMessages uint8 = 1
	streamSnapshot uint8 = 2
)

// Frame types.
const (
	frameMessage        uint8 = 1
	frameSnapshotChunk  uint8 = 2
	frameSnapshotEnd    uint8 = 3
	frameSnapshotResult uint8 = 4
)

var errFrame = fmt.Errorf("%w: malformed transport frame", ErrCorrupt)

// handshake opens every connection.
type handshake struct {
	kind     uint8
	from, to NodeID
}

func (h handshake) encode() []byte {
	b := make([]byte, handshakeSize)
	copy(b, handshakeMagic)
	binary.LittleEndian.PutUint16(b[8:], wireVersion)
	b[10] = h.kind
	binary.LittleEndian.PutUint64(b[16:], uint64(h.from))
	binary.LittleEndian.PutUint64(b[24:], uint64(h.to))
	return b
}

func decodeHandshake(b []byte) (handshake, error) {
	if len(b) != handshakeSize || string(b[:8]) != handshakeMagic {
		return handshake{}, fmt.Errorf("%w: bad handshake magic", errFrame)
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != wireVersion {
		return handshake{}, fmt.Errorf("%w: wire version %d, want %d", errFrame, v, wireVersion)
	}
	h := handshake{kind: b[10], from: NodeID(binary.LittleEndian.Uint64(b[16:])), to: NodeID(binary.LittleEndian.Uint64(b[24:]))}
	for _, c := range b[11:16] {
		if c != 0 {
			return handshake{}, fmt.Errorf("%w: reserved handshake bytes set", errFrame)
		}
	}
	if (h.kind != streamMessages && h.kind != streamSnapshot) || h.from == 0 || h.to == 0 {
		return handshake{}, fmt.Errorf("%w: handshake kind %d from %v to %v", errFrame, h.kind, h.from, h.to)
	}
	return h, nil
}

// frameHeader precedes every frame body.
type frameHeader struct {
	length uint32
	typ    uint8
	group  GroupID
}

func (h frameHeader) put(b []byte) {
	_ = b[frameHeaderSize-1]
	binary.LittleEndian.PutUint32(b, h.length)
	b[4], b[5], b[6], b[7] = h.typ, 0, 0, 0
	binary.LittleEndian.PutUint64(b[8:], uint64(h.group))
}

func decodeFrameHeader(b []byte) (frameHeader, error) {
	if len(b) != frameHeaderSize {
		return frameHeader{}, fmt.Errorf("%w: header of %d bytes", errFrame, len(b))
	}
	h := frameHeader{length: binary.LittleEndian.Uint32(b), typ: b[4], group: GroupID(binary.LittleEndian.Uint64(b[8:]))}
	switch {
	case b[5]|b[6]|b[7] != 0:
		return h, fmt.Errorf("%w: reserved bytes set", errFrame)
	case h.typ < frameMessage || h.typ > frameSnapshotResult:
		return h, fmt.Errorf("%w: frame type %d", errFrame, h.typ)
	case h.length > maxFrameBody:
		return h, fmt.Errorf("%w: frame of %d bytes, at most %d", errFrame, h.length, maxFrameBody)
	case h.group == 0 && h.typ != frameSnapshotResult:
		return h, fmt.Errorf("%w: frame for group 0", errFrame)
	}
	return h, nil
}

// frameReader reads frames from a stream, reusing one body buffer.
type frameReader struct {
	r    io.Reader
	head [frameHeaderSize]byte
	body []byte
}

// next reads one frame. The body is valid until the next call.
func (fr *frameReader) next() (frameHeader, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.head[:]); err != nil {
		return frameHeader{}, nil, err
	}
	h, err := decodeFrameHeader(fr.head[:])
	if err != nil {
		return h, nil, err
	}
	if cap(fr.body) < int(h.length) {
		fr.body = make([]byte, h.length)
	}
	body := fr.body[:h.length]
	if _, err := io.ReadFull(fr.r, body); err != nil {
		return h, nil, err
	}
	return h, body, nil
}

// decodeMessage decodes a message frame's body. raftpb's Unmarshal copies
// byte fields, so the body may be reused afterwards.
func decodeMessage(body []byte) (raftpb.Message, error) {
	var m raftpb.Message
	if err := m.Unmarshal(body); err != nil {
		return m, fmt.Errorf("%w: message: %v", errFrame, err)
	}
	return m, nil
}

// frameWriter encodes frames into a stream, reusing one scratch buffer.
type frameWriter struct {
	w       io.Writer
	scratch []byte
}

func (fw *frameWriter) message(group GroupID, m *raftpb.Message) error {
	size := m.Size()
	if size > maxFrameBody {
		return fmt.Errorf("replication: message of %d bytes exceeds the frame limit", size)
	}
	need := frameHeaderSize + size
	if cap(fw.scratch) < need {
		fw.scratch = make([]byte, need)
	}
	b := fw.scratch[:need]
	frameHeader{length: uint32(size), typ: frameMessage, group: group}.put(b)
	if _, err := m.MarshalToSizedBuffer(b[frameHeaderSize:]); err != nil {
		return fmt.Errorf("replication: while encoding a message: %w", err)
	}
	_, err := fw.w.Write(b)
	return err
}

func (fw *frameWriter) frame(typ uint8, group GroupID, body []byte) error {
	var head [frameHeaderSize]byte
	frameHeader{length: uint32(len(body)), typ: typ, group: group}.put(head[:])
	if _, err := fw.w.Write(head[:]); err != nil {
		return err
	}
	_, err := fw.w.Write(body)
	return err
}
