package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/compress"
)

// TestCrashRecovery is the crash property test.
//
// Goal: after a power loss at any persistence point, the store recovers
// exactly the acknowledged data: every acknowledged write and trim reads
// back, and nothing else changed.
//
// Method: for each seed, a store on memory drives (disk.MemDrive), a fake
// persistent region (pmem.Fake) and in-memory metadata runs a random mix of
// writes, overwrites, short and long trims, FUA writes, flushes and
// checkpoints over two volumes small enough for the cleaner to work hard.
// Every persistence operation (drive write/sync, pmem persist, metadata
// transaction) passes a gate that trips at a random one: from then on
// nothing persists. The media are then replaced by what a power loss
// leaves (MemDrive.CrashClone: synced blocks plus a random share of the
// unsynced, some torn; pmem.Fake.CrashRegion: persisted bytes plus random
// fragments), the store is reopened, and both volumes are compared with a
// model in which only the operation cut by the crash may have gone either
// way. Several lives per seed, some ending in a clean close.
//
// The store runs in its synchronous test mode (the test goroutine runs the
// writer between operations, stripe I/O is sequential), so a seed
// determines the whole run: a failing seed, printed, replays with
// -seed=N (or BASALT_STORE_SEED=N). -seeds=N or BASALT_STORE_SEEDS=N runs
// more seeds. TestCrashRecoveryConcurrent covers the real writer goroutine.
func TestCrashRecovery(t *testing.T) {
	n := 60
	switch {
	case testing.Short():
		n = 8
	case raceEnabled:
		n = 6
	}
	for _, seed := range testSeeds(t, n) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			if err := runCrashSeed(t, seed, true /* synchronous */); err != nil {
				t.Fatalf("seed %d: %v\nreplay: go test ./pkg/store -run 'TestCrashRecovery$' -seed=%d",
					seed, err, seed)
			}
		})
	}
}

// TestCrashRecoveryFoundSeeds replays the crash-test seeds that once
// failed, every run. 290088230998: with drives 1 and 4 lost, the shutdown's
// drain cleaned for ever (each relocation, padded, used up the segment it
// freed) and Close never returned; drain now gives up after a few cleaner
// rounds per segment without progress.
func TestCrashRecoveryFoundSeeds(t *testing.T) {
	for _, seed := range []int64{290088230998} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			if err := runCrashSeed(t, seed, true /* synchronous */); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		})
	}
}

// TestCrashRecoveryConcurrent is the crash test with the writer goroutine
// running concurrently with the workload (the interleaving, and so the exact
// crash point, is not reproducible from the seed alone).
func TestCrashRecoveryConcurrent(t *testing.T) {
	n := 10
	if testing.Short() || raceEnabled {
		n = 2
	}
	for _, seed := range testSeeds(t, n) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			if err := runCrashSeed(t, seed, false /* synchronous */); err != nil {
				t.Fatalf("seed %d: %v\nrerun: go test ./pkg/store -run TestCrashRecoveryConcurrent -seed=%d",
					seed, err, seed)
			}
		})
	}
}

// modelVolume is what a volume must hold: tags[lba] (0: zeros), and for the
// blocks the crash cut an operation on, the tag that operation would have
// left.
type modelVolume struct {
	name  string
	v     *Volume
	tags  []uint64
	maybe map[int]uint64
	key   []byte // an encrypted volume's data key (set again after every open)
}

type crashRun struct {
	t       *testing.T
	rng     *rand.Rand
	r       *rig
	vols    []*modelVolume
	nextTag uint64
	sync    bool
	// lost lists the drives failed so far. A drive the store had not yet
	// noticed comes back after the crash, with stale chunks: it stays
	// counted, so that losses never exceed parity.
	lost []int
	// packed sums the volumes' packed map entries after each recovery.
	packed int
}

func crashRigConfig(rng *rand.Rand, synchronous bool) rigConfig {
	cfg := rigConfig{drives: 4, driveSize: 2 << 20, bufferSize: 256 << 10, crashable: true}
	cfg.opts = Options{ChunkSize: 16 << 10, SegmentStripes: 4, BatchStripes: 1 + rng.IntN(3),
		GCPolicy: GCPolicy(rng.IntN(2)), CheckpointStripes: 4 + rng.IntN(40),
		BufferHighWater: []float64{0.05, 0.3, 0.6}[rng.IntN(3)], PartialStripeDelay: time.Second,
		CheckpointInterval: 3 * time.Second, synchronous: synchronous}
	if rng.IntN(3) == 0 {
		cfg.drives, cfg.opts.Parity = 5, 2
	}
	cfg.faults = rng.IntN(3) == 0 // some seeds also lose drives
	cfg.opts.FlushStripes = 1 + rng.IntN(cfg.opts.BatchStripes)
	return cfg
}

func runCrashSeed(t *testing.T, seed int64, synchronous bool) error {
	return runCrashSeedWith(t, seed, synchronous, VolumeOptions{})
}

// runCrashSeedWith is runCrashSeed with both volumes created with o.
func runCrashSeedWith(t *testing.T, seed int64, synchronous bool, o VolumeOptions) error {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x73746f7265))
	c := &crashRun{t: t, rng: rng, r: newRig(t, crashRigConfig(rng, synchronous)), sync: synchronous}
	for i, blocks := range []int{120, 72} {
		name := fmt.Sprintf("v%d", i)
		vo := o
		if i == 1 && o.Compression == compress.None { // v1 is encrypted (cipher.go) unless the run compresses
			vo = VolumeOptions{Encryption: EncryptionAESXTS256, Key: randomKey(rng)}
		}
		v, err := c.r.s.CreateVolumeWith(name, int64(blocks)*BlockSize, vo)
		if err != nil {
			return err
		}
		c.vols = append(c.vols, &modelVolume{name: name, v: v, tags: make([]uint64, blocks), maybe: map[int]uint64{},
			key: vo.Key})
	}
	for life := range 4 {
		plan := planLife(rng, c.r, 60, 240)
		ops, crashAt, clean := plan.ops, plan.crashAt, plan.clean
		if err := c.workload(ops); err != nil {
			return fmt.Errorf("life %d: %w", life, err)
		}
		if err := plan.end(c.r, rng, seed*1000+int64(life)); err != nil {
			return fmt.Errorf("life %d: %w", life, err)
		}
		if err := c.verify(); err != nil {
			return fmt.Errorf("life %d (crash at op %d of the gate, clean %v): %w", life, crashAt, clean, err)
		}
		st := c.r.s.Stats()
		c.t.Logf("life %d: %d ops, crash at gate op %d (clean %v), drives lost %v; after recovery: used %d blocks, "+
			"%d buffered records, GC runs %d, relocated %d, WA %.2f, degraded reads %d", life, ops, crashAt, clean,
			c.lost, st.UsedBytes/BlockSize, st.BufferRecords, st.GCRuns, st.RelocatedBlocks, st.WriteAmplification,
			st.DegradedReads)
		for _, mv := range c.vols {
			c.packed += packedEntries(mv.v)
		}
	}
	if o.Compression != compress.None && c.packed == 0 {
		return errors.New("no block of the compressed volumes was ever packed")
	}
	return nil
}

// workload runs ops random operations, or fewer if the gate trips.
func (c *crashRun) workload(ops int) error {
	for range ops {
		if c.sync && c.rng.IntN(3) == 0 {
			c.r.s.w.work()
		}
		if c.rng.IntN(40) == 0 {
			c.r.clock.Advance(time.Duration(c.rng.IntN(4000)) * time.Millisecond)
			if c.sync {
				c.r.s.w.tick()
			}
		}
		if err := c.drainIfFull(); err != nil {
			return err
		}
		c.maybeLoseDrive()
		crashed, err := c.op()
		if err != nil {
			return err
		}
		if crashed {
			return nil
		}
	}
	return nil
}

// maybeLoseDrive fails a drive now and then, as long as the seed has lost
// fewer drives than the stripes have parity.
func (c *crashRun) maybeLoseDrive() {
	if c.r.fault == nil || len(c.lost) >= c.r.s.node.Parity || c.rng.IntN(200) != 0 {
		return
	}
	d := c.rng.IntN(len(c.r.fault))
	for slices.Contains(c.lost, d) {
		d = (d + 1) % len(c.r.fault)
	}
	c.lost = append(c.lost, d)
	c.r.fault[d].Fail()
}

// drainIfFull runs the writer when the buffer is nearly full, so an Append
// never waits forever in synchronous mode.
func (c *crashRun) drainIfFull() error {
	if !c.sync {
		return nil
	}
	for range 10 {
		st := c.r.s.buf.Stats()
		if st.Used < st.Size*6/10 || c.r.gate.crashed.Load() {
			return nil
		}
		c.r.s.w.work()
	}
	return fmt.Errorf("the writer does not drain the buffer: %+v", c.r.s.Stats())
}

// op runs one random operation and updates the model. It reports whether
// the gate has tripped (the operation's outcome is then unknown).
func (c *crashRun) op() (bool, error) {
	mv := c.vols[c.rng.IntN(len(c.vols))]
	n := len(mv.tags)
	switch k := c.rng.IntN(100); {
	case k < 60:
		lba, count := c.rng.IntN(n), 1+c.rng.IntN(4)
		count = min(count, n-lba)
		tags := make([]uint64, count)
		for i := range tags {
			c.nextTag++
			tags[i] = c.nextTag
		}
		var flags backend.WriteFlags
		if c.rng.IntN(10) == 0 {
			flags = backend.WriteFUA
		}
		buf := make([]byte, count*BlockSize)
		for i, tag := range tags {
			makeBlock(buf[i*BlockSize:], tag)
		}
		err := mv.v.WriteAt(ctx, buf, int64(lba)*BlockSize, flags)
		return c.settle(mv, lba, tags, err)
	case k < 72:
		lba := c.rng.IntN(n)
		count := min(1+c.rng.IntN(8), n-lba)
		if c.rng.IntN(4) == 0 {
			lba, count = c.rng.IntN(n/2), n/2 // a long trim: an overlay range
		}
		err := mv.v.Trim(ctx, int64(lba)*BlockSize, int64(count)*BlockSize)
		return c.settle(mv, lba, make([]uint64, count), err)
	case k < 76:
		err := c.r.s.Flush(ctx)
		return c.settle(mv, 0, nil, err)
	default:
		return c.checkRead(mv)
	}
}

// settle applies an operation's outcome to the model.
func (c *crashRun) settle(mv *modelVolume, lba int, tags []uint64, err error) (bool, error) {
	if err == nil {
		copy(mv.tags[lba:], tags)
		return false, nil
	}
	if !c.r.gate.crashed.Load() {
		if errors.Is(err, backend.ErrNoSpace) {
			return false, nil
		}
		return false, fmt.Errorf("operation failed without a crash: %w", err)
	}
	for i, tag := range tags {
		mv.maybe[lba+i] = tag
	}
	return true, nil
}

// checkRead reads a random range and compares it with the model.
func (c *crashRun) checkRead(mv *modelVolume) (bool, error) {
	n := len(mv.tags)
	lba := c.rng.IntN(n)
	count := min(1+c.rng.IntN(16), n-lba)
	got, err := tryReadTags(mv.v, uint64(lba), count)
	if err != nil {
		if c.r.gate.crashed.Load() {
			return true, nil
		}
		return false, fmt.Errorf("read of %s blocks %d..%d: %w", mv.name, lba, lba+count-1, err)
	}
	for i, tag := range got {
		if tag != mv.tags[lba+i] {
			return false, fmt.Errorf("before the crash, %s block %d reads tag %d, want %d", mv.name, lba+i,
				tag, mv.tags[lba+i])
		}
	}
	return false, nil
}

// verify reopens every volume and compares it with the model, then makes
// the model definite.
func (c *crashRun) verify() error {
	for _, mv := range c.vols {
		v, err := c.r.s.Volume(mv.name)
		if err != nil {
			return err
		}
		if mv.key != nil {
			if err := v.SetKey(mv.key); err != nil {
				return err
			}
		}
		mv.v = v
		got, err := tryReadTags(v, 0, len(mv.tags))
		if err != nil {
			return fmt.Errorf("reading %s back: %w", mv.name, err)
		}
		for lba, tag := range got {
			want := mv.tags[lba]
			alt, maybe := mv.maybe[lba]
			if tag != want && !(maybe && tag == alt) {
				return fmt.Errorf("%s block %d reads tag %d, want %d (or %d: %v)", mv.name, lba, tag, want, alt, maybe)
			}
			mv.tags[lba] = tag
		}
		mv.maybe = make(map[int]uint64)
	}
	return nil
}
