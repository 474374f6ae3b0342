package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"basalt/cache"
)

// entryMeta is what the in-memory index keeps of one log entry: its term and
// where its data lies in the write buffer. The data itself is read back on
// demand (or found in the recent-entry cache).
type entryMeta struct {
	term   uint64
	seq    cache.Seq // the record holding the entry
	offset uint32    // of the data in the record's payload
	size   uint32
	typ    raftpb.EntryType
}

// confAt is the configuration in force from an applied index on.
type confAt struct {
	index uint64
	conf  raftpb.ConfState
}

// logStorage is one group's Raft log: raft.Storage over the shared write
// buffer. Raft reads it, and the group's loop writes it, both on the loop's
// goroutine; nothing else touches it (a dormant group's storage is used by the
// Host under its mutex). Every mutation appends one record to the write buffer
// and returns only once that record is durable.
//
// Invariants: snapIndex <= hard.Commit <= lastIndex(); ents[i] has index
// snapIndex+1+i; the records holding ents have non-decreasing seqs; pin <=
// stateSeq and pin <= ents[0].seq: no record this group needs is below pin.
type logStorage struct {
	group GroupID
	buf   *cache.Buffer

	hard      raftpb.HardState
	snapIndex uint64
	snapTerm  uint64
	conf      raftpb.ConfState // as of snapIndex
	confLog   []confAt         // applied configuration changes after snapIndex
	ents      []entryMeta
	stateSeq  cache.Seq // the newest kindState record
	applied   uint64    // set by the loop; Snapshot() describes this index

	// pin is the smallest write-buffer seq this group still needs; the Host's
	// releaser reads it from another goroutine.
	pin atomic.Uint64
	// tomb, until the log reaches floor, is the tombstone this group left
	// here when it was fenced: floor is the last entry of the log it
	// dropped, and votes for candidates behind it are refused
	// (tombstone.go).
	tomb  *tombstone
	floor logPoint

	recent  entryCache
	builder recordBuilder
	// noWait makes a write fail with errBufferFull rather than wait for
	// space: in manual mode nothing else could free it (Host.Poll runs the
	// releaser on the same goroutine).
	noWait bool
	// recordLimit bounds the payload of an entries record: a quarter of the
	// buffer's largest record.
	recordLimit int
	read        struct {
		seq     cache.Seq
		payload []byte
	}
}

var _ raft.Storage = (*logStorage)(nil)

// InitialState implements raft.Storage.
func (s *logStorage) InitialState() (raftpb.HardState, raftpb.ConfState, error) {
	return s.hard, s.conf, nil
}

// FirstIndex implements raft.Storage.
func (s *logStorage) FirstIndex() (uint64, error) { return s.snapIndex + 1, nil }

// LastIndex implements raft.Storage.
func (s *logStorage) LastIndex() (uint64, error) { return s.lastIndex(), nil }

func (s *logStorage) lastIndex() uint64 { return s.snapIndex + uint64(len(s.ents)) }

// Term implements raft.Storage.
func (s *logStorage) Term(i uint64) (uint64, error) {
	switch {
	case i < s.snapIndex:
		return 0, raft.ErrCompacted
	case i == s.snapIndex:
		return s.snapTerm, nil
	case i > s.lastIndex():
		return 0, raft.ErrUnavailable
	}
	return s.ents[i-s.snapIndex-1].term, nil
}

// matchTerm reports whether the log holds entry i with term t.
func (s *logStorage) matchTerm(i, t uint64) bool {
	term, err := s.Term(i)
	return err == nil && term == t
}

// Entries implements raft.Storage. The returned slice is freshly allocated;
// entry data alias the recent-entry cache or a record read from the buffer,
// neither of which is ever modified.
func (s *logStorage) Entries(lo, hi, maxSize uint64) ([]raftpb.Entry, error) {
	if lo <= s.snapIndex {
		return nil, raft.ErrCompacted
	}
	if hi > s.lastIndex()+1 || lo > hi {
		return nil, raft.ErrUnavailable
	}
	out := make([]raftpb.Entry, 0, min(hi-lo, 64))
	var size uint64
	for i := lo; i < hi; i++ {
		e, err := s.entry(i)
		if err != nil {
			return nil, err
		}
		size += uint64(e.Size())
		if len(out) > 0 && size > maxSize {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

// entry returns entry i, which must be in the log.
func (s *logStorage) entry(i uint64) (raftpb.Entry, error) {
	if e, ok := s.recent.get(i); ok {
		return e, nil
	}
	m := s.ents[i-s.snapIndex-1]
	payload, err := s.readRecord(m.seq)
	if err != nil {
		return raftpb.Entry{}, err
	}
	if uint64(m.offset)+uint64(m.size) > uint64(len(payload)) {
		return raftpb.Entry{}, corruptf("%v entry %d lies outside record %v", s.group, i, m.seq)
	}
	data := payload[m.offset : m.offset+m.size : m.offset+m.size]
	return raftpb.Entry{Term: m.term, Index: i, Type: m.typ, Data: data}, nil
}

// stableData returns the data of entry i, which must be in the log, as it
// lies in the log region: it aliases the buffer's memory (cache.Buffer.View)
// and stays valid until the record holding it is released, which happens
// only once the log is compacted past i, the log is checkpointed into a new
// record, or the group drops its log (see LogRetainer).
func (s *logStorage) stableData(i uint64) ([]byte, error) {
	if i <= s.snapIndex || i > s.lastIndex() {
		return nil, corruptf("%v entry %d is not in the log [%d, %d]", s.group, i, s.snapIndex+1, s.lastIndex())
	}
	m := s.ents[i-s.snapIndex-1]
	_, payload, err := s.buf.View(m.seq)
	if err != nil {
		return nil, fmt.Errorf("replication: while viewing %v's log record %v: %w", s.group, m.seq, err)
	}
	if uint64(m.offset)+uint64(m.size) > uint64(len(payload)) {
		return nil, corruptf("%v entry %d lies outside record %v", s.group, i, m.seq)
	}
	return payload[m.offset : m.offset+m.size : m.offset+m.size], nil
}

// readRecord returns the payload of record seq, keeping the last one read:
// sequential reads (apply, catch-up) then read each record once.
func (s *logStorage) readRecord(seq cache.Seq) ([]byte, error) {
	if s.read.seq == seq && s.read.payload != nil {
		return s.read.payload, nil
	}
	_, payload, err := s.buf.Read(seq, nil)
	if err != nil {
		return nil, fmt.Errorf("replication: while reading %v's log record %v: %w", s.group, seq, err)
	}
	s.read.seq, s.read.payload = seq, payload
	return payload, nil
}

// Snapshot implements raft.Storage: it describes the state machine as of the
// applied index. The data are not in it: the transport streams them from the
// state machine when it sends the MsgSnap (snapshot.go).
func (s *logStorage) Snapshot() (raftpb.Snapshot, error) {
	term, err := s.Term(s.applied)
	if err != nil {
		return raftpb.Snapshot{}, raft.ErrSnapshotTemporarilyUnavailable
	}
	return raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{
		Index: s.applied, Term: term, ConfState: s.confAt(s.applied),
	}}, nil
}

// confAt returns the configuration in force at index (>= snapIndex).
func (s *logStorage) confAt(index uint64) raftpb.ConfState {
	conf := s.conf
	for _, c := range s.confLog {
		if c.index > index {
			break
		}
		conf = c.conf
	}
	return conf
}

// recordConf notes a configuration change applied at index.
func (s *logStorage) recordConf(index uint64, conf raftpb.ConfState) {
	s.confLog = append(s.confLog, confAt{index: index, conf: conf})
}

// append persists hs and ents (which may overwrite a suffix of the log, as
// Raft requires on a conflict). The overwritten entries are dropped from the
// index at once; their records stay in the buffer until released, and
// recovery applies the same overwrite (recover.go). Entries too many for one
// record go in several, each a valid log on its own should a crash cut the
// sequence: a record's commit index never exceeds its last entry.
func (s *logStorage) append(ctx context.Context, hs raftpb.HardState, ents []raftpb.Entry) error {
	first := s.lastIndex() + 1
	if len(ents) > 0 {
		first = ents[0].Index
	}
	if first <= s.snapIndex || first > s.lastIndex()+1 {
		return fmt.Errorf("replication: %v append at %d to a log of [%d, %d]", s.group, first, s.snapIndex+1, s.lastIndex())
	}
	for {
		n := s.recordEntries(ents)
		chunk := hs
		if n < len(ents) {
			chunk.Commit = min(hs.Commit, ents[n-1].Index)
		}
		if err := s.appendRecord(ctx, chunk, first, ents[:n]); err != nil {
			return err
		}
		if ents, first = ents[n:], first+uint64(n); len(ents) == 0 {
			return nil
		}
	}
}

// recordEntries returns how many of ents (at least one, if any) fit in one
// record of at most a quarter of the buffer's largest.
func (s *logStorage) recordEntries(ents []raftpb.Entry) int {
	if s.recordLimit == 0 {
		s.recordLimit = s.buf.Stats().MaxPayload / 4
	}
	size := recordHeaderSize + 8
	for i := range ents {
		size += entryHeaderSize + len(ents[i].Data)
		if size > s.recordLimit && i > 0 {
			return i
		}
	}
	return len(ents)
}

func (s *logStorage) appendRecord(ctx context.Context, hs raftpb.HardState, first uint64, ents []raftpb.Entry) error {
	seq, err := s.write(ctx, kindEntries, s.builder.entriesRecord(s.group, hs, first, ents))
	if err != nil {
		return fmt.Errorf("replication: while persisting %v's log: %w", s.group, err)
	}
	s.ents = s.ents[:first-s.snapIndex-1]
	for i := range ents {
		e := &ents[i]
		s.ents = append(s.ents, entryMeta{term: e.Term, seq: seq, offset: s.builder.offsets[i], size: uint32(len(e.Data)), typ: e.Type})
	}
	s.hard = hs
	s.recent.put(first, ents)
	s.updatePin()
	s.passFloor()
	return nil
}

// installSnapshot replaces the log with an empty one at snap's index, as
// Raft's Ready.Snapshot demands once the state machine holds the snapshot.
func (s *logStorage) installSnapshot(ctx context.Context, hs raftpb.HardState, snap raftpb.SnapshotMetadata) error {
	pieces, err := s.builder.stateRecord(s.group, stateFlagReplace, hs, snap.Index, snap.Term, snap.ConfState, nil)
	if err != nil {
		return err
	}
	seq, err := s.write(ctx, kindState, pieces)
	if err != nil {
		return fmt.Errorf("replication: while persisting %v's snapshot state: %w", s.group, err)
	}
	s.hard, s.snapIndex, s.snapTerm, s.conf = hs, snap.Index, snap.Term, snap.ConfState
	s.confLog, s.ents, s.stateSeq, s.applied = nil, nil, seq, snap.Index
	s.recent.reset()
	s.updatePin()
	s.passFloor()
	return nil
}

// compact drops the entries up to index (<= applied) from the log: it
// persists a state record with the new snapshot point, after which the
// records holding only those entries are no longer needed.
func (s *logStorage) compact(ctx context.Context, index uint64) error {
	if index <= s.snapIndex || index > s.applied {
		return nil
	}
	term, _ := s.Term(index)
	conf := s.confAt(index)
	pieces, err := s.builder.stateRecord(s.group, 0, s.hard, index, term, conf, nil)
	if err != nil {
		return err
	}
	seq, err := s.write(ctx, kindState, pieces)
	if err != nil {
		return fmt.Errorf("replication: while persisting %v's compaction: %w", s.group, err)
	}
	s.dropPrefix(index, term, conf)
	s.stateSeq = seq
	s.updatePin()
	return nil
}

func (s *logStorage) dropPrefix(index, term uint64, conf raftpb.ConfState) {
	s.ents = append(s.ents[:0:0], s.ents[index-s.snapIndex:]...)
	s.snapIndex, s.snapTerm, s.conf = index, term, conf
	for len(s.confLog) > 0 && s.confLog[0].index <= index {
		s.confLog = s.confLog[1:]
	}
	s.recent.dropThrough(index)
}

// checkpoint rewrites the group's whole live state (hard state, snapshot
// point, configuration and every entry after it) into one new record, so
// that no older record is needed: it is how a group that writes nothing stops
// pinning the head of the shared buffer. It fails if the entries do not fit
// in one record; the group then keeps its pin until it compacts.
func (s *logStorage) checkpoint(ctx context.Context) error {
	ents, err := s.Entries(s.snapIndex+1, s.lastIndex()+1, ^uint64(0))
	if err != nil {
		return err
	}
	pieces, err := s.builder.stateRecord(s.group, stateFlagReplace, s.hard, s.snapIndex, s.snapTerm, s.conf, ents)
	if err != nil {
		return err
	}
	seq, err := s.write(ctx, kindState, pieces)
	if err != nil {
		return fmt.Errorf("replication: while checkpointing %v: %w", s.group, err)
	}
	for i := range s.ents {
		s.ents[i].seq, s.ents[i].offset = seq, s.builder.offsets[i]
	}
	s.stateSeq = seq
	s.updatePin()
	return nil
}

// checkpointCost is the size of the record checkpoint would write.
func (s *logStorage) checkpointCost() int64 {
	cost := int64(stateHeaderSize + s.conf.Size())
	for i := range s.ents {
		cost += entryCost(int(s.ents[i].size))
	}
	return cost
}

// saveHardState persists hs alone (a vote or term change without entries).
func (s *logStorage) saveHardState(ctx context.Context, hs raftpb.HardState) error {
	return s.append(ctx, hs, nil)
}

// updatePin publishes the smallest seq this group still needs.
func (s *logStorage) updatePin() {
	pin := s.stateSeq
	if len(s.ents) > 0 {
		pin = min(pin, s.ents[0].seq)
	}
	s.pin.Store(uint64(pin))
}

// A new group's log starts at a snapshot point both its index and term 1,
// with the members as voters: every member bootstraps the same state without
// configuration-change entries (raft's recommended manual bootstrap, see
// raft.NewRawNode).
const (
	bootstrapIndex = 1
	bootstrapTerm  = 1
)

// bootstrap persists a new group's initial state. A group that left a
// tombstone here starts in its term, with its vote (attachTombstone set
// them in s.hard): the empty log catches up from the leader.
func (s *logStorage) bootstrap(ctx context.Context, members []NodeID) error {
	voters := make([]uint64, 0, len(members))
	for _, m := range members {
		voters = append(voters, uint64(m))
	}
	slices.Sort(voters)
	voters = slices.Compact(voters)
	conf := raftpb.ConfState{Voters: voters}
	hs := raftpb.HardState{Term: max(bootstrapTerm, s.hard.Term), Vote: s.hard.Vote, Commit: bootstrapIndex}
	pieces, err := s.builder.stateRecord(s.group, stateFlagReplace, hs, bootstrapIndex, bootstrapTerm, conf, nil)
	if err != nil {
		return err
	}
	seq, err := s.write(ctx, kindState, pieces)
	if err != nil {
		return fmt.Errorf("replication: while persisting %v's initial state: %w", s.group, err)
	}
	s.hard, s.snapIndex, s.snapTerm, s.conf, s.applied = hs, bootstrapIndex, bootstrapTerm, conf, bootstrapIndex
	s.stateSeq = seq
	s.updatePin()
	s.passFloor()
	return nil
}

// initJoined persists the state of a group this node joins (Host.JoinGroup):
// a state record at index 0 with no configuration, so that recovery finds
// one whatever the node persists next (its term and vote, before the
// leader's snapshot arrives). A tombstone's term and vote (s.hard) carry
// over.
func (s *logStorage) initJoined(ctx context.Context) error {
	pieces, err := s.builder.stateRecord(s.group, stateFlagReplace, s.hard, 0, 0, raftpb.ConfState{}, nil)
	if err != nil {
		return err
	}
	seq, err := s.write(ctx, kindState, pieces)
	if err != nil {
		return fmt.Errorf("replication: while persisting the state of %v, which this node joins: %w", s.group, err)
	}
	s.stateSeq = seq
	s.updatePin()
	return nil
}

// errBufferFull: in manual mode, a record did not fit in the write buffer.
var errBufferFull = errors.New("replication: write buffer full (manual mode does not wait for space)")

// write appends one record of the given pieces and returns its seq once it
// is durable.
func (s *logStorage) write(ctx context.Context, kind cache.Kind, pieces [][]byte) (cache.Seq, error) {
	if s.noWait {
		size := int64(0)
		for _, p := range pieces {
			size += int64(len(p))
		}
		// A record may need padding to the end of the lap: room for twice
		// its size (with header and alignment) is always enough.
		if st := s.buf.Stats(); st.Size-st.Used < 2*(size+128) {
			return 0, fmt.Errorf("%w: %d bytes needed, %d of %d used", errBufferFull, size, st.Used, st.Size)
		}
	}
	return s.buf.Append(ctx, kind, pieces...)
}
