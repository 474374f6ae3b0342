package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"basalt/pkg/identity"
)

// ErrIdentityMismatch: the log already carries another identity stamp.
var ErrIdentityMismatch = errors.New("replication: the Raft log carries another identity")

// logIdentity is the log's identity stamp (doc.go, "Log records",
// kindIdentity): which cluster and which node the log belongs to, so that a
// node never runs on another node's log (pkg/node checks it against its
// metadata and store). It is written once, by StampIdentity, and must then
// survive for as long as the log does; but the releaser frees the buffer
// from its oldest record on. So the newest identity record is a pin, like a
// group's: the releaser frees up to just below it, and when it is the only
// thing in the way of freeing more, the releaser copies it to the head
// first (keepIdentity). The record is 72 bytes; a copy is written about once
// per pass of the slowest group's pin over the buffer.
type logIdentity struct {
	mu struct {
		sync.Mutex
		stamp identity.Stamp
		set   bool
	}
	// pin is the seq of the newest identity record, or while the first one
	// is being written the next seq; 0 while the log carries none.
	pin atomic.Uint64
}

func (l *logIdentity) init(rec recovery) {
	l.mu.stamp, l.mu.set = rec.stamp, rec.stampSeq != 0
	l.pin.Store(uint64(rec.stampSeq))
}

// Identity returns the identity stamp the log carries; ok is false for a
// log that carries none (a new log, or one written before stamps existed).
func (h *Host) Identity() (s identity.Stamp, ok bool) {
	h.ident.mu.Lock()
	defer h.ident.mu.Unlock()
	return h.ident.mu.stamp, h.ident.mu.set
}

// StampIdentity records s, which must carry both UUIDs, as the log's
// identity: one durable kindIdentity record, written before it returns. A
// log that already carries s is left as it is; one that carries another
// stamp is refused with ErrIdentityMismatch.
func (h *Host) StampIdentity(ctx context.Context, s identity.Stamp) error {
	if !s.Complete() {
		return fmt.Errorf("%w: identity %v lacks a UUID", ErrConfig, s)
	}
	l := &h.ident
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.set {
		if l.mu.stamp != s {
			return fmt.Errorf("%w: the log is %v, not %v", ErrIdentityMismatch, l.mu.stamp, s)
		}
		return nil
	}
	// Register the pin before the record, as a new group does: the
	// releaser reads the last seq before the pins (releaseOnce).
	l.pin.Store(uint64(h.buf.Stats().Last + 1))
	var b recordBuilder
	seq, err := h.buf.Append(ctx, kindIdentity, b.identityRecord(s)...)
	if err != nil {
		l.pin.Store(0)
		return fmt.Errorf("replication: while recording the log's identity: %w", err)
	}
	l.pin.Store(uint64(seq))
	l.mu.stamp, l.mu.set = s, true
	h.log.Info("raft log stamped", "cluster", s.Cluster, "node_uuid", s.Node, "record", seq)
	return nil
}

// keepIdentity returns the pin up to which the releaser may free: low, the
// smallest group pin, unless the identity record is older. Then, if low
// would let the releaser free more than the identity record alone, the
// record is copied to the head at once, on the releaser's goroutine, and
// low is returned: the old copy may go. The copy is a small state record,
// like a compaction, which the reserve kept for those records (space.go)
// has room for; it is written only when the buffer has that room, so the
// releaser does not wait in Append for space only a release could free
// (unless another record took the room between the look and the append);
// without room, the old copy stays and keeps the releaser below it until a
// later pass. Done on the releaser's own goroutine, the copy costs no
// release a round: written on another, it left the buffer held at the old
// copy meanwhile, long enough under a write burst to fill it. The groups' pins
// still decide which group is asked to checkpoint: an idle group right
// above the identity record must be asked, or nothing above it would ever
// be freed.
func (h *Host) keepIdentity(low uint64) uint64 {
	p := h.ident.pin.Load()
	if p == 0 || p >= low {
		return low
	}
	if low > p+1 && h.writeIdentityAgain() {
		return low
	}
	return p
}

// writeIdentityAgain appends a copy of the identity record, if the buffer
// has room for it, and moves the pin to it; older copies are then free to
// go. It reports whether it did.
func (h *Host) writeIdentityAgain() bool {
	if st := h.buf.Stats(); st.Size-st.Used < 2*(identityRecordSize+128) {
		return false // a record may need padding to the end of the lap: twice its size is always enough
	}
	l := &h.ident
	l.mu.Lock()
	defer l.mu.Unlock()
	var b recordBuilder
	seq, err := h.buf.Append(h.ctx, kindIdentity, b.identityRecord(l.mu.stamp)...)
	if err != nil {
		if h.ctx.Err() == nil {
			h.log.Warn("copying the log's identity record failed", "err", err)
		}
		return false
	}
	l.pin.Store(uint64(seq))
	return true
}

// LogBounds describe a recovered group's log: its snapshot point (entries
// up to it were compacted away) and its last index.
type LogBounds struct {
	SnapIndex, LastIndex uint64
}

// Whole reports whether the log holds every entry since the group was
// bootstrapped: nothing was compacted, so a state machine that lost its
// state can replay the whole history from it.
func (b LogBounds) Whole() bool { return b.SnapIndex <= bootstrapIndex }

// RecoveredLog describes the log recovered for group id while it is
// dormant (not added again). A node compares it with its state machine's
// applied index before it starts the group.
func (h *Host) RecoveredLog(id GroupID) (LogBounds, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.mu.dormant[id]
	if s == nil {
		return LogBounds{}, false
	}
	return LogBounds{SnapIndex: s.snapIndex, LastIndex: s.lastIndex()}, true
}
