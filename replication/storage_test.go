package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"basalt/cache"
	"basalt/pkg/pmem"
)

// modelLog is what a group's log must hold: the reference the storage is
// checked against after every crash.
type modelLog struct {
	hard      raftpb.HardState // in memory (commit may be ahead of the persisted one)
	persisted raftpb.HardState // as of the last record written
	snapIndex uint64
	snapTerm  uint64
	conf      raftpb.ConfState
	ents      []raftpb.Entry // from snapIndex+1
}

func (m *modelLog) last() uint64 { return m.snapIndex + uint64(len(m.ents)) }

func (m *modelLog) clone() *modelLog {
	c := *m
	c.ents = slices.Clone(m.ents)
	return &c
}

var errPowerLost = errors.New("test: power lost")

// storageHarness runs several groups' logs on one fake region.
type storageHarness struct {
	t      *testing.T
	rand   *rand.Rand
	region *pmem.Fake
	buf    *cache.Buffer
	logs   map[GroupID]*logStorage
	models map[GroupID]*modelLog
}

func newStorageHarness(t *testing.T, seed uint64, size int, groups int) *storageHarness {
	h := &storageHarness{t: t, rand: rand.New(rand.NewPCG(seed, 7)), region: pmem.NewFake(size, int64(seed)),
		logs: map[GroupID]*logStorage{}, models: map[GroupID]*modelLog{}}
	h.open()
	for id := GroupID(1); id <= GroupID(groups); id++ {
		s := &logStorage{group: id, buf: h.buf}
		s.recent.limit = 8 << 10
		s.pin.Store(uint64(h.buf.Stats().Last + 1))
		if err := s.bootstrap(context.Background(), []NodeID{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		h.logs[id] = s
		hs := raftpb.HardState{Term: 1, Commit: 1}
		h.models[id] = &modelLog{hard: hs, persisted: hs, snapIndex: 1, snapTerm: 1, conf: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}
	}
	return h
}

func (h *storageHarness) open() {
	buf, err := cache.Open(h.region, cache.Options{UUID: [16]byte{1, 2, 3}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.buf = buf
}

// crash replaces the region by its crash image and recovers every log.
func (h *storageHarness) crash() {
	h.region = h.region.CrashRegion()
	h.open()
	logs, err := recoverLogs(h.buf)
	if err != nil {
		h.t.Fatalf("recovery: %v", err)
	}
	for _, s := range logs {
		s.recent.limit = 8 << 10
	}
	h.logs = logs
}

// check compares group id's recovered log with its model.
func (h *storageHarness) check(id GroupID, m *modelLog) error {
	s := h.logs[id]
	if s == nil {
		return fmt.Errorf("%v not recovered", id)
	}
	want := m.persisted
	want.Commit = max(want.Commit, m.snapIndex)
	switch {
	case s.hard != want:
		return fmt.Errorf("%v hard state %+v, want %+v", id, s.hard, want)
	case s.snapIndex != m.snapIndex || s.snapTerm != m.snapTerm:
		return fmt.Errorf("%v snapshot (%d, %d), want (%d, %d)", id, s.snapIndex, s.snapTerm, m.snapIndex, m.snapTerm)
	case s.lastIndex() != m.last():
		return fmt.Errorf("%v last index %d, want %d", id, s.lastIndex(), m.last())
	case !slices.Equal(s.conf.Voters, m.conf.Voters):
		return fmt.Errorf("%v voters %v, want %v", id, s.conf.Voters, m.conf.Voters)
	}
	got, err := s.Entries(s.snapIndex+1, s.lastIndex()+1, ^uint64(0))
	if err != nil {
		return err
	}
	for i, e := range got {
		w := m.ents[i]
		if e.Index != w.Index || e.Term != w.Term || e.Type != w.Type || !bytes.Equal(e.Data, w.Data) {
			return fmt.Errorf("%v entry %d: got (%d, %d, %d bytes), want (%d, %d, %d bytes)", id, w.Index,
				e.Index, e.Term, len(e.Data), w.Index, w.Term, len(w.Data))
		}
	}
	return nil
}

// step runs one random operation on group id, on both the log and the model.
// It returns the model as it will be if the operation's record persists.
func (h *storageHarness) step(id GroupID) (*modelLog, error) {
	s, m := h.logs[id], h.models[id].clone()
	ctx := context.Background()
	switch r := h.rand.IntN(10); {
	case r < 5: // append, possibly overwriting the uncommitted suffix
		from := max(m.snapIndex, m.hard.Commit) + 1 + uint64(h.rand.IntN(int(m.last()-max(m.snapIndex, m.hard.Commit))+1))
		if h.rand.IntN(4) == 0 {
			m.hard.Term++
		}
		ents := make([]raftpb.Entry, 1+h.rand.IntN(5))
		for i := range ents {
			ents[i] = raftpb.Entry{Index: from + uint64(i), Term: m.hard.Term, Data: randomData(h.rand)}
		}
		m.ents = append(m.ents[:from-m.snapIndex-1], ents...)
		if h.rand.IntN(2) == 0 {
			m.hard.Commit = max(m.hard.Commit, m.last()-uint64(h.rand.IntN(3)))
		}
		m.persisted = m.hard
		return m, s.append(ctx, m.hard, ents)
	case r < 6: // a vote in a new term
		m.hard.Term++
		m.hard.Vote = uint64(1 + h.rand.IntN(3))
		m.persisted = m.hard
		return m, s.saveHardState(ctx, m.hard)
	case r < 7: // commit moves, not persisted on its own
		m.hard.Commit = max(m.hard.Commit, m.last()-uint64(min(m.last(), uint64(h.rand.IntN(3)))))
		s.hard = m.hard
		return m, nil
	case r < 9: // compact
		if m.hard.Commit <= m.snapIndex {
			return m, nil
		}
		to := m.snapIndex + 1 + uint64(h.rand.IntN(int(m.hard.Commit-m.snapIndex)))
		m.snapTerm = m.ents[to-m.snapIndex-1].Term
		m.ents = m.ents[to-m.snapIndex:]
		m.snapIndex = to
		m.persisted = m.hard
		s.applied = m.hard.Commit
		return m, s.compact(ctx, to)
	default: // checkpoint
		m.persisted = m.hard
		return m, s.checkpoint(ctx)
	}
}

func randomData(r *rand.Rand) []byte {
	b := make([]byte, r.IntN(2000))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// release frees the buffer up to the smallest pin, as the Host's releaser.
func (h *storageHarness) release() {
	last := uint64(h.buf.Stats().Last)
	low := last + 1
	for _, s := range h.logs {
		low = min(low, s.pin.Load())
	}
	if err := h.buf.Release(cache.Seq(low - 1)); err != nil {
		h.t.Fatal(err)
	}
}

// keepRoom compacts and checkpoints when the buffer fills, as groups do
// under pressure, so that Append never waits.
func (h *storageHarness) keepRoom() {
	st := h.buf.Stats()
	if st.Used*3 < st.Size {
		return
	}
	for _, id := range sortedIDs(h.logs) {
		s, m := h.logs[id], h.models[id]
		s.applied = m.hard.Commit
		if m.hard.Commit > m.snapIndex {
			m.snapTerm = m.ents[m.hard.Commit-m.snapIndex-1].Term
			m.ents = m.ents[m.hard.Commit-m.snapIndex:]
			m.snapIndex = m.hard.Commit
			if err := s.compact(context.Background(), m.snapIndex); err != nil {
				h.t.Fatal(err)
			}
		}
		if err := s.checkpoint(context.Background()); err != nil {
			h.t.Fatal(err)
		}
		m.persisted = m.hard
	}
	h.release()
}

func sortedIDs[V any](m map[GroupID]V) []GroupID {
	ids := make([]GroupID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// TestLogSurvivesCrashesAtEveryStepAndPowerLossMidRecord runs random
// appends, overwrites, votes, compactions and checkpoints of three groups
// sharing one small region, releases the region behind the slowest group as
// the Host does, and crashes it (pmem.Fake crash image) at random points,
// some of them in the middle of a record's persistence. After every crash the
// recovered hard state, snapshot point and entries must be exactly those
// persisted: for an operation cut short, those before or after it.
func TestLogSurvivesCrashesAtEveryStepAndPowerLossMidRecord(t *testing.T) {
	seeds, steps := 6, 1200
	if testing.Short() {
		seeds = 2
	}
	first, n := freshSeeds(t, "BASALT_RAFTLOG", seeds)
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h := newStorageHarness(t, seed, 4096+256<<10, 3)
			for step := 0; step < steps; step++ {
				h.keepRoom()
				id := GroupID(1 + h.rand.IntN(3))
				powerLoss := h.rand.IntN(40) == 0
				if powerLoss {
					h.region.FailAfter(h.region.PersistCalls()+h.rand.IntN(2), errPowerLost)
				}
				after, err := h.step(id)
				if err != nil && !powerLoss {
					t.Fatalf("step %d: %v", step, err)
				}
				if err == nil {
					h.models[id] = after
				}
				if !powerLoss && h.rand.IntN(8) == 0 {
					h.release()
				}
				if !powerLoss && h.rand.IntN(60) != 0 {
					continue
				}
				before := h.models[id]
				h.crash()
				for _, other := range sortedIDs(h.models) {
					if other == id {
						continue
					}
					if err := h.check(other, h.models[other]); err != nil {
						t.Fatalf("step %d: after crash: %v", step, err)
					}
				}
				if errBefore := h.check(id, before); errBefore != nil {
					if errAfter := h.check(id, after); errAfter != nil {
						t.Fatalf("step %d: after crash: %v (nor the state after: %v)", step, errBefore, errAfter)
					}
					h.models[id] = after
				}
				// Recovery forgets the unpersisted commit index.
				for _, gid := range sortedIDs(h.models) {
					m := h.models[gid]
					m.hard = h.logs[gid].hard
					m.persisted = m.hard
				}
			}
		})
	}
}

// TestStorageTermAndEntriesBounds checks raft.Storage's edges: the term of
// the snapshot point, ErrCompacted below it, ErrUnavailable past the end, and
// maxSize returning at least one entry.
func TestStorageTermAndEntriesBounds(t *testing.T) {
	h := newStorageHarness(t, 1, 4096+64<<10, 1)
	s := h.logs[1]
	ents := []raftpb.Entry{{Index: 2, Term: 2, Data: make([]byte, 100)}, {Index: 3, Term: 2, Data: make([]byte, 100)},
		{Index: 4, Term: 3, Data: make([]byte, 100)}}
	if err := s.append(context.Background(), raftpb.HardState{Term: 3, Commit: 3}, ents); err != nil {
		t.Fatal(err)
	}
	s.applied = 3
	if err := s.compact(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		index   uint64
		term    uint64
		wantErr error
	}{{1, 0, raft.ErrCompacted}, {2, 2, nil}, {3, 2, nil}, {4, 3, nil}, {5, 0, raft.ErrUnavailable}}
	for _, tt := range tests {
		term, err := s.Term(tt.index)
		if term != tt.term || !errors.Is(err, tt.wantErr) {
			t.Errorf("Term(%d) = %d, %v; want %d, %v", tt.index, term, err, tt.term, tt.wantErr)
		}
	}
	if _, err := s.Entries(2, 4, 1000); !errors.Is(err, raft.ErrCompacted) {
		t.Errorf("Entries(2, 4) = %v, want ErrCompacted", err)
	}
	got, err := s.Entries(3, 5, 1)
	if err != nil || len(got) != 1 || got[0].Index != 3 {
		t.Errorf("Entries(3, 5, maxSize 1) = %v, %v; want entry 3 alone", got, err)
	}
	got, err = s.Entries(3, 5, 1<<20)
	if err != nil || len(got) != 2 {
		t.Errorf("Entries(3, 5) = %d entries, %v", len(got), err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	snap, err := s.Snapshot()
	if first != 3 || last != 4 || err != nil || snap.Metadata.Index != 3 || snap.Metadata.Term != 2 {
		t.Errorf("first %d last %d snapshot %+v %v", first, last, snap.Metadata, err)
	}
}

// TestLargeAppendSplitsIntoRecordsThatRecoverAsPrefixes appends more
// entries than one record holds, with a power loss after each of its
// records in turn: recovery finds the log before the append plus a prefix of
// the new entries, with a commit index within it.
func TestLargeAppendSplitsIntoRecordsThatRecoverAsPrefixes(t *testing.T) {
	splits := 0
	for cut := 0; cut < 6; cut++ {
		h := newStorageHarness(t, 3, 4096+256<<10, 1)
		s := h.logs[1]
		ents := make([]raftpb.Entry, 40) // 40 x 2 KiB: three records of at most 32 KiB
		for i := range ents {
			ents[i] = raftpb.Entry{Index: uint64(2 + i), Term: 2, Data: bytes.Repeat([]byte{byte(i)}, 2048)}
		}
		h.region.FailAfter(h.region.PersistCalls()+cut, errPowerLost)
		appendErr := s.append(context.Background(), raftpb.HardState{Term: 2, Commit: 41}, ents)
		if cut == 0 && appendErr == nil {
			t.Fatal("append succeeded with no persist allowed")
		}
		h.crash()
		s = h.logs[1]
		last := s.lastIndex()
		if s.hard.Commit > last || s.hard.Commit < 1 {
			t.Fatalf("cut %d: commit %d outside [1, %d]", cut, s.hard.Commit, last)
		}
		got, err := s.Entries(2, last+1, ^uint64(0))
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range got {
			if e.Index != ents[i].Index || !bytes.Equal(e.Data, ents[i].Data) {
				t.Fatalf("cut %d: entry %d is not the appended one", cut, e.Index)
			}
		}
		if last > 1 && last < 41 {
			splits++
		}
		if appendErr == nil && last != 41 {
			t.Fatalf("cut %d: %d entries recovered after a complete append", cut, len(got))
		}
	}
	if splits == 0 {
		t.Fatal("no power loss fell between the append's records")
	}
}

// freshSeeds returns the first of n seeds and n: n is def unless
// PREFIX_SEEDS says otherwise, and the first is drawn fresh for every run
// unless PREFIX_FIRST fixes it (to replay a run, which the log names).
func freshSeeds(t *testing.T, prefix string, def int) (first, n uint64) {
	n = uint64(def)
	if v, err := strconv.ParseUint(os.Getenv(prefix+"_SEEDS"), 10, 64); err == nil && v > 0 {
		n = v
	}
	first, err := strconv.ParseUint(os.Getenv(prefix+"_FIRST"), 10, 64)
	if err != nil || first == 0 {
		first = 1 + rand.Uint64N(1<<40)
	}
	t.Logf("seeds %d..%d (%s_FIRST=%d replays them)", first, first+n-1, prefix, first)
	return first, n
}
