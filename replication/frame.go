package replication

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
)

// Wire format of the TCP transport (doc.go, "Transport wire format").
const (
	handshakeSize   = 32
	handshakeMagic  = "BSLTRAFT"
	wireVersion     = 3 // 3: snapshot streams carry the receiver's base (delta.go)
	frameHeaderSize = 16
	messageHeadSize = 8        // protobuf length, entry count
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
	frameSnapshotBase   uint8 = 5
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
	case h.typ < frameMessage || h.typ > frameSnapshotBase:
		return h, fmt.Errorf("%w: frame type %d", errFrame, h.typ)
	case h.length > maxFrameBody:
		return h, fmt.Errorf("%w: frame of %d bytes, at most %d", errFrame, h.length, maxFrameBody)
	case h.group == 0 && h.typ != frameSnapshotResult && h.typ != frameMessage: // group 0: node heartbeats
		return h, fmt.Errorf("%w: frame for group 0", errFrame)
	}
	return h, nil
}

// frameReader reads frames from a stream, reusing one buffer for frame
// bodies and message metadata.
type frameReader struct {
	r    io.Reader
	head [frameHeaderSize]byte
	buf  []byte
}

// header reads and checks one frame header.
func (fr *frameReader) header() (frameHeader, error) {
	if _, err := io.ReadFull(fr.r, fr.head[:]); err != nil {
		return frameHeader{}, err
	}
	return decodeFrameHeader(fr.head[:])
}

// read reads n bytes into the reused buffer; they are valid until the next
// read.
func (fr *frameReader) read(n int) ([]byte, error) {
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// next reads one frame, whatever its type, with its body undecoded. The
// body is valid until the next call.
func (fr *frameReader) next() (frameHeader, []byte, error) {
	h, err := fr.header()
	if err != nil {
		return h, nil, err
	}
	body, err := fr.read(int(h.length))
	return h, body, err
}

// nextMessage reads one frame, which must be a message frame, and decodes
// its message (see message).
func (fr *frameReader) nextMessage() (frameHeader, raftpb.Message, error) {
	h, err := fr.header()
	if err != nil {
		return h, raftpb.Message{}, err
	}
	if h.typ != frameMessage {
		return h, raftpb.Message{}, fmt.Errorf("%w: frame type %d where a message was due", errFrame, h.typ)
	}
	m, err := fr.message(h.length)
	return h, m, err
}

// message reads and decodes a message frame's body of length bytes (doc.go,
// "Transport wire format"). The sizes are checked against length before
// anything is allocated; the payloads are read into one new buffer, which
// the entries' Data share (each capped at its own end), so the message owns
// them. A message without payloads allocates no buffer. A malformed body is
// an error wrapping errFrame.
func (fr *frameReader) message(length uint32) (raftpb.Message, error) {
	var m raftpb.Message
	if length < messageHeadSize {
		return m, fmt.Errorf("%w: message body of %d bytes", errFrame, length)
	}
	if _, err := io.ReadFull(fr.r, fr.head[:messageHeadSize]); err != nil {
		return m, err
	}
	pbLen := uint64(binary.LittleEndian.Uint32(fr.head[0:]))
	count := uint64(binary.LittleEndian.Uint32(fr.head[4:]))
	rest := uint64(length) - messageHeadSize
	if 4*count+pbLen > rest || 2*count > pbLen { // an entry takes 2 protobuf bytes at least
		return m, fmt.Errorf("%w: %d entries and a %d-byte protobuf in a %d-byte body", errFrame, count, pbLen, length)
	}
	meta, err := fr.read(int(4*count + pbLen))
	if err != nil {
		return m, err
	}
	sizes, pb := meta[:4*count], meta[4*count:]
	var total uint64
	for i := 0; i < len(sizes); i += 4 {
		total += uint64(binary.LittleEndian.Uint32(sizes[i:]))
	}
	if total != rest-4*count-pbLen {
		return m, fmt.Errorf("%w: payloads of %d bytes where the body leaves %d", errFrame, total, rest-4*count-pbLen)
	}
	if count > 0 {
		m.Entries = make([]raftpb.Entry, 0, count)
	}
	if err := m.Unmarshal(pb); err != nil {
		return m, fmt.Errorf("%w: message: %v", errFrame, err)
	}
	if uint64(len(m.Entries)) != count {
		return m, fmt.Errorf("%w: message of %d entries, header says %d", errFrame, len(m.Entries), count)
	}
	return m, fr.payloads(m.Entries, sizes, total)
}

// payloads reads the payloads of entries, whose sizes (4 bytes each) add up
// to total, into one buffer and points each entry's Data at its own.
func (fr *frameReader) payloads(entries []raftpb.Entry, sizes []byte, total uint64) error {
	for i := range entries {
		if entries[i].Data != nil {
			return fmt.Errorf("%w: entry %d carries its payload in the protobuf", errFrame, i)
		}
	}
	if total == 0 {
		return nil
	}
	buf := make([]byte, total)
	if _, err := io.ReadFull(fr.r, buf); err != nil {
		return err
	}
	off := 0
	for i := range entries {
		end := off + int(binary.LittleEndian.Uint32(sizes[4*i:]))
		if end > off {
			entries[i].Data = buf[off:end:end]
		}
		off = end
	}
	return nil
}

// frameBatch collects message frames for one vectored write: each frame's
// head (frame header, message header, protobuf without payloads) goes into
// one reused buffer, and the payloads are written from the entries' own
// Data, never copied. The zero value is ready; its slices are kept across
// batches, so that the steady state allocates nothing.
type frameBatch struct {
	head     []byte           // the heads of the batch's frames, back to back
	ends     []int            // where each frame's head ends in head
	entries  [][]raftpb.Entry // each frame's entries, whose payloads follow its head
	payload  int              // bytes of payloads in the batch
	stripped []raftpb.Entry   // the message being added's entries, Data nil
	vec      [][]byte         // the batch's pieces, in wire order
	bufs     net.Buffers      // vec as WriteTo consumes it
}

// add appends the frame of m, a message of group, to the batch. m and its
// entries are not modified, but the batch refers to their Data until
// writeTo returns.
func (b *frameBatch) add(group GroupID, m *raftpb.Message) error {
	b.stripped = append(b.stripped[:0], m.Entries...)
	payload := 0
	for i := range b.stripped {
		payload += len(b.stripped[i].Data)
		b.stripped[i].Data = nil
	}
	pm := *m
	pm.Entries = b.stripped
	pbLen := pm.Size()
	headLen := messageHeadSize + 4*len(m.Entries) + pbLen
	if body := headLen + payload; body > maxFrameBody {
		return fmt.Errorf("replication: message of %d bytes exceeds the frame limit", body)
	}
	start := len(b.head)
	b.head = slices.Grow(b.head, frameHeaderSize+headLen)
	h := b.head[start : start+frameHeaderSize+headLen]
	frameHeader{length: uint32(headLen + payload), typ: frameMessage, group: group}.put(h)
	binary.LittleEndian.PutUint32(h[frameHeaderSize:], uint32(pbLen))
	binary.LittleEndian.PutUint32(h[frameHeaderSize+4:], uint32(len(m.Entries)))
	sizes := h[frameHeaderSize+messageHeadSize:]
	for i := range m.Entries {
		binary.LittleEndian.PutUint32(sizes[4*i:], uint32(len(m.Entries[i].Data)))
	}
	if _, err := pm.MarshalToSizedBuffer(sizes[4*len(m.Entries):]); err != nil {
		return fmt.Errorf("replication: while encoding a message: %w", err)
	}
	b.head = b.head[:start+len(h)]
	b.ends = append(b.ends, len(b.head))
	b.entries = append(b.entries, m.Entries)
	b.payload += payload
	return nil
}

// size returns the bytes of frames in the batch.
func (b *frameBatch) size() int { return len(b.head) + b.payload }

// writeTo writes the batch to w, with one writev (or a few, for more than
// 1024 pieces) when w is a net.Conn, and empties the batch, even on error.
// Adjacent heads (of frames without payloads) go as one piece.
func (b *frameBatch) writeTo(w io.Writer) error {
	from := 0
	for i, end := range b.ends {
		for j := range b.entries[i] {
			data := b.entries[i][j].Data
			if len(data) == 0 {
				continue
			}
			if from < end {
				b.vec = append(b.vec, b.head[from:end])
				from = end
			}
			b.vec = append(b.vec, data)
		}
	}
	if from < len(b.head) {
		b.vec = append(b.vec, b.head[from:])
	}
	b.bufs = b.vec
	_, err := b.bufs.WriteTo(w)
	b.reset()
	return err
}

// reset empties the batch, dropping its references to payloads.
func (b *frameBatch) reset() {
	clear(b.vec)
	clear(b.entries)
	b.head, b.ends, b.entries, b.vec, b.bufs = b.head[:0], b.ends[:0], b.entries[:0], b.vec[:0], nil
	b.payload = 0
}

// frameWriter writes single frames to a stream.
type frameWriter struct {
	w     io.Writer
	batch frameBatch
}

// message writes m's frame, encoded as a batch of one.
func (fw *frameWriter) message(group GroupID, m *raftpb.Message) error {
	if err := fw.batch.add(group, m); err != nil {
		return err
	}
	return fw.batch.writeTo(fw.w)
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
