package store

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// stagedRigConfig is the default rig staging by reference, in the
// synchronous test mode unless concurrent: the test runs the writer.
func stagedRigConfig(concurrent bool) rigConfig {
	cfg := defaultRigConfig()
	cfg.opts.StageByReference = true
	cfg.opts.synchronous = !concurrent
	cfg.opts.PartialStripeDelay = time.Hour
	cfg.opts.StagedSize = 64 << 20
	return cfg
}

// taggedBlocks returns blocks made with the given tags.
func taggedBlocks(tags ...uint64) []byte {
	buf := make([]byte, len(tags)*BlockSize)
	for i, tag := range tags {
		makeBlock(buf[i*BlockSize:], tag)
	}
	return buf
}

// wantFloor fails unless v's floor is token (ok) or none (!ok).
func wantFloor(t testing.TB, v *Volume, token uint64, ok bool) {
	t.Helper()
	if got, gotOK := v.StagedFloor(); got != token || gotOK != ok {
		t.Fatalf("StagedFloor = %d, %v; want %d, %v", got, gotOK, token, ok)
	}
}

func wantTags(t testing.TB, v *Volume, lba uint64, want []uint64) {
	t.Helper()
	got := readTags(t, v, lba, len(want))
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("block %d reads tag %d, want %d", lba+uint64(i), got[i], want[i])
		}
	}
}

// TestStagedWritesReadBackBeforeAndAfterDestage: staged writes and trims
// read back from the caller's bytes, then from the drives after Flush
// (which releases them all: no floor), and after a clean reopen.
func TestStagedWritesReadBackBeforeAndAfterDestage(t *testing.T) {
	r := newRig(t, stagedRigConfig(false))
	v, err := r.s.CreateVolume("v", 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]uint64, 300)
	var held [][]byte // the caller's bytes, kept until released
	for lba := range 100 {
		p := taggedBlocks(uint64(lba + 1))
		held = append(held, p)
		if err := v.WriteStaged(p, int64(lba)*BlockSize, uint64(lba+1)); err != nil {
			t.Fatal(err)
		}
		want[lba] = uint64(lba + 1)
	}
	long := make([]uint64, 40) // three records of at most 16 blocks
	for i := range long {
		long[i] = 1000 + uint64(i)
	}
	held = append(held, taggedBlocks(long...))
	if err := v.WriteStaged(held[len(held)-1], 200*BlockSize, 101); err != nil {
		t.Fatal(err)
	}
	copy(want[200:], long)
	if err := v.TrimStaged(10*BlockSize, 10*BlockSize, 102); err != nil {
		t.Fatal(err)
	}
	clear(want[10:20])
	wantFloor(t, v, 1, true)
	wantTags(t, v, 0, want)
	st := r.s.Stats()
	if st.BufferRecords != 100+3+1 || st.BufferUsed != 140*BlockSize || st.BufferMode != "staged by reference" {
		t.Fatalf("before destage: %d records, %d bytes used, mode %q; want 104, %d, staged", st.BufferRecords,
			st.BufferUsed, st.BufferMode, 140*BlockSize)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wantFloor(t, v, 0, false)
	if st := r.s.Stats(); st.BufferRecords != 0 || st.BufferUsed != 0 || st.DestagedBlocks != 130 {
		t.Fatalf("after Flush: %d records, %d bytes, %d destaged blocks; want 0, 0, 130", st.BufferRecords,
			st.BufferUsed, st.DestagedBlocks)
	}
	for _, p := range held {
		clear(p) // released: the caller may reuse them
	}
	wantTags(t, v, 0, want)
	r.reopen()
	if v, err = r.s.Volume("v"); err != nil {
		t.Fatal(err)
	}
	wantTags(t, v, 0, want)
	wantFloor(t, v, 0, false)
}

// TestStagedFloorFollowsReleases: the floor is the token of the oldest
// record not yet released, records are released as their stripes are
// written, and tokens may repeat.
func TestStagedFloorFollowsReleases(t *testing.T) {
	cfg := stagedRigConfig(false)
	cfg.opts.FlushStripes = 1
	r := newRig(t, cfg)
	v, _ := r.s.CreateVolume("v", 4<<20)
	w, _ := r.s.CreateVolume("w", 4<<20)
	wantFloor(t, v, 0, false)
	slots := r.s.lay.shape(r.s.node.Data).slots // data blocks per stripe
	var held [][]byte
	for i := range slots + 2 {
		p := taggedBlocks(uint64(i + 1))
		held = append(held, p)
		if err := v.WriteStaged(p, int64(i)*BlockSize, 5+uint64(i/2)); err != nil { // each token twice
			t.Fatal(err)
		}
	}
	if err := w.WriteStaged(taggedBlocks(99), 0, 1); err != nil {
		t.Fatal(err)
	}
	wantFloor(t, v, 5, true)
	wantFloor(t, w, 1, true)
	r.s.w.work() // writes the full stripe; the rest waits (PartialStripeDelay is an hour)
	// The stripe holds v's first slots blocks, and completes at least the
	// records before its last (a record is released once the stripes after
	// the one it ends in started); v's next records, and w's, are in the
	// next stripe, not yet written.
	token := func(i int) uint64 { return 5 + uint64(i/2) }
	if got, ok := v.StagedFloor(); !ok || got < token(slots-1) || got > token(slots) {
		t.Fatalf("after the first stripe: floor %d, %v; want %d..%d", got, ok, token(slots-1), token(slots))
	}
	wantFloor(t, w, 1, true)
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wantFloor(t, v, 0, false)
	wantFloor(t, w, 0, false)
	if err := v.WriteStaged(held[0], 0, 4); !errors.Is(err, ErrStaging) {
		t.Fatalf("WriteStaged with a token below the previous one: %v, want ErrStaging", err)
	}
}

// TestWriteAtAndStagedWritesAreOrdered: on a store staging by reference,
// WriteAt stages a copy in the same sequence, so whichever was called last
// for a block wins, before and after destaging; WriteAt's copies hold no
// floor, and Trim and WriteZeroes work.
func TestWriteAtAndStagedWritesAreOrdered(t *testing.T) {
	r := newRig(t, stagedRigConfig(false))
	v, _ := r.s.CreateVolume("v", 4<<20)
	writeTags(t, v, 0, 1, 2, 3, 4)
	wantFloor(t, v, 0, false)
	if err := v.WriteStaged(taggedBlocks(11, 12), BlockSize, 7); err != nil {
		t.Fatal(err)
	}
	writeTags(t, v, 2, 23)
	if err := v.WriteZeroes(ctx, 3*BlockSize, BlockSize); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteStaged(taggedBlocks(15), 4*BlockSize, 8); err != nil {
		t.Fatal(err)
	}
	want := []uint64{1, 11, 23, 0, 15}
	wantTags(t, v, 0, want)
	wantFloor(t, v, 7, true)
	if err := v.WriteAt(ctx, taggedBlocks(31), 5*BlockSize, backend.WriteFUA); err != nil {
		t.Fatal(err)
	}
	wantFloor(t, v, 0, false) // FUA destaged everything
	wantTags(t, v, 0, append(want, 31))
	r.reopen()
	v, _ = r.s.Volume("v")
	wantTags(t, v, 0, append(want, 31))
}

// TestWriteStagedKeepsTheCallersBytes: the record a staged write makes
// points at the caller's bytes (a copying store's would not), and staging
// a MiB allocates far less than a MiB.
func TestWriteStagedKeepsTheCallersBytes(t *testing.T) {
	r := newRig(t, stagedRigConfig(false))
	v, _ := r.s.CreateVolume("v", 4<<20)
	p := taggedBlocks(7, 8)
	if err := v.WriteStaged(p, 0, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		ref, ok := v.v.ov.lookup(uint64(i))
		if !ok {
			t.Fatalf("block %d is not in the overlay", i)
		}
		rec, err := r.s.ring.view(ref.seq)
		if err != nil {
			t.Fatal(err)
		}
		if &rec.block(int(ref.index))[0] != &p[i*BlockSize] {
			t.Fatalf("block %d of the staged record is not the caller's block", i)
		}
	}
	wantTags(t, v, 0, []uint64{7, 8})

	big := taggedBlocks(make([]uint64, 256)...) // 1 MiB, staged 64 KiB at a time
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for off := 0; off < len(big); off += 16 * BlockSize {
		if err := v.WriteStaged(big[off:off+16*BlockSize], int64(BlockSize*16+off), 2); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 256<<10 {
		t.Fatalf("staging 1 MiB allocated %d bytes", grown)
	}
	if got := r.s.Stats().BufferUsed; got != int64(len(p)+len(big)) {
		t.Fatalf("BufferUsed = %d, want the %d bytes referenced", got, len(p)+len(big))
	}
}

// TestStagedReadChecksTheCallersBytes breaks the contract on purpose: the
// caller changes a staged block before it is released. A read then fails
// its checksum, computed when the block was staged, with ErrMedia rather
// than returning bytes that were never written (a copying store would
// return the original block).
func TestStagedReadChecksTheCallersBytes(t *testing.T) {
	r := newRig(t, stagedRigConfig(false))
	v, _ := r.s.CreateVolume("v", 4<<20)
	p := taggedBlocks(7)
	if err := v.WriteStaged(p, 0, 1); err != nil {
		t.Fatal(err)
	}
	p[100] ^= 1
	if _, err := tryReadTags(v, 0, 1); !errors.Is(err, backend.ErrMedia) {
		t.Fatalf("read of a staged block changed by its caller: %v, want ErrMedia", err)
	}
}

// TestWriteStagedAllocatesNothing: in steady state a 4 KiB WriteStaged
// allocates nothing (descriptors come from the ring, sums are inline).
func TestWriteStagedAllocatesNothing(t *testing.T) {
	r := newRig(t, stagedRigConfig(false))
	v, _ := r.s.CreateVolume("v", 4<<20)
	p := taggedBlocks(3)
	token := uint64(0)
	stage := func() {
		token++
		if err := v.WriteStaged(p, int64(token%64)*BlockSize, token); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 { // fill and release the ring a few times
		for range 700 {
			stage()
		}
		if err := r.s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 64 {
		stage()
	}
	if allocs := testing.AllocsPerRun(500, stage); allocs != 0 {
		t.Fatalf("WriteStaged allocates %v times per call", allocs)
	}
}

// TestStagedMisuseAndErrors: WriteStaged and TrimStaged fail like WriteAt
// for alignment, range and a closed store, refuse a copying store and a
// token that goes back, and give ErrNoSpace by WriteAt's capacity rule.
func TestStagedMisuseAndErrors(t *testing.T) {
	plain := newRig(t, defaultRigConfig())
	pv, _ := plain.s.CreateVolume("v", 1<<20)
	if err := pv.WriteStaged(taggedBlocks(1), 0, 1); !errors.Is(err, ErrStaging) {
		t.Fatalf("WriteStaged on a copying store: %v", err)
	}
	if err := pv.TrimStaged(0, BlockSize, 1); !errors.Is(err, ErrStaging) {
		t.Fatalf("TrimStaged on a copying store: %v", err)
	}
	wantFloor(t, pv, 0, false)

	cfg := stagedRigConfig(false)
	cfg.driveSize = 2 << 20
	r := newRig(t, cfg)
	v, _ := r.s.CreateVolume("big", 64<<20)
	for _, c := range []struct {
		err  error
		call func() error
	}{
		{backend.ErrMisaligned, func() error { return v.WriteStaged(make([]byte, 100), 0, 1) }},
		{backend.ErrMisaligned, func() error { return v.WriteStaged(taggedBlocks(1), 10, 1) }},
		{backend.ErrOutOfRange, func() error { return v.WriteStaged(taggedBlocks(1), 64<<20, 1) }},
		{backend.ErrOutOfRange, func() error { return v.TrimStaged(64<<20-BlockSize, 2*BlockSize, 1) }},
		{ErrStaging, func() error { return v.WriteStaged(taggedBlocks(1), 0, ^uint64(0)) }},
	} {
		if err := c.call(); !errors.Is(err, c.err) {
			t.Fatalf("got %v, want %v", err, c.err)
		}
	}
	capacity := uint64(r.s.Stats().CapacityBytes / BlockSize)
	var err error
	var held [][]byte
	for i := uint64(0); i < capacity+10 && err == nil; i++ {
		p := taggedBlocks(i + 1)
		held = append(held, p)
		err = v.WriteStaged(p, int64(i)*BlockSize, i+1)
		if i%64 == 0 {
			r.s.w.work()
		}
	}
	if !errors.Is(err, backend.ErrNoSpace) {
		t.Fatalf("staging past capacity %d: %v", capacity, err)
	}
	if err := v.WriteStaged(taggedBlocks(5), 3*BlockSize, capacity+20); err != nil {
		t.Fatalf("an overwrite on a full store: %v", err)
	}
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteStaged(taggedBlocks(5), 0, capacity+21); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("WriteStaged after Close: %v", err)
	}
	if err := v.TrimStaged(0, BlockSize, capacity+21); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("TrimStaged after Close: %v", err)
	}
	r.s = nil
}

// TestStagedOpenWithoutRegion: a store staging by reference needs no
// write-buffer region, and starts empty after a restart.
func TestStagedOpenWithoutRegion(t *testing.T) {
	db, err := meta.Open(meta.Options{InMemory: true, MemTableSize: 2 << 20, BlockCacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	drives := []*plainDrive{newPlainDrive(4 << 20), newPlainDrive(4 << 20), newPlainDrive(4 << 20)}
	open := func() *Store {
		opts := Options{Meta: db, StageByReference: true, ChunkSize: 16 << 10, SegmentStripes: 4,
			Clock: clock.NewManual(testEpoch)}
		for _, d := range drives {
			opts.Drives = append(opts.Drives, d)
		}
		s, err := Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	if st := s.Stats(); st.BufferSize != DefaultStagedSize {
		t.Fatalf("BufferSize %d, want the default StagedSize", st.BufferSize)
	}
	v, _ := s.CreateVolume("v", 1<<20)
	if err := v.WriteStaged(taggedBlocks(9), 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantFloor(t, v, 0, false) // Close destaged it
	for i, d := range drives {
		drives[i] = d.reopen()
	}
	s = open()
	defer s.Close()
	v, _ = s.Volume("v")
	wantTags(t, v, 0, []uint64{9})
	wantFloor(t, v, 0, false)
}

// TestFailedStoreKeepsItsFloors: once the store has failed, no staged
// record is released: the floor stays, also after Close, and staging fails.
func TestFailedStoreKeepsItsFloors(t *testing.T) {
	cfg := stagedRigConfig(false)
	cfg.faults = true
	r := newRig(t, cfg)
	v, _ := r.s.CreateVolume("v", 4<<20)
	writeStagedTags := func(lba, token uint64, tags ...uint64) error {
		return v.WriteStaged(taggedBlocks(tags...), int64(lba)*BlockSize, token)
	}
	if err := writeStagedTags(0, 1, 1, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := writeStagedTags(3, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13); err != nil {
		t.Fatal(err)
	}
	r.fault[1].Fail()
	r.fault[2].Fail() // more than the one parity chunk
	if err := r.s.Flush(ctx); err == nil {
		t.Fatal("Flush with two of four drives lost succeeded")
	}
	if r.s.Err() == nil {
		t.Fatal("the store has not failed")
	}
	wantFloor(t, v, 2, true)
	if err := writeStagedTags(20, 3, 20); !errors.Is(err, backend.ErrWriteFault) {
		t.Fatalf("WriteStaged on a failed store: %v", err)
	}
	if err := v.TrimStaged(0, BlockSize, 3); !errors.Is(err, backend.ErrWriteFault) {
		t.Fatalf("TrimStaged on a failed store: %v", err)
	}
	_ = r.s.Close()
	wantFloor(t, v, 2, true)
	r.s = nil
}

// TestStagedReleaseWaitsForReaders: a reader holding a staged record (here
// the ring's read lock, as readBlock holds it while it copies) keeps the
// record from being released and the floor from moving, and DeleteVolume
// and Close from returning.
func TestStagedReleaseWaitsForReaders(t *testing.T) {
	r := newRig(t, stagedRigConfig(true))
	v, _ := r.s.CreateVolume("v", 4<<20)
	gone, _ := r.s.CreateVolume("gone", 4<<20)
	if err := v.WriteStaged(taggedBlocks(1), 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := gone.WriteStaged(taggedBlocks(2), 0, 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Flush", func() error { return r.s.Flush(ctx) }},
		{"DeleteVolume", func() error { return r.s.DeleteVolume("gone") }},
		{"Close", func() error { return r.s.Close() }},
	} {
		r.s.ring.gate.RLock()
		var returned atomic.Bool
		done := make(chan error, 1)
		go func() { done <- c.call(); returned.Store(true) }()
		time.Sleep(50 * time.Millisecond)
		if returned.Load() {
			r.s.ring.gate.RUnlock()
			t.Fatalf("%s returned while a reader held a staged record", c.name)
		}
		if c.name == "Flush" {
			wantFloor(t, v, 1, true)
		}
		r.s.ring.gate.RUnlock()
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	wantFloor(t, v, 0, false)
	r.s = nil
}

// TestStagedFloorWaitsForTheSync: a stripe written but not yet synced
// releases nothing; the floor moves once the drives' syncs return.
func TestStagedFloorWaitsForTheSync(t *testing.T) {
	hold := &syncHold{arrived: make(chan struct{}, 16), open: make(chan struct{})}
	cfg := stagedRigConfig(true)
	cfg.opts.FlushStripes = 1
	r := newRig(t, cfg)
	v, _ := r.s.CreateVolume("v", 4<<20)
	if err := r.s.Close(); err != nil { // reopen on held drives
		t.Fatal(err)
	}
	r.s = nil
	s := openHeld(t, r, hold)
	v, _ = s.Volume("v")
	slots := s.lay.shape(s.node.Data).slots
	hold.holding.Store(true)
	for i := range slots + 1 { // one full stripe and a block
		if err := v.WriteStaged(taggedBlocks(uint64(i+1)), int64(i)*BlockSize, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-hold.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer never synced the full stripe")
	}
	time.Sleep(20 * time.Millisecond)
	wantFloor(t, v, 1, true)
	wantTags(t, v, 0, []uint64{1, 2})
	hold.holding.Store(false)
	close(hold.open)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if token, _ := v.StagedFloor(); token != 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the floor never moved after the sync")
		}
	}
	// Records up to the stripe's last but one are released for sure; the
	// block after the stripe is not.
	if got, ok := v.StagedFloor(); !ok || got < uint64(slots) || got > uint64(slots+1) {
		t.Fatalf("after the sync: floor %d, %v; want %d..%d", got, ok, slots, slots+1)
	}
}

// syncHold makes the drives' syncs wait while holding.
type syncHold struct {
	holding atomic.Bool
	arrived chan struct{}
	open    chan struct{}
}

type heldDrive struct {
	disk.Drive
	hold *syncHold
}

func (d *heldDrive) Sync() error {
	if d.hold.holding.Load() {
		select {
		case d.hold.arrived <- struct{}{}:
		default:
		}
		<-d.hold.open
	}
	return d.Drive.Sync()
}

// openHeld opens the rig's media again, its drives behind hold, with its
// options and a manual clock nobody advances (no ticks).
func openHeld(t *testing.T, r *rig, hold *syncHold) *Store {
	t.Helper()
	opts := r.opts
	opts.Meta, opts.Clock = r.db, clock.NewManual(testEpoch)
	for i, p := range r.plain {
		r.plain[i] = p.reopen()
		opts.Drives = append(opts.Drives, &heldDrive{Drive: r.plain[i], hold: hold})
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hold.holding.Store(false)
		select {
		case <-hold.open:
		default:
			close(hold.open)
		}
		_ = s.Close()
	})
	return s
}

// TestStagedConcurrentGroups: four "Raft groups" stage writes and trims on
// their own volumes at once, each overwriting its buffers with poison as
// soon as the floor lets it, while readers check that every block
// they read is one its volume's writer made for that block, and a flusher
// destages now and then. Run it with -race: the race detector sees any
// read of a caller's bytes that the floor does not order before their
// reuse.
func TestStagedConcurrentGroups(t *testing.T) {
	cfg := stagedRigConfig(true)
	cfg.driveSize = 16 << 20
	cfg.opts.StagedSize = 256 << 10
	r := newRig(t, cfg)
	const groups, blocks = 4, 96
	ops := 1500
	if raceEnabled || testing.Short() {
		ops = 400
	}
	vols := make([]*Volume, groups)
	for g := range vols {
		vols[g], _ = r.s.CreateVolume(string(rune('a'+g)), blocks*BlockSize)
	}
	finals := make([][]uint64, groups)
	var wg, readers sync.WaitGroup
	var stop atomic.Bool
	errs := make(chan error, groups+4)
	for g := range groups {
		wg.Go(func() {
			final, err := runStagedGroup(vols[g], uint64(g), blocks, ops)
			finals[g] = final
			errs <- err
		})
	}
	for i := range 2 {
		readers.Go(func() { errs <- readStagedGroups(vols, blocks, uint64(i), &stop) })
	}
	readers.Go(func() {
		for !stop.Load() {
			if err := r.s.Flush(ctx); err != nil {
				errs <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		errs <- nil
	})
	wg.Wait()
	stop.Store(true)
	readers.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for g, v := range vols {
		wantFloor(t, v, 0, false)
		wantTags(t, v, 0, finals[g])
	}
}
