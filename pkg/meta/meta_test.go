package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func openTest(t *testing.T, dir string) *DB {
	t.Helper()
	opts := Options{Dir: dir, InMemory: dir == ""}
	db, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return db
}

func TestOptionsValidateReportsEveryProblem(t *testing.T) {
	o := Options{MemTableSize: 10, BlockCacheSize: -1}
	err := o.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad options")
	}
	for _, want := range []string{"Dir is required", "MemTableSize", "BlockCacheSize"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestRecordsRoundTripAndSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir)
	node := NodeInfo{FormatVersion: FormatVersion, NodeUUID: [16]byte{1, 2}, Drives: 4, Data: 3,
		Parity: 1, ChunkSize: 65536, SegmentStripes: 16, Segments: 100}
	segs := []SegmentInfo{
		{ID: 7, State: SegmentOpen, Gen: 2, AllocSeq: 10, Data: 3, Parity: 1, Columns: []uint32{0, 1, 2, 3}},
		{ID: 3, State: SegmentSealed, Gen: 1, AllocSeq: 1, SealSeq: 9, Data: 2, Parity: 1, Columns: []uint32{0, 1, 3}},
	}
	err := db.Update(func(tx *Tx) error {
		for _, step := range []error{
			tx.PutNode(node),
			tx.PutDrive(DriveInfo{Index: 1, UUID: [16]byte{9}, Size: 1 << 30, State: DriveFailed}),
			tx.PutDrive(DriveInfo{Index: 0, UUID: [16]byte{8}, Size: 1 << 30}),
			tx.PutVolume(VolumeInfo{ID: 2, Name: "b", Size: 8192, BlockSize: 4096}),
			tx.PutVolume(VolumeInfo{ID: 1, Name: "a", Size: 4096, BlockSize: 4096}),
			tx.PutSegment(segs[0]), tx.PutSegment(segs[1]),
			tx.PutGCStats(GCStats{Runs: 3, RelocatedBlocks: 4}),
		} {
			if step != nil {
				return step
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir)
	defer db.Close()
	got, ok, err := db.Node()
	if err != nil || !ok || got.NodeUUID != node.NodeUUID || got.Segments != 100 {
		t.Fatalf("Node = %+v, %v, %v", got, ok, err)
	}
	drives, _ := db.Drives()
	if len(drives) != 2 || drives[0].Index != 0 || drives[1].State != DriveFailed {
		t.Errorf("Drives = %+v", drives)
	}
	vols, _ := db.Volumes()
	if len(vols) != 2 || vols[0].Name != "a" || vols[1].ID != 2 {
		t.Errorf("Volumes = %+v", vols)
	}
	gotSegs, _ := db.Segments()
	if len(gotSegs) != 2 || gotSegs[0].ID != 3 || gotSegs[1].Columns[3] != 3 {
		t.Errorf("Segments = %+v", gotSegs)
	}
	gc, _ := db.GCStats()
	if gc.Runs != 3 {
		t.Errorf("GCStats = %+v", gc)
	}
	// A free segment keeps its row and generation; a deleted volume's goes.
	err = db.Update(func(tx *Tx) error {
		if err := tx.PutSegment(SegmentInfo{ID: 3, State: SegmentFree, Gen: 1}); err != nil {
			return err
		}
		return tx.DeleteVolume(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := db.Segments(); len(s) != 2 || s[0].State != SegmentFree || s[0].Gen != 1 {
		t.Errorf("after freeing: %+v", s)
	}
	if v, _ := db.Volumes(); len(v) != 1 || v[0].ID != 2 {
		t.Errorf("after deleting: %+v", v)
	}
}

func TestNodeRefusesUnknownVersion(t *testing.T) {
	db := openTest(t, "")
	defer db.Close()
	if err := db.Update(func(tx *Tx) error { return tx.PutNode(NodeInfo{FormatVersion: 99}) }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.Node(); !errors.Is(err, ErrVersion) {
		t.Fatalf("Node: %v, want ErrVersion", err)
	}
}

func TestCorruptRecordIsReported(t *testing.T) {
	db := openTest(t, "")
	defer db.Close()
	if err := db.db.Update(func(txn *badger.Txn) error {
		return txn.Set(keyU32(prefixVolume, 1), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Volumes(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Volumes: %v, want ErrCorrupt", err)
	}
}

func chunkData(seed uint64, n int) []byte {
	b := make([]byte, 8*n)
	for i := range n {
		binary.LittleEndian.PutUint64(b[8*i:], seed*1000003+uint64(i))
	}
	return b
}

func TestCheckpointGenerationsReplaceEachOther(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir)
	write := func(seed uint64, chunks int) CheckpointHead {
		t.Helper()
		w, err := db.BeginCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		for c := range chunks {
			// Enough data to need several transactions.
			if err := w.Put(VolumeID(1), uint32(c*2), chunkData(seed+uint64(c), ChunkEntries)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Put(VolumeID(5), 0, chunkData(seed, 10)); err != nil {
			t.Fatal(err)
		}
		head, err := w.Commit(CheckpointHead{Seq: seed, BufferSeq: seed + 1})
		if err != nil {
			t.Fatal(err)
		}
		return head
	}
	write(1, 40)
	head := write(2, 30)
	if head.Gen != 2 || len(head.Volumes) != 2 || len(head.Volumes[0].Chunks) != 30 {
		t.Fatalf("head = gen %d, %d volumes", head.Gen, len(head.Volumes))
	}
	// An abandoned third checkpoint leaves stray chunks that Open removes.
	w, _ := db.BeginCheckpoint()
	for c := range 10 {
		_ = w.Put(1, uint32(c), chunkData(99, ChunkEntries))
	}
	_ = w.flush()
	db.Close()
	db = openTest(t, dir)
	defer db.Close()
	got, ok, err := db.Checkpoint()
	if err != nil || !ok || got.Gen != 2 || got.Seq != 2 {
		t.Fatalf("Checkpoint = %+v %v %v", got, ok, err)
	}
	seen := 0
	err = db.ReadCheckpoint(got, func(vol VolumeID, chunk uint32, data []byte) error {
		var want []byte
		if vol == 5 {
			want = chunkData(2, 10)
		} else {
			want = chunkData(2+uint64(chunk/2), ChunkEntries)
		}
		if !bytes.Equal(data, want) {
			t.Errorf("chunk %v/%d differs", vol, chunk)
		}
		seen++
		return nil
	})
	if err != nil || seen != 31 {
		t.Fatalf("ReadCheckpoint: %d chunks, %v", seen, err)
	}
	if n := countChunkKeys(db); n != 31 {
		t.Errorf("%d chunk keys stored, want 31 (older generations deleted)", n)
	}
}

func countChunkKeys(db *DB) int {
	n := 0
	_ = db.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefixChunk)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	return n
}

func TestCheckpointWriterRejectsOutOfOrderChunks(t *testing.T) {
	db := openTest(t, "")
	defer db.Close()
	w, _ := db.BeginCheckpoint()
	if err := w.Put(1, 3, chunkData(1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Put(1, 3, chunkData(1, 1)); err == nil {
		t.Fatal("repeated chunk accepted")
	}
	if _, err := w.Commit(CheckpointHead{}); err == nil {
		t.Fatal("Commit after an error succeeded")
	}
	if _, ok, _ := db.Checkpoint(); ok {
		t.Fatal("failed checkpoint is in force")
	}
}

func TestReadCheckpointDetectsMissingChunk(t *testing.T) {
	db := openTest(t, "")
	defer db.Close()
	w, _ := db.BeginCheckpoint()
	_ = w.Put(1, 0, chunkData(1, 4))
	head, err := w.Commit(CheckpointHead{})
	if err != nil {
		t.Fatal(err)
	}
	head.Volumes[0].Chunks = append(head.Volumes[0].Chunks, 9)
	err = db.ReadCheckpoint(head, func(VolumeID, uint32, []byte) error { return nil })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadCheckpoint: %v, want ErrCorrupt", err)
	}
}

type countingGate struct {
	refuse  atomic.Bool
	entered atomic.Int32
}

func (g *countingGate) Enter() error {
	if g.refuse.Load() {
		return errors.New("crashed")
	}
	g.entered.Add(1)
	return nil
}
func (g *countingGate) Exit() {}

func TestGateBracketsEveryWrite(t *testing.T) {
	g := &countingGate{}
	db, err := Open(Options{InMemory: true, Gate: g})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *Tx) error { return tx.PutGCStats(GCStats{Runs: 1}) }); err != nil {
		t.Fatal(err)
	}
	if g.entered.Load() != 1 {
		t.Fatalf("gate entered %d times", g.entered.Load())
	}
	g.refuse.Store(true)
	err = db.Update(func(tx *Tx) error { return tx.PutGCStats(GCStats{Runs: 2}) })
	if !errors.Is(err, ErrGate) {
		t.Fatalf("Update past a closed gate: %v", err)
	}
	if s, _ := db.GCStats(); s.Runs != 1 {
		t.Fatalf("refused write applied: %+v", s)
	}
	db.SetGate(nil)
	if err := db.Update(func(tx *Tx) error { return tx.PutGCStats(GCStats{Runs: 3}) }); err != nil {
		t.Fatal(err)
	}
}
