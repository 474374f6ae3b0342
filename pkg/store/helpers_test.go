package store

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
)

var (
	flagSeed  = flag.Int64("seed", 0, "run the crash test for this seed only (also BASALT_STORE_SEED)")
	flagSeeds = flag.Int("seeds", 0, "number of crash-test seeds (also BASALT_STORE_SEEDS)")
)

// testSeeds returns the seeds to run: -seed or BASALT_STORE_SEED alone,
// else n consecutive seeds (-seeds or BASALT_STORE_SEEDS overriding n) from
// a first seed drawn fresh for every run (BASALT_STORE_FIRST fixes it), so
// that runs explore new seeds; the first seed is logged and a failure
// names its own.
func testSeeds(t *testing.T, n int) []int64 {
	if *flagSeed != 0 {
		return []int64{*flagSeed}
	}
	if v, err := strconv.ParseInt(os.Getenv("BASALT_STORE_SEED"), 10, 64); err == nil {
		return []int64{v}
	}
	if *flagSeeds > 0 {
		n = *flagSeeds
	} else if v, err := strconv.Atoi(os.Getenv("BASALT_STORE_SEEDS")); err == nil && v > 0 {
		n = v
	}
	first, err := strconv.ParseInt(os.Getenv("BASALT_STORE_FIRST"), 10, 64)
	if err != nil || first <= 0 {
		first = 1 + rand.Int64N(1<<40)
	}
	t.Logf("crash seeds %d..%d (BASALT_STORE_FIRST=%d replays them)", first, first+int64(n)-1, first)
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = first + int64(i)
	}
	return seeds
}

var testEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rig is a store on memory drives, a fake persistent region and in-memory
// metadata, which can be reopened (cleanly or after a simulated crash).
type rig struct {
	t         testing.TB
	opts      Options            // as given, without Drives, Buffer, Meta
	mem       []*disk.MemDrive   // crash-capable drives, or nil
	plain     []*plainDrive      // or plain memory drives
	fault     []*disk.FaultDrive // nil when no fault wrappers
	faultOpts disk.FaultOptions
	region    *pmem.Fake
	// memoryBuffer: see rigConfig.
	memoryBuffer bool
	db           *meta.DB
	gate         *crashGate
	clock        *clock.Manual
	s            *Store
}

type rigConfig struct {
	drives     int
	driveSize  int64
	bufferSize int
	faults     bool // wrap drives in FaultDrives
	// faultOpts configure the FaultDrives (their Clock is the rig's).
	faultOpts disk.FaultOptions
	// crashable uses disk.MemDrive, which models power loss but copies the
	// whole drive at every Sync (slow under the race detector); otherwise
	// plainDrive.
	crashable bool
	// memoryBuffer gives the store a fresh pmem.Memory buffer at every open,
	// as a cluster node's store has: nothing in it survives a crash.
	memoryBuffer bool
	opts         Options
}

func defaultRigConfig() rigConfig {
	return rigConfig{drives: 4, driveSize: 4 << 20, bufferSize: 512 << 10,
		opts: Options{ChunkSize: 16 << 10, SegmentStripes: 4, BatchStripes: 4}}
}

func newRig(t testing.TB, cfg rigConfig) *rig {
	t.Helper()
	db, err := meta.Open(meta.Options{InMemory: true, MemTableSize: 2 << 20, BlockCacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, opts: cfg.opts, region: pmem.NewFake(cfg.bufferSize, 1), db: db,
		clock: clock.NewManual(testEpoch), faultOpts: cfg.faultOpts, memoryBuffer: cfg.memoryBuffer}
	r.faultOpts.Clock = r.clock
	for range cfg.drives {
		if cfg.crashable {
			r.mem = append(r.mem, disk.NewMem(cfg.driveSize))
		} else {
			r.plain = append(r.plain, newPlainDrive(cfg.driveSize))
		}
	}
	if cfg.faults {
		for i := range cfg.drives {
			r.fault = append(r.fault, disk.NewFault(r.inner(i), r.faultOpts, int64(i)))
		}
	}
	t.Cleanup(func() {
		if r.s != nil {
			_ = r.s.Close()
		}
		_ = r.db.Close()
	})
	r.open()
	return r
}

// open opens the store on the rig's current drives and region.
func (r *rig) open() {
	r.t.Helper()
	if err := r.tryOpen(); err != nil {
		r.t.Fatalf("Open: %v", err)
	}
}

func (r *rig) tryOpen() error {
	opts := r.opts
	opts.Meta = r.db
	opts.Clock = r.clock
	r.gate = &crashGate{}
	r.db.SetGate(r.gate)
	for i := range max(len(r.mem), len(r.plain)) {
		d := r.inner(i)
		if r.fault != nil {
			d = r.fault[i]
		}
		opts.Drives = append(opts.Drives, &gatedDrive{Drive: d, gate: r.gate})
	}
	opts.Buffer = &gatedRegion{Region: r.region, gate: r.gate}
	if r.memoryBuffer {
		region, err := pmem.NewMemory(r.region.Size())
		if err != nil {
			return err
		}
		opts.Buffer = &gatedRegion{Region: region, gate: r.gate}
	}
	s, err := Open(opts)
	r.s = s
	return err
}

// reopen closes the store cleanly and opens it again on the same media.
func (r *rig) reopen() {
	r.t.Helper()
	if err := r.s.Close(); err != nil {
		r.t.Fatalf("Close: %v", err)
	}
	r.s = nil
	r.region = pmem.NewFakeImage(r.region.Persisted(), 2)
	for i, m := range r.mem {
		failed := r.fault != nil && r.fault[i].Failed() // its last writes may never have been synced
		if m.UnsyncedBlocks() != 0 && !failed {
			r.t.Fatalf("drive %d has unsynced writes after a clean Close", i)
		}
		r.mem[i] = m.CrashClone(0, 0)
	}
	for i, p := range r.plain {
		r.plain[i] = p.reopen()
	}
	for i := range r.fault {
		r.fault[i] = disk.NewFault(r.inner(i), r.faultOpts, int64(i))
	}
	r.open()
}

// inner returns drive i below any fault wrapper.
func (r *rig) inner(i int) disk.Drive {
	if r.mem != nil {
		return r.mem[i]
	}
	return r.plain[i]
}

// crash stops every persistence at once (if the gate has not tripped
// already), closes the dead store, and replaces the media by what a power
// loss leaves: persisted pmem plus random fragments, synced drive blocks
// plus keepPct% of the unsynced ones (some torn).
func (r *rig) crash(seed int64, keepPct int) {
	r.gate.crash()
	_ = r.s.Close()
	r.s = nil
	r.region = r.region.CrashRegion()
	for i, m := range r.mem {
		r.mem[i] = m.CrashClone(seed+int64(i), keepPct)
		if r.fault != nil {
			r.fault[i] = disk.NewFault(r.mem[i], r.faultOpts, int64(i))
		}
	}
}

// plainDrive is a memory drive without a power-loss model: Sync does
// nothing. It checks the Drive contract like disk.MemDrive does.
type plainDrive struct {
	mu     sync.Mutex
	data   []byte
	closed bool
}

func newPlainDrive(size int64) *plainDrive { return &plainDrive{data: make([]byte, size)} }

// reopen returns a new, open drive on the same bytes.
func (d *plainDrive) reopen() *plainDrive { return &plainDrive{data: d.data} }

func (d *plainDrive) check(p []byte, off int64) error {
	if !disk.IsAligned(p) || off%BlockSize != 0 {
		return disk.ErrMisaligned
	}
	if off < 0 || off+int64(len(p)) > int64(len(d.data)) {
		return disk.ErrOutOfRange
	}
	if d.closed {
		return disk.ErrClosed
	}
	return nil
}

func (d *plainDrive) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(p, off); err != nil {
		return 0, err
	}
	return copy(p, d.data[off:]), nil
}

func (d *plainDrive) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(p, off); err != nil {
		return 0, err
	}
	return copy(d.data[off:], p), nil
}

func (d *plainDrive) Discard(off, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.data[off : off+n])
	return nil
}

func (d *plainDrive) Sync() error    { return nil }
func (d *plainDrive) Size() int64    { return int64(len(d.data)) }
func (d *plainDrive) BlockSize() int { return BlockSize }
func (d *plainDrive) Close() error   { d.mu.Lock(); d.closed = true; d.mu.Unlock(); return nil }

var errCrashed = errors.New("simulated power loss")

// crashGate brackets every persistence operation (drive write, sync and
// discard; pmem persist; metadata transaction). The crash is one instant:
// operations in flight finish first, none starts after. It can trip by
// itself at the at-th operation.
type crashGate struct {
	mu      sync.RWMutex
	ops     atomic.Int64
	at      atomic.Int64
	crashed atomic.Bool
}

func (g *crashGate) Enter() error {
	if g.crashed.Load() {
		return errCrashed
	}
	if n := g.ops.Add(1); n == g.at.Load() {
		g.crash()
		return errCrashed
	}
	g.mu.RLock()
	if g.crashed.Load() {
		g.mu.RUnlock()
		return errCrashed
	}
	return nil
}

func (g *crashGate) Exit() { g.mu.RUnlock() }

func (g *crashGate) crash() {
	g.mu.Lock()
	g.crashed.Store(true)
	g.mu.Unlock()
}

type gatedDrive struct {
	disk.Drive
	gate *crashGate
}

func (d *gatedDrive) WriteAt(p []byte, off int64) (int, error) {
	if err := d.gate.Enter(); err != nil {
		return 0, err
	}
	defer d.gate.Exit()
	return d.Drive.WriteAt(p, off)
}

func (d *gatedDrive) Sync() error {
	if err := d.gate.Enter(); err != nil {
		return err
	}
	defer d.gate.Exit()
	return d.Drive.Sync()
}

func (d *gatedDrive) Discard(off, n int64) error {
	if err := d.gate.Enter(); err != nil {
		return err
	}
	defer d.gate.Exit()
	return d.Drive.Discard(off, n)
}

type gatedRegion struct {
	pmem.Region
	gate *crashGate
}

func (r *gatedRegion) Persist(off, n int) error {
	if err := r.gate.Enter(); err != nil {
		return err
	}
	defer r.gate.Exit()
	return r.Region.Persist(off, n)
}

// makeBlock returns the content of a block written with tag (0: zeros):
// the tag, then bytes derived from it, so a stale or misplaced block is
// told apart from the right one. A tag divisible by 3 makes a block that
// compresses (each word repeated 8 times), the others random bytes.
func makeBlock(dst []byte, tag uint64) {
	if tag == 0 {
		clear(dst[:BlockSize])
		return
	}
	x := tag*0x9E3779B97F4A7C15 + 1
	every := 8
	if tag%3 == 0 {
		every = 64
	}
	for i := 0; i < BlockSize; i += 8 {
		if i%every == 0 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		binary.LittleEndian.PutUint64(dst[i:], x)
	}
	binary.LittleEndian.PutUint64(dst, tag)
}

// blockTag returns the tag a block was made with, or ok false if it is no
// block makeBlock makes.
func blockTag(b []byte) (uint64, bool) {
	tag := binary.LittleEndian.Uint64(b)
	want := make([]byte, BlockSize)
	makeBlock(want, tag)
	if tag == 0 {
		return 0, allZero(b[:BlockSize])
	}
	return tag, string(want) == string(b[:BlockSize])
}

// writeTags writes blocks with the given tags at lba.
func writeTags(t testing.TB, v *Volume, lba uint64, tags ...uint64) {
	t.Helper()
	buf := make([]byte, len(tags)*BlockSize)
	for i, tag := range tags {
		makeBlock(buf[i*BlockSize:], tag)
	}
	if err := v.WriteAt(context.Background(), buf, int64(lba)*BlockSize, 0); err != nil {
		t.Fatalf("WriteAt(lba %d, %d blocks): %v", lba, len(tags), err)
	}
}

// readTags reads n blocks at lba and returns their tags.
func readTags(t testing.TB, v *Volume, lba uint64, n int) []uint64 {
	t.Helper()
	tags, err := tryReadTags(v, lba, n)
	if err != nil {
		t.Fatalf("ReadAt(lba %d, %d blocks): %v", lba, n, err)
	}
	return tags
}

func tryReadTags(v *Volume, lba uint64, n int) ([]uint64, error) {
	buf := make([]byte, n*BlockSize)
	if err := v.ReadAt(context.Background(), buf, int64(lba)*BlockSize); err != nil {
		return nil, err
	}
	tags := make([]uint64, n)
	for i := range tags {
		tag, ok := blockTag(buf[i*BlockSize:])
		if !ok {
			return nil, errors.New("block " + strconv.Itoa(int(lba)+i) + " holds data no write made")
		}
		tags[i] = tag
	}
	return tags, nil
}

// overwriteTags writes every block of the first n of v once, then 3n more
// at random LBAs (rng seeded with seed), each block tagged with its write's
// number; step, if not nil, runs every 8 writes. It returns the tag each
// block holds.
func overwriteTags(t testing.TB, v *Volume, n int, seed uint64, step func()) []uint64 {
	t.Helper()
	want := make([]uint64, n)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range 4 * n {
		lba := i % n
		if i >= n {
			lba = rng.IntN(n)
		}
		want[lba] = uint64(i + 1)
		writeTags(t, v, uint64(lba), want[lba])
		if step != nil && i%8 == 0 {
			step()
		}
	}
	return want
}

// checkLiveCounts checks that the segments' live counts sum to the mapped
// blocks, and that no sealed segment counts more live blocks than its
// capacity (packed slots included).
func checkLiveCounts(t testing.TB, s *Store) {
	t.Helper()
	var live int64
	for _, g := range s.segs {
		live += g.live.Load()
		if g.getState() == meta.SegmentSealed && g.live.Load() > g.capacity() {
			t.Fatalf("%v: %d live blocks, capacity %d", g.id, g.live.Load(), g.capacity())
		}
	}
	if used := s.Stats().UsedBytes / BlockSize; live != used {
		t.Fatalf("segments count %d live blocks, maps %d", live, used)
	}
}
