package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"go.etcd.io/raft/v3/raftpb"
)

// Delta snapshots (doc.go, "Snapshots"). A follower that needs a snapshot
// often still holds its replica as of some applied index: it was down or
// cut off while the leader compacted its log. Its state then differs from
// the leader's only where entries after that index wrote, so the leader
// streams only that. The receiver announces what it holds at the start of
// the stream (SnapshotBase), the leader's state machine, if it is a
// DeltaSnapshotter, writes the changes since, and the receiver's Restore
// reads them like any snapshot. Whenever the leader cannot answer from that
// base (another identity, an index older than its state machine tracks, a
// state machine that does not track) it streams the whole state instead.
//
// Why a delta is a valid snapshot: the receiver has applied every entry up
// to Applied, and applied entries are committed, so they are the leader's
// entries too; where no entry after Applied wrote, the two states agree, and
// the delta carries the leader's current state of everything else. The
// stream, like a whole one, reflects the leader at some point at or after
// the snapshot's index, and the receiver applies every entry after that
// index (StateMachine's redo-log property). A delta cut short leaves the
// receiver partly newer, which the next snapshot (delta or whole) corrects
// the same way.

// SnapshotBase is what a snapshot's receiver already holds, announced to
// the sender before the stream's data.
type SnapshotBase struct {
	// Applied is an index up to which every entry is applied in the
	// receiver's state machine (its loop's applied index: after a restart,
	// the log's snapshot point, which compaction never moves past what the
	// state machine made durable).
	Applied uint64
	// Identity is the receiver state machine's SnapshotIdentity.
	Identity []byte
}

// maxIdentity bounds a SnapshotBase's Identity on the wire.
const maxIdentity = 256

// DeltaSnapshotter is implemented by a StateMachine that can stream only
// what changed after an index, and restore such a stream (its Restore tells
// the two kinds apart by their format). Both ends of a group run the same
// state machine type.
type DeltaSnapshotter interface {
	// SnapshotIdentity names the data this replica holds: a delta is
	// streamed only between replicas of the same identity (such as the
	// volume's UUID). nil: this replica offers no base, and gets whole
	// snapshots.
	SnapshotIdentity() []byte
	// SnapshotSince writes to w a snapshot holding what changed in this
	// state after base.Applied, for a receiver that holds base. It runs
	// where Snapshot runs (a transport goroutine, concurrently with Apply).
	// It returns an error wrapping ErrNoDelta, before writing anything,
	// when it cannot answer from base: the caller then writes a whole
	// Snapshot.
	SnapshotSince(w io.Writer, base SnapshotBase) error
}

// ErrNoDelta says that a state machine cannot stream a delta from the base
// it was given.
var ErrNoDelta = errors.New("replication: no delta snapshot from that base")

// SnapshotBaseWriter is implemented by the writer a Transport hands a
// snapshot body when the receiver announced a base before the data.
type SnapshotBaseWriter interface {
	// ReceiverBase returns the base the receiver announced; ok false when
	// it announced none.
	ReceiverBase() (base SnapshotBase, ok bool)
}

// SnapshotSizer is implemented by the writer a StateMachine's Snapshot or
// SnapshotSince gets: a state machine that knows how many bytes its stream
// will carry says so (once, before writing), and the leader's status shows
// the stream's progress against it.
type SnapshotSizer interface {
	ExpectBytes(n int64)
}

// SnapshotBaser is implemented by a Handler whose snapshot streams start
// with the receiver's base (the Host's does): a transport calls it once it
// has read a stream's MsgSnap, before it reads the data, and sends the
// sender what it returns. An error means HandleSnapshot will refuse the
// stream: the transport sends no base and lets HandleSnapshot refuse it
// (and count the refusal) without reading the data.
type SnapshotBaser interface {
	SnapshotBase(group GroupID, m raftpb.Message) (base SnapshotBase, ok bool, err error)
}

// SnapshotBase implements SnapshotBaser: m is checked as HandleSnapshot
// checks it (a refusal is counted there, not here), then the group's loop
// says what its state machine holds.
func (hh hostHandler) SnapshotBase(group GroupID, m raftpb.Message) (SnapshotBase, bool, error) {
	h := hh.h
	err := hh.check(&m)
	if err == nil {
		err = checkSnapshotMessage(&m)
	}
	if err != nil {
		return SnapshotBase{}, false, fmt.Errorf("%w: %w", ErrSnapshotRejected, err)
	}
	g := h.Group(group)
	if g == nil {
		return SnapshotBase{}, false, fmt.Errorf("%w: %v is not running here", ErrSnapshotRejected, group)
	}
	return g.snapshotBase(m)
}

// snapshotBase asks the loop for its state machine's base: inline in manual
// mode (the caller polls), else through the control queue.
func (g *Group) snapshotBase(m raftpb.Message) (SnapshotBase, bool, error) {
	type answer struct {
		base SnapshotBase
		ok   bool
		err  error
	}
	if g.host.cfg.Manual {
		if g.stopped.Load() || g.c == nil {
			return SnapshotBase{}, false, g.stopErr()
		}
		return g.c.snapshotBase(m)
	}
	result := make(chan answer, 1)
	select {
	case g.control <- func(c *core) { b, ok, err := c.snapshotBase(m); result <- answer{b, ok, err} }:
	case <-g.stopping:
		return SnapshotBase{}, false, g.stopErr()
	}
	select {
	case a := <-result:
		return a.base, a.ok, a.err
	case <-g.stopping:
		return SnapshotBase{}, false, g.stopErr()
	}
}

// snapshotBase is the base this node's state machine offers for m, whose
// sender must be a member (checkStep, as restore checks it): the loop's
// applied index, with the state machine's identity. None without a
// DeltaSnapshotter, an identity, or anything applied.
func (c *core) snapshotBase(m raftpb.Message) (SnapshotBase, bool, error) {
	if err := c.checkStep(&m); err != nil {
		return SnapshotBase{}, false, err
	}
	ds, ok := c.sm.(DeltaSnapshotter)
	if !ok || c.applied == 0 {
		return SnapshotBase{}, false, nil
	}
	id := ds.SnapshotIdentity()
	if len(id) == 0 || len(id) > maxIdentity {
		return SnapshotBase{}, false, nil
	}
	return SnapshotBase{Applied: c.applied, Identity: id}, true, nil
}

// writeSnapshotBody writes the snapshot for a receiver that announced base
// (ok false: none): a delta when sm can stream one from it, else the whole
// state. It reports whether it wrote a delta; p shows which it is writing.
func writeSnapshotBody(sm StateMachine, w io.Writer, base SnapshotBase, ok bool, p *streamProgress) (delta bool, err error) {
	if ds, isDelta := sm.(DeltaSnapshotter); isDelta && ok {
		p.delta.Store(true)
		err := ds.SnapshotSince(w, base)
		if !errors.Is(err, ErrNoDelta) {
			return true, err
		}
		p.delta.Store(false)
	}
	return false, sm.Snapshot(w)
}

// receiverBase returns the base the transport's writer carries, if any.
func receiverBase(w io.Writer) (SnapshotBase, bool) {
	if bw, ok := w.(SnapshotBaseWriter); ok {
		return bw.ReceiverBase()
	}
	return SnapshotBase{}, false
}

// encodeBase is a base frame's body (doc.go, "Transport wire format"):
// empty for none, else the applied index and the identity.
func encodeBase(base SnapshotBase, ok bool) []byte {
	if !ok {
		return nil
	}
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(base.Identity)), base.Applied)
	return append(b, base.Identity...)
}

func decodeBase(b []byte) (SnapshotBase, bool, error) {
	switch {
	case len(b) == 0:
		return SnapshotBase{}, false, nil
	case len(b) < 9 || len(b) > 8+maxIdentity:
		return SnapshotBase{}, false, fmt.Errorf("%w: snapshot base of %d bytes", errFrame, len(b))
	}
	base := SnapshotBase{Applied: binary.LittleEndian.Uint64(b), Identity: append([]byte(nil), b[8:]...)}
	if base.Applied == 0 {
		return SnapshotBase{}, false, fmt.Errorf("%w: snapshot base at index 0", errFrame)
	}
	return base, true, nil
}

// simSnapshotWriter is the pipe a SimNetwork snapshot body writes into,
// carrying the base the receiving Handler announced.
type simSnapshotWriter struct {
	*io.PipeWriter
	base SnapshotBase
	ok   bool
}

func (w *simSnapshotWriter) ReceiverBase() (SnapshotBase, bool) { return w.base, w.ok }

// newSimSnapshotWriter asks dst for its base (on the caller's goroutine,
// which polls dst in manual mode) and wraps pw with it. A message the
// handler would refuse gives none: HandleSnapshot refuses the stream.
func newSimSnapshotWriter(pw *io.PipeWriter, dst Handler, group GroupID, m raftpb.Message) *simSnapshotWriter {
	w := &simSnapshotWriter{PipeWriter: pw}
	if b, ok := dst.(SnapshotBaser); ok {
		if base, ok, err := b.SnapshotBase(group, m); err == nil {
			w.base, w.ok = base, ok
		}
	}
	return w
}
