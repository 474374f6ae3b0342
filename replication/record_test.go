package replication

import (
	"bytes"
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/cache"
)

func joinPieces(pieces [][]byte) []byte { return bytes.Join(pieces, nil) }

func TestRecordsRoundTrip(t *testing.T) {
	var b recordBuilder
	hs := raftpb.HardState{Term: 7, Vote: 2, Commit: 40}
	ents := []raftpb.Entry{
		{Index: 41, Term: 7, Type: raftpb.EntryNormal, Data: []byte("hello")},
		{Index: 42, Term: 7, Type: raftpb.EntryConfChangeV2, Data: []byte{1, 2, 3}},
		{Index: 43, Term: 7, Type: raftpb.EntryNormal},
	}
	conf := raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	statePieces, err := b.stateRecord(9, stateFlagReplace, hs, 40, 6, conf, ents)
	if err != nil {
		t.Fatal(err)
	}
	state := joinPieces(statePieces)
	entries := joinPieces(b.entriesRecord(9, hs, 41, ents))
	remove := joinPieces(b.removeRecord(9))
	tests := []struct {
		name    string
		kind    cache.Kind
		payload []byte
		check   func(r record) bool
	}{
		{"entries", kindEntries, entries, func(r record) bool { return r.first == 41 && len(r.entries) == 3 }},
		{"state", kindState, state, func(r record) bool {
			return r.snapIndex == 40 && r.snapTerm == 6 && r.first == 41 && len(r.entries) == 3 &&
				r.flags == stateFlagReplace && len(r.conf.Learners) == 1
		}},
		{"remove", kindRemove, remove, func(r record) bool { return len(r.entries) == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := decodeRecord(tt.kind, tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			if r.group != 9 || (tt.kind != kindRemove && r.hard != hs) || !tt.check(r) {
				t.Fatalf("decoded %+v", r)
			}
			for i, ref := range r.entries {
				data := tt.payload[ref.offset : ref.offset+ref.size]
				if ref.term != ents[i].Term || ref.typ != ents[i].Type || !bytes.Equal(data, ents[i].Data) {
					t.Errorf("entry %d: %+v %q", i, ref, data)
				}
			}
		})
	}
}

// TestRecordsRejectMalformedPayloads: every corruption is ErrCorrupt, never
// a panic or a wrong record.
func TestRecordsRejectMalformedPayloads(t *testing.T) {
	var b recordBuilder
	hs := raftpb.HardState{Term: 1, Commit: 1}
	good := joinPieces(b.entriesRecord(3, hs, 2, []raftpb.Entry{{Index: 2, Term: 1, Data: []byte("abc")}}))
	mutate := func(f func(p []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name    string
		kind    cache.Kind
		payload []byte
	}{
		{"empty", kindEntries, nil},
		{"short header", kindEntries, good[:30]},
		{"bad version", kindEntries, mutate(func(p []byte) []byte { p[0] = 9; return p })},
		{"reserved bits", kindEntries, mutate(func(p []byte) []byte { p[2] = 1; return p })},
		{"group zero", kindEntries, mutate(func(p []byte) []byte { clear(p[8:16]); return p })},
		{"entry count too large", kindEntries, mutate(func(p []byte) []byte { p[4] = 200; return p })},
		{"entry data past the end", kindEntries, mutate(func(p []byte) []byte { p[48+12] = 99; return p })},
		{"entry type unknown", kindEntries, mutate(func(p []byte) []byte { p[48+8] = 7; return p })},
		{"trailing bytes", kindEntries, append(bytes.Clone(good), 0)},
		{"truncated entry", kindEntries, good[:len(good)-1]},
		{"unknown kind", 99, good},
		{"remove with flags", kindRemove, mutate(func(p []byte) []byte { p[1] = 1; return p[:recordHeaderSize] })},
		{"state too short", kindState, good[:recordHeaderSize+8]},
		{"entries with flags", kindEntries, mutate(func(p []byte) []byte { p[1] = 1; return p })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeRecord(tt.kind, tt.payload); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeRecord = %v, want ErrCorrupt", err)
			}
		})
	}
}

func FuzzDecodeRecord(f *testing.F) {
	var b recordBuilder
	hs := raftpb.HardState{Term: 2, Vote: 1, Commit: 5}
	ents := []raftpb.Entry{{Index: 6, Term: 2, Data: []byte("x")}, {Index: 7, Term: 2}}
	f.Add(uint8(kindEntries), joinPieces(b.entriesRecord(1, hs, 6, ents)))
	pieces, _ := b.stateRecord(1, stateFlagReplace, hs, 5, 2, raftpb.ConfState{Voters: []uint64{1}}, ents)
	f.Add(uint8(kindState), joinPieces(pieces))
	f.Add(uint8(kindRemove), joinPieces(b.removeRecord(1)))
	f.Add(uint8(kindIdentity), joinPieces(b.identityRecord(testStamp(1))))
	f.Add(uint8(kindTombstone), joinPieces(b.tombstoneRecord(1, tombstoneState{term: 3, vote: 2, floor: logPoint{9, 3}}, true)))
	f.Fuzz(func(t *testing.T, kind uint8, payload []byte) {
		r, err := decodeRecord(cache.Kind(kind), payload)
		if err != nil {
			return
		}
		for _, ref := range r.entries {
			if uint64(ref.offset)+uint64(ref.size) > uint64(len(payload)) {
				t.Fatalf("entry %+v outside a %d-byte payload", ref, len(payload))
			}
		}
	})
}
