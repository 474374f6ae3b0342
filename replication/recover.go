package replication

import (
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/cache"
	"basalt/pkg/identity"
)

// replayState accumulates one group's records during recovery.
//
// Entries records are applied as Raft applied them: a record whose first
// index is at or below the last one overwrites the suffix from there. A
// record that leaves a gap (its first index is past the last one plus one)
// starts the list afresh: the entries below a gap belong to records already
// released, and can only be entries that were compacted (doc.go, "Releasing
// the buffer"). State records set the snapshot point; the newest wins. Only
// at the end is the list cut at the snapshot point and checked.
type replayState struct {
	state    *record   // newest kindState record
	stateSeq cache.Seq // its seq
	hard     raftpb.HardState
	base     uint64 // ents[i] has index base+1+i
	ents     []entryMeta
}

// recoverLogs rebuilds every group's log from the write buffer.
func recoverLogs(buf *cache.Buffer) (map[GroupID]*logStorage, error) {
	rec, err := recoverLog(buf)
	return rec.logs, err
}

// recovery is what the write buffer held: every group's log, the
// tombstones of groups fenced here (tombstone.go) and the log's identity
// stamp (identity.go; zero stampSeq: none).
type recovery struct {
	logs     map[GroupID]*logStorage
	tombs    map[GroupID]*tombstone
	stamp    identity.Stamp
	stampSeq cache.Seq // the newest identity record
}

// recoverLog rebuilds every group's log, the tombstones and the identity
// stamp. Every identity record in the log must carry the same stamp. A
// removal record drops its group's log and tombstone; a tombstone record
// merges into the group's tombstone, and the fence's own record (drop
// flag) drops the group's log too.
func recoverLog(buf *cache.Buffer) (recovery, error) {
	rec := recovery{tombs: make(map[GroupID]*tombstone)}
	states := make(map[GroupID]*replayState)
	err := buf.Replay(func(seq cache.Seq, kind cache.Kind, payload []byte) error {
		r, err := decodeRecord(kind, payload)
		if err != nil {
			return fmt.Errorf("record %v: %w", seq, err)
		}
		switch kind {
		case kindIdentity:
			if rec.stampSeq != 0 && r.stamp != rec.stamp {
				return corruptf("identity record %v says %v, record %v said %v", seq, r.stamp, rec.stampSeq, rec.stamp)
			}
			rec.stamp, rec.stampSeq = r.stamp, seq
			return nil
		case kindRemove:
			delete(states, r.group)
			delete(rec.tombs, r.group)
			return nil
		case kindTombstone:
			if r.flags&tombFlagDrop != 0 {
				delete(states, r.group)
			}
			rec.tomb(seq, &r)
			return nil
		}
		st := states[r.group]
		if st == nil {
			st = &replayState{}
			states[r.group] = st
		}
		st.hard = r.hard
		if kind == kindState {
			st.replayState(seq, &r)
			return nil
		}
		st.replayEntries(seq, &r)
		return nil
	})
	if err != nil {
		return recovery{}, fmt.Errorf("replication: while recovering the log: %w", err)
	}
	rec.logs = make(map[GroupID]*logStorage, len(states))
	for group, st := range states {
		s, err := st.finish(group, buf)
		if err != nil {
			return recovery{}, err
		}
		rec.logs[group] = s
	}
	return rec, nil
}

// tomb merges tombstone record r, of seq, into its group's tombstone,
// whose pin stays at the group's oldest tombstone record: the newest one
// may be a copy written before the state it merges with (tombstone.go).
func (rec *recovery) tomb(seq cache.Seq, r *record) {
	state := tombstoneState{term: r.hard.Term, vote: r.hard.Vote, floor: r.floor}
	if ts := rec.tombs[r.group]; ts != nil {
		ts.state = ts.state.merge(state)
		return
	}
	rec.tombs[r.group] = &tombstone{group: r.group, state: state, seq: seq}
}

func (st *replayState) replayEntries(seq cache.Seq, r *record) {
	if len(r.entries) == 0 {
		return
	}
	last := st.base + uint64(len(st.ents))
	switch {
	case len(st.ents) == 0 || r.first > last+1 || r.first <= st.base:
		st.base, st.ents = r.first-1, st.ents[:0]
	default:
		st.ents = st.ents[:r.first-st.base-1]
	}
	st.ents = appendRefs(st.ents, seq, r.entries)
}

func (st *replayState) replayState(seq cache.Seq, r *record) {
	st.state, st.stateSeq = r, seq
	if r.flags&stateFlagReplace != 0 {
		st.base = r.snapIndex
		st.ents = appendRefs(st.ents[:0], seq, r.entries)
	}
}

func appendRefs(ents []entryMeta, seq cache.Seq, refs []entryRef) []entryMeta {
	for _, ref := range refs {
		ents = append(ents, entryMeta{term: ref.term, seq: seq, offset: ref.offset, size: ref.size, typ: ref.typ})
	}
	return ents
}

// finish cuts the entries at the snapshot point and checks what is left: a
// state record exists, the entries after its snapshot point are all there,
// the terms agree at the cut, and the commit index lies within the log.
func (st *replayState) finish(group GroupID, buf *cache.Buffer) (*logStorage, error) {
	if st.state == nil {
		return nil, corruptf("%v has log entries but no state record", group)
	}
	snapIndex, snapTerm := st.state.snapIndex, st.state.snapTerm
	ents := st.ents
	last := st.base + uint64(len(ents))
	switch {
	case len(ents) == 0 || last == snapIndex:
		ents = nil
	case st.base > snapIndex || last < snapIndex:
		return nil, corruptf("%v: entries [%d, %d] do not continue snapshot %d", group, st.base+1, last, snapIndex)
	case st.base < snapIndex && ents[snapIndex-st.base-1].term != snapTerm:
		return nil, corruptf("%v: entry %d has term %d, snapshot says %d", group, snapIndex,
			ents[snapIndex-st.base-1].term, snapTerm)
	default:
		ents = slices.Clone(ents[snapIndex-st.base:])
	}
	s := &logStorage{
		group: group, buf: buf, hard: st.hard, snapIndex: snapIndex, snapTerm: snapTerm,
		conf: st.state.conf, ents: ents, stateSeq: st.stateSeq, applied: snapIndex,
	}
	s.hard.Commit = max(s.hard.Commit, snapIndex)
	if s.hard.Commit > s.lastIndex() {
		return nil, corruptf("%v: commit index %d beyond the last entry %d", group, s.hard.Commit, s.lastIndex())
	}
	s.updatePin()
	return s, nil
}
