package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// SendSnapshot implements Transport: a dedicated connection carries the
// MsgSnap frame; the receiver answers with a base frame (what it holds,
// delta.go), or with a result frame if it refuses the MsgSnap; then the
// body in chunk frames, an end frame with the byte count, and the
// receiver's result frame once it has restored.
func (t *TCPTransport) SendSnapshot(group GroupID, m raftpb.Message, body func(io.Writer) error, done func(error)) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		done(t.sendSnapshot(group, m, body))
	}()
}

func (t *TCPTransport) sendSnapshot(group GroupID, m raftpb.Message, body func(io.Writer) error) error {
	c, err := t.dial(NodeID(m.To), streamSnapshot)
	if err != nil {
		return fmt.Errorf("replication: snapshot for %v: %w", NodeID(m.To), err)
	}
	defer t.untrack(c)
	bw := bufio.NewWriterSize(c, writeBufferSize)
	fw := frameWriter{w: &deadlineWriter{c: c, w: bw, t: t}}
	if err := fw.message(group, &m); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	base, ok, err := t.readBase(c, group)
	if err != nil {
		return err
	}
	cw := &chunkWriter{fw: &fw, group: group, buf: make([]byte, 0, snapshotChunk), base: base, hasBase: ok}
	if err := body(cw); err != nil {
		return fmt.Errorf("replication: while writing the snapshot: %w", err)
	}
	if err := cw.flush(); err != nil {
		return err
	}
	if err := fw.frame(frameSnapshotEnd, group, binary.LittleEndian.AppendUint64(nil, uint64(cw.total))); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_ = c.SetReadDeadline(t.clock.Now().Add(snapshotResult))
	fr := frameReader{r: c}
	h, result, err := fr.next()
	if err != nil {
		return fmt.Errorf("replication: waiting for the snapshot's result: %w", err)
	}
	if h.typ != frameSnapshotResult {
		return fmt.Errorf("%w: snapshot result frame type %d", errFrame, h.typ)
	}
	return snapshotResultErr(result)
}

// snapshotResultErr is the error a result frame's body reports.
func snapshotResultErr(result []byte) error {
	switch {
	case len(result) == 0:
		return fmt.Errorf("%w: empty snapshot result", errFrame)
	case result[0] != 0:
		return fmt.Errorf("%w: %s", ErrSnapshotRejected, result[1:])
	}
	return nil
}

// readBase reads the receiver's answer to the MsgSnap: its base, or the
// result frame of a refusal (which it returns as the error).
func (t *TCPTransport) readBase(c net.Conn, group GroupID) (SnapshotBase, bool, error) {
	_ = c.SetReadDeadline(t.clock.Now().Add(snapshotIdle))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	fr := frameReader{r: c}
	h, body, err := fr.next()
	switch {
	case err != nil:
		return SnapshotBase{}, false, fmt.Errorf("replication: waiting for the snapshot receiver's base: %w", err)
	case h.typ == frameSnapshotResult:
		if err := snapshotResultErr(body); err != nil {
			return SnapshotBase{}, false, err
		}
		return SnapshotBase{}, false, fmt.Errorf("%w: snapshot result before the data", errFrame)
	case h.typ != frameSnapshotBase || h.group != group:
		return SnapshotBase{}, false, fmt.Errorf("%w: frame type %d for %v opening %v's snapshot", errFrame, h.typ, h.group, group)
	}
	return decodeBase(body)
}

// deadlineWriter extends the write deadline before every write, so that a
// stream only fails when the receiver stops reading.
type deadlineWriter struct {
	c net.Conn
	w io.Writer
	t *TCPTransport
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	_ = d.c.SetWriteDeadline(d.t.clock.Now().Add(snapshotIdle))
	return d.w.Write(b)
}

// chunkWriter cuts the snapshot body into chunk frames. It carries the
// base the receiver announced (SnapshotBaseWriter).
type chunkWriter struct {
	fw      *frameWriter
	group   GroupID
	buf     []byte
	total   int64
	base    SnapshotBase
	hasBase bool
}

// ReceiverBase implements SnapshotBaseWriter.
func (w *chunkWriter) ReceiverBase() (SnapshotBase, bool) { return w.base, w.hasBase }

func (w *chunkWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n := min(len(b), snapshotChunk-len(w.buf))
		w.buf = append(w.buf, b[:n]...)
		b = b[n:]
		written += n
		if len(w.buf) == snapshotChunk {
			if err := w.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.total += int64(len(w.buf))
	err := w.fw.frame(frameSnapshotChunk, w.group, w.buf)
	w.buf = w.buf[:0]
	return err
}

// receiveSnapshot serves an inbound snapshot stream: it hands the body to
// the Handler as a reader over the chunk frames, checks the end frame, and
// answers with the result.
func (t *TCPTransport) receiveSnapshot(c net.Conn, r io.Reader, from NodeID) error {
	_ = c.SetReadDeadline(t.clock.Now().Add(snapshotIdle))
	fr := &frameReader{r: &deadlineReader{c: c, r: r, t: t}}
	h, m, err := fr.nextMessage()
	if err != nil {
		return err
	}
	switch {
	case NodeID(m.From) != from:
		return fmt.Errorf("%w: %v from %v opening %v's snapshot stream", errWrongSender, m.Type, NodeID(m.From), from)
	case NodeID(m.To) != t.self:
		return fmt.Errorf("%w: %v for %v opening a snapshot stream to %v", errWrongDestination, m.Type, NodeID(m.To), t.self)
	case m.Type != raftpb.MsgSnap || m.Snapshot == nil:
		return fmt.Errorf("%w: snapshot stream opened by %v with a %v", errFrame, from, m.Type)
	}
	cr := &chunkReader{fr: fr, group: h.group}
	var body io.Reader = cr
	if berr := t.sendBase(c, h.group, m); berr != nil {
		// No base was sent, so the sender sends no data: HandleSnapshot
		// refuses m before it reads, as SnapshotBase did.
		body, cr = errReader{berr}, nil
	}
	err = t.handler.HandleSnapshot(h.group, m, body)
	if err == nil && cr != nil {
		err = cr.finish()
	}
	result := []byte{0}
	if err != nil {
		result = append([]byte{1}, err.Error()...)
	}
	_ = c.SetWriteDeadline(t.clock.Now().Add(writeTimeout))
	fw := frameWriter{w: c}
	if werr := fw.frame(frameSnapshotResult, h.group, result); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// sendBase answers a stream's MsgSnap with the receiver's base (none
// when the Handler is no SnapshotBaser). It returns the Handler's error
// for a message it will refuse, without sending anything, or the write's.
func (t *TCPTransport) sendBase(c net.Conn, group GroupID, m raftpb.Message) error {
	var base SnapshotBase
	var ok bool
	if b, is := t.handler.(SnapshotBaser); is {
		var err error
		if base, ok, err = b.SnapshotBase(group, m); err != nil {
			return err
		}
	}
	_ = c.SetWriteDeadline(t.clock.Now().Add(writeTimeout))
	fw := frameWriter{w: c}
	return fw.frame(frameSnapshotBase, group, encodeBase(base, ok))
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

type deadlineReader struct {
	c net.Conn
	r io.Reader
	t *TCPTransport
}

func (d *deadlineReader) Read(b []byte) (int, error) {
	_ = d.c.SetReadDeadline(d.t.clock.Now().Add(snapshotIdle))
	return d.r.Read(b)
}

// chunkReader reads a snapshot body from chunk frames up to the end frame,
// whose byte count it checks.
type chunkReader struct {
	fr    *frameReader
	group GroupID
	chunk []byte
	total uint64
	ended bool
}

func (r *chunkReader) Read(b []byte) (int, error) {
	for len(r.chunk) == 0 {
		if r.ended {
			return 0, io.EOF
		}
		if err := r.nextFrame(); err != nil {
			return 0, err
		}
	}
	n := copy(b, r.chunk)
	r.chunk = r.chunk[n:]
	return n, nil
}

func (r *chunkReader) nextFrame() error {
	h, body, err := r.fr.next()
	if err != nil {
		return fmt.Errorf("replication: snapshot stream cut: %w", err)
	}
	if h.group != r.group {
		return fmt.Errorf("%w: snapshot frame for %v in %v's stream", errFrame, h.group, r.group)
	}
	switch h.typ {
	case frameSnapshotChunk:
		r.chunk = body
		r.total += uint64(len(body))
	case frameSnapshotEnd:
		if len(body) != 8 || binary.LittleEndian.Uint64(body) != r.total {
			return fmt.Errorf("%w: snapshot ended after %d bytes, sender says otherwise", errFrame, r.total)
		}
		r.ended = true
	default:
		return fmt.Errorf("%w: frame type %d in a snapshot stream", errFrame, h.typ)
	}
	return nil
}

// finish reads to the end frame: the state machine may stop reading before
// it (its format has its own end), but the stream must be whole.
func (r *chunkReader) finish() error {
	_, err := io.Copy(io.Discard, r)
	return err
}
