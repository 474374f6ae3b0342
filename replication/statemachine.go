package replication

import (
	"context"
	"io"
)

// StateMachine is what a group replicates: the group applies committed
// entries to it, in log order, on the group's loop goroutine.
//
// Recovery and snapshots rely on one property: applying entries again, from
// an older index, to a state that is already newer must converge to the same
// state as applying them once (a redo log: block writes have it). After a
// crash the group applies again every committed entry after its log's
// snapshot point, and a snapshot that is cut short (a failed Restore, a crash)
// leaves the state partly newer until the entries that follow are applied.
type StateMachine interface {
	// Apply applies the committed entry at index. data is the entry's data
	// as it lies in the group's log region (after the proposal ID), and it
	// stays valid and unchanged until the group's log is compacted past index:
	// a state machine may keep a reference to it instead of a copy, as long
	// as it reports (AppliedIndex, Checkpoint) only indexes whose data it no
	// longer needs, and implements LogRetainer. data must not be written. An
	// error stops the group on this node: a replica that cannot apply an
	// entry must not apply later ones.
	Apply(ctx context.Context, index uint64, data []byte) error
	// AppliedIndex returns the highest index whose effect is durable in the
	// state machine. The group never compacts its log past it, and after a
	// restart it does not apply entries up to it again.
	AppliedIndex() uint64
	// Snapshot writes the whole state to w, streaming it (never building it
	// whole in memory). It runs on a transport goroutine, concurrently with
	// Apply; the state it writes may include entries applied while it runs
	// (see above for why that is safe).
	Snapshot(w io.Writer) error
	// Restore replaces the state with the one read from r, which Snapshot
	// wrote on the leader when its applied index was index, and makes it
	// durable: AppliedIndex returns at least index afterwards.
	Restore(r io.Reader, index uint64) error
}

// Checkpointer is implemented by a StateMachine whose applied entries become
// durable only when asked, so that its AppliedIndex lags its Apply calls. The
// group calls Checkpoint before it compacts its log, and compacts only up to
// the index returned: every entry applied up to it is then durable.
type Checkpointer interface {
	Checkpoint(ctx context.Context) (uint64, error)
}

// LogRetainer is implemented by a StateMachine that keeps references to the
// data Apply passed it (a replica that stages blocks straight from the log
// region instead of copying them). Compaction never frees such data, since it
// stops at the durable index the state machine reports; ReleaseLog covers the
// other ways a group drops its log. The group calls it, on the loop or after
// the loop has stopped, before it fences itself (a failed group releases its
// log at once), before RemoveGroup persists the group's removal, and never
// concurrently with Apply. After it returns the state machine must not read
// any data Apply passed it, ever again: it makes what it staged durable
// elsewhere (or, failing that, stops serving it) and drops the references.
type LogRetainer interface {
	ReleaseLog(ctx context.Context) error
}

// IndexRecorder is implemented by a StateMachine that persists its applied
// index and must keep it equal to the group's: the group calls RecordIndex,
// on the loop and in log order, for each committed entry that carries
// nothing for the state machine (a new leader's empty entry, a configuration
// change), which Apply never sees. Without it, the group's log may be
// compacted past AppliedIndex over such entries (they change nothing), and
// the state machine's persisted index then lags the log's start.
type IndexRecorder interface {
	RecordIndex(ctx context.Context, index uint64) error
}
