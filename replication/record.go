package replication

import (
	"encoding/binary"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/cache"
	"basalt/pkg/identity"
)

// Record kinds in the log region (doc.go, "Log records").
const (
	kindEntries cache.Kind = 1
	kindState   cache.Kind = 2
	kindRemove  cache.Kind = 3
	// kindIdentity carries the log's identity stamp (identity.go); group 0.
	kindIdentity cache.Kind = 4
	// kindTombstone keeps what Raft needs of a group whose log was dropped
	// here (tombstone.go).
	kindTombstone cache.Kind = 5
)

const (
	recordVersion     = 1
	recordHeaderSize  = 40
	stateHeaderSize   = recordHeaderSize + 24
	entryHeaderSize   = 16
	stateFlagReplace  = 1 << 0 // kindState: the record carries the whole log after its snapshot
	tombFlagDrop      = 1 << 0 // kindTombstone: the group's earlier records are dropped (a fence)
	maxConfStateBytes = 1 << 16
)

// record is a decoded log record. Entry data are not copied: each entryRef
// gives the offset of the entry's data in the record's payload.
type record struct {
	kind    cache.Kind
	flags   uint8
	group   GroupID
	hard    raftpb.HardState
	first   uint64 // index of entries[0]
	entries []entryRef
	// kindState only:
	snapIndex, snapTerm uint64
	conf                raftpb.ConfState
	// kindIdentity only:
	stamp identity.Stamp
	// kindTombstone only: the last entry of the log it recorded.
	floor logPoint
}

// entryRef locates one entry's data inside a record payload.
type entryRef struct {
	term   uint64
	typ    raftpb.EntryType
	offset uint32
	size   uint32
}

// recordBuilder assembles a record as a list of payload pieces, so that entry
// data go from the caller's buffers straight into the write buffer (one copy,
// cache.Buffer.Append's). offsets receives each entry's data offset.
type recordBuilder struct {
	head    []byte
	pieces  [][]byte
	size    int
	offsets []uint32
}

func (b *recordBuilder) reset() {
	b.head = b.head[:0]
	clear(b.pieces)
	b.pieces = b.pieces[:0]
	b.size = 0
	b.offsets = b.offsets[:0]
}

// start writes the common header; count is the number of entries to follow.
func (b *recordBuilder) start(flags uint8, count int, group GroupID, hs raftpb.HardState) {
	b.reset()
	h := make([]byte, recordHeaderSize, stateHeaderSize)
	h[0] = recordVersion
	h[1] = flags
	binary.LittleEndian.PutUint32(h[4:], uint32(count))
	binary.LittleEndian.PutUint64(h[8:], uint64(group))
	binary.LittleEndian.PutUint64(h[16:], hs.Term)
	binary.LittleEndian.PutUint64(h[24:], hs.Vote)
	binary.LittleEndian.PutUint64(h[32:], hs.Commit)
	b.head = h
}

func (b *recordBuilder) add(piece []byte) {
	b.pieces = append(b.pieces, piece)
	b.size += len(piece)
}

// addEntries appends the entries, each a 16-byte header then its data.
func (b *recordBuilder) addEntries(ents []raftpb.Entry) {
	headers := make([]byte, entryHeaderSize*len(ents))
	for i := range ents {
		e := &ents[i]
		h := headers[i*entryHeaderSize : (i+1)*entryHeaderSize]
		binary.LittleEndian.PutUint64(h[0:], e.Term)
		h[8] = byte(e.Type)
		binary.LittleEndian.PutUint32(h[12:], uint32(len(e.Data)))
		b.add(h)
		b.offsets = append(b.offsets, uint32(b.size))
		if len(e.Data) > 0 {
			b.add(e.Data)
		}
	}
}

// entriesRecord builds a kindEntries record: the hard state and entries
// starting at ents[0].Index (possibly none: a hard-state record).
func (b *recordBuilder) entriesRecord(group GroupID, hs raftpb.HardState, first uint64, ents []raftpb.Entry) [][]byte {
	b.start(0, len(ents), group, hs)
	b.head = binary.LittleEndian.AppendUint64(b.head, first)
	b.add(b.head)
	b.addEntries(ents)
	return b.pieces
}

// stateRecord builds a kindState record: snapshot point, configuration, and,
// with stateFlagReplace, the whole log after the snapshot (ents).
func (b *recordBuilder) stateRecord(group GroupID, flags uint8, hs raftpb.HardState, snapIndex, snapTerm uint64,
	conf raftpb.ConfState, ents []raftpb.Entry) ([][]byte, error) {
	confBytes, err := conf.Marshal()
	if err != nil {
		return nil, fmt.Errorf("replication: while encoding a configuration: %w", err)
	}
	if len(confBytes) > maxConfStateBytes {
		return nil, fmt.Errorf("replication: configuration of %d bytes is too large", len(confBytes))
	}
	b.start(flags, len(ents), group, hs)
	b.head = binary.LittleEndian.AppendUint64(b.head, snapIndex)
	b.head = binary.LittleEndian.AppendUint64(b.head, snapTerm)
	b.head = binary.LittleEndian.AppendUint32(b.head, uint32(len(confBytes)))
	b.head = binary.LittleEndian.AppendUint32(b.head, 0)
	b.add(b.head)
	if len(confBytes) > 0 {
		b.add(confBytes)
	}
	b.addEntries(ents)
	return b.pieces, nil
}

// removeRecord builds a kindRemove record.
func (b *recordBuilder) removeRecord(group GroupID) [][]byte {
	b.start(0, 0, group, raftpb.HardState{})
	b.add(b.head)
	return b.pieces
}

// tombstoneRecordSize is the payload of a kindTombstone record.
const tombstoneRecordSize = recordHeaderSize + 16

// tombstoneRecord builds a kindTombstone record: the header with the term
// and vote (commit zero), then the floor's index and term. drop marks the
// record that drops the group's log (a fence) rather than a copy.
func (b *recordBuilder) tombstoneRecord(group GroupID, t tombstoneState, drop bool) [][]byte {
	var flags uint8
	if drop {
		flags = tombFlagDrop
	}
	b.start(flags, 0, group, raftpb.HardState{Term: t.term, Vote: t.vote})
	b.head = binary.LittleEndian.AppendUint64(b.head, t.floor.index)
	b.head = binary.LittleEndian.AppendUint64(b.head, t.floor.term)
	b.add(b.head)
	return b.pieces
}

func (r *record) decodeTombstone(p []byte, count uint32) error {
	if r.flags&^tombFlagDrop != 0 || count != 0 || len(p) != tombstoneRecordSize {
		return corruptf("tombstone record: flags %#x, count %d, %d bytes", r.flags, count, len(p))
	}
	r.floor = logPoint{index: binary.LittleEndian.Uint64(p[recordHeaderSize:]),
		term: binary.LittleEndian.Uint64(p[recordHeaderSize+8:])}
	if r.hard.Term == 0 || r.hard.Commit != 0 || r.floor.term > r.hard.Term {
		return corruptf("tombstone record: term %d, commit %d, last entry (%d, %d)", r.hard.Term, r.hard.Commit,
			r.floor.index, r.floor.term)
	}
	return nil
}

// identityRecordSize is the payload of a kindIdentity record.
const identityRecordSize = recordHeaderSize + 32

// identityRecord builds a kindIdentity record: the header with group 0 and
// no hard state, then the cluster and node UUIDs.
func (b *recordBuilder) identityRecord(s identity.Stamp) [][]byte {
	b.start(0, 0, 0, raftpb.HardState{})
	b.head = append(b.head, s.Cluster[:]...)
	b.head = append(b.head, s.Node[:]...)
	b.add(b.head)
	return b.pieces
}

func (r *record) decodeIdentity(p []byte, count uint32) error {
	if r.flags != 0 || count != 0 || len(p) != identityRecordSize || r.hard != (raftpb.HardState{}) {
		return corruptf("identity record: flags %#x, count %d, %d bytes", r.flags, count, len(p))
	}
	copy(r.stamp.Cluster[:], p[recordHeaderSize:])
	copy(r.stamp.Node[:], p[recordHeaderSize+16:])
	if !r.stamp.Complete() {
		return corruptf("identity record with a zero UUID: %v", r.stamp)
	}
	return nil
}

// decodeRecord parses and checks a record payload. It never panics on
// malformed input; every inconsistency is an ErrCorrupt error.
func decodeRecord(kind cache.Kind, p []byte) (record, error) {
	r := record{kind: kind}
	if len(p) < recordHeaderSize {
		return r, corruptf("record of %d bytes is shorter than its header", len(p))
	}
	if p[0] != recordVersion {
		return r, corruptf("record version %d", p[0])
	}
	r.flags = p[1]
	count := binary.LittleEndian.Uint32(p[4:])
	r.group = GroupID(binary.LittleEndian.Uint64(p[8:]))
	r.hard = raftpb.HardState{
		Term:   binary.LittleEndian.Uint64(p[16:]),
		Vote:   binary.LittleEndian.Uint64(p[24:]),
		Commit: binary.LittleEndian.Uint64(p[32:]),
	}
	if p[2] != 0 || p[3] != 0 || (r.group == 0) != (kind == kindIdentity) {
		return r, corruptf("record header has reserved bits set or group %v in a record of kind %v", r.group, kind)
	}
	switch kind {
	case kindEntries:
		if r.flags != 0 || len(p) < recordHeaderSize+8 {
			return r, corruptf("entries record: flags %#x, %d bytes", r.flags, len(p))
		}
		r.first = binary.LittleEndian.Uint64(p[recordHeaderSize:])
		return r, r.decodeEntries(p, recordHeaderSize+8, count)
	case kindState:
		return r, r.decodeState(p, count)
	case kindRemove:
		if r.flags != 0 || count != 0 || len(p) != recordHeaderSize {
			return r, corruptf("remove record: flags %#x, count %d, %d bytes", r.flags, count, len(p))
		}
		return r, nil
	case kindIdentity:
		return r, r.decodeIdentity(p, count)
	case kindTombstone:
		return r, r.decodeTombstone(p, count)
	default:
		return r, corruptf("unknown record kind %v", kind)
	}
}

func (r *record) decodeState(p []byte, count uint32) error {
	if r.flags&^stateFlagReplace != 0 || len(p) < stateHeaderSize {
		return corruptf("state record: flags %#x, %d bytes", r.flags, len(p))
	}
	if r.flags&stateFlagReplace == 0 && count != 0 {
		return corruptf("compaction record carries %d entries", count)
	}
	r.snapIndex = binary.LittleEndian.Uint64(p[recordHeaderSize:])
	r.snapTerm = binary.LittleEndian.Uint64(p[recordHeaderSize+8:])
	confSize := int(binary.LittleEndian.Uint32(p[recordHeaderSize+16:]))
	if binary.LittleEndian.Uint32(p[recordHeaderSize+20:]) != 0 || confSize > len(p)-stateHeaderSize {
		return corruptf("state record: configuration of %d bytes in %d", confSize, len(p))
	}
	if err := r.conf.Unmarshal(p[stateHeaderSize : stateHeaderSize+confSize]); err != nil {
		return corruptf("state record: configuration: %v", err)
	}
	r.first = r.snapIndex + 1
	if r.first == 0 {
		return corruptf("state record: snapshot index overflows")
	}
	return r.decodeEntries(p, stateHeaderSize+confSize, count)
}

// decodeEntries reads count entries from p[at:], which they must fill exactly.
func (r *record) decodeEntries(p []byte, at int, count uint32) error {
	if uint64(count) > uint64(len(p)-at)/entryHeaderSize {
		return corruptf("%d entries cannot fit in %d bytes", count, len(p)-at)
	}
	if r.first+uint64(count) < r.first {
		return corruptf("entry indexes overflow")
	}
	r.entries = make([]entryRef, count)
	for i := range r.entries {
		if len(p)-at < entryHeaderSize {
			return corruptf("entry %d: header cut short", i)
		}
		h := p[at : at+entryHeaderSize]
		typ := raftpb.EntryType(h[8])
		size := binary.LittleEndian.Uint32(h[12:])
		if h[9]|h[10]|h[11] != 0 || typ > raftpb.EntryConfChangeV2 {
			return corruptf("entry %d: type %d or reserved bits set", i, h[8])
		}
		at += entryHeaderSize
		if uint64(size) > uint64(len(p)-at) {
			return corruptf("entry %d: %d bytes of data, %d left", i, size, len(p)-at)
		}
		r.entries[i] = entryRef{term: binary.LittleEndian.Uint64(h), typ: typ, offset: uint32(at), size: size}
		at += int(size)
	}
	if at != len(p) {
		return corruptf("%d bytes after the last entry", len(p)-at)
	}
	return nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
