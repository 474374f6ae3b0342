package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"basalt/pkg/backend"
)

// TestStagedCrashRecovery is the crash property test of staging by
// reference.
//
// Goal: a caller that keeps every staged write's bytes until the floor
// passes its token, and after a power loss replays, in order, every write
// whose token is at or above the floor it last read, gets back every write
// it acknowledged, and nothing else.
//
// Method: TestCrashRecovery's (crash-capable memory drives, a gate that
// stops every persistence at a random operation, some seeds losing drives,
// several lives per seed, some ending in a clean Close), with a store
// staging by reference: a random mix of staged writes (up to 20 blocks, so
// some span two records), short and long staged trims, flushes and reads
// over two volumes, each volume's tokens increasing or repeating. The
// caller's log holds each write's bytes; as soon as a volume's floor passes
// a token, the bytes are overwritten with poison, so a store that reads a
// released write reads poison, which no check accepts. At the crash the
// dead store is closed, the floors read, the log cut at them, the store
// reopened and the rest of the log replayed; then both volumes must read
// exactly as the model says.
//
// Synchronous mode: a seed determines the run. A run draws a fresh first
// seed and logs it; BASALT_STORE_FIRST=N replays the run, BASALT_STORE_SEED=N
// (or -seed=N) one seed, BASALT_STORE_SEEDS (-seeds) runs more.
func TestStagedCrashRecovery(t *testing.T) {
	n := 40
	switch {
	case testing.Short():
		n = 8
	case raceEnabled:
		n = 6
	}
	for _, seed := range testSeeds(t, n) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			if err := runStagedCrashSeed(t, seed); err != nil {
				t.Fatalf("seed %d: %v\nreplay: BASALT_STORE_SEED=%d go test ./pkg/store -run 'TestStagedCrashRecovery$'",
					seed, err, seed)
			}
		})
	}
}

// stagedCrash is a crash run whose writes are staged: crashRun's model and
// checks, and the caller's log of what it staged.
type stagedCrash struct {
	*crashRun
	logs   [][]stagedEntry // per volume, oldest first
	tokens []uint64        // per volume: the last token given
}

// stagedEntry is a staged write or trim the caller keeps until released.
type stagedEntry struct {
	token      uint64
	lba, count int
	data       []byte // nil: a trim
	// unstaged: the store refused it because it had failed at the crash;
	// the caller applies it after the restart whatever the floor.
	unstaged bool
}

func runStagedCrashSeed(t *testing.T, seed int64) error {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7374616765))
	cfg := crashRigConfig(rng, true)
	cfg.opts.StageByReference = true
	cfg.opts.StagedSize = []int64{256 << 10, 1 << 20}[rng.IntN(2)]
	c := &stagedCrash{crashRun: &crashRun{t: t, rng: rng, r: newRig(t, cfg), sync: true}}
	// Smaller volumes than TestCrashRecovery's: 80 blocks fit even the
	// capacity left with two drives of five lost (96 blocks). The caller
	// replays through WriteStaged, which admits by capacity as WriteAt
	// does, so on a store holding more than its degraded capacity a replay
	// to an unmapped block would be refused with ErrNoSpace (a write
	// buffer's records are recovered without admission).
	for i, blocks := range []int{48, 32} {
		name := fmt.Sprintf("v%d", i)
		v, err := c.r.s.CreateVolume(name, int64(blocks)*BlockSize)
		if err != nil {
			return err
		}
		c.vols = append(c.vols, &modelVolume{name: name, v: v, tags: make([]uint64, blocks), maybe: map[int]uint64{}})
	}
	c.logs, c.tokens = make([][]stagedEntry, len(c.vols)), make([]uint64, len(c.vols))
	for life := range 4 {
		plan := planLife(rng, c.r, 60, 240)
		ops, crashAt, clean := plan.ops, plan.crashAt, plan.clean
		if err := c.workload(ops); err != nil {
			return fmt.Errorf("life %d: %w", life, err)
		}
		if err := c.restart(clean, seed*1000+int64(life)); err != nil {
			return fmt.Errorf("life %d: %w", life, err)
		}
		if err := c.verify(); err != nil {
			return fmt.Errorf("life %d (crash at op %d of the gate, clean %v): %w", life, crashAt, clean, err)
		}
		held := 0
		for _, l := range c.logs {
			held += len(l)
		}
		st := c.r.s.Stats()
		c.t.Logf("life %d: %d ops, crash at gate op %d (clean %v), drives lost %v; replayed %d writes; after: "+
			"used %d blocks, %d staged records, GC runs %d, WA %.2f", life, ops, crashAt, clean, c.lost, held,
			st.UsedBytes/BlockSize, st.BufferRecords, st.GCRuns, st.WriteAmplification)
	}
	return nil
}

// workload runs ops random operations, or fewer if the crash stops the
// store.
func (c *stagedCrash) workload(ops int) error {
	for range ops {
		if c.rng.IntN(3) == 0 {
			c.r.s.w.work()
		}
		if c.rng.IntN(40) == 0 {
			c.r.clock.Advance(time.Duration(c.rng.IntN(4000)) * time.Millisecond)
			c.r.s.w.tick()
		}
		c.maybeLoseDrive()
		crashed, err := c.op()
		if err != nil {
			return err
		}
		c.releaseBelowFloors()
		if crashed {
			return nil
		}
	}
	return nil
}

// op runs one random operation and updates the model; it reports whether
// the operation failed because of the crash.
func (c *stagedCrash) op() (bool, error) {
	vi := c.rng.IntN(len(c.vols))
	mv := c.vols[vi]
	n := len(mv.tags)
	if c.rng.IntN(4) != 0 {
		c.tokens[vi]++ // else the token repeats
	}
	e := stagedEntry{token: c.tokens[vi], lba: c.rng.IntN(n)}
	switch k := c.rng.IntN(100); {
	case k < 55:
		e.count = min(1+c.rng.IntN(20), n-e.lba)
		e.data = make([]byte, e.count*BlockSize)
		for i := range e.count {
			c.nextTag++
			makeBlock(e.data[i*BlockSize:], c.nextTag)
		}
		return c.stage(vi, e, mv.v.WriteStaged(e.data, int64(e.lba)*BlockSize, e.token))
	case k < 67:
		e.count = min(1+c.rng.IntN(8), n-e.lba)
		if c.rng.IntN(4) == 0 {
			e.lba, e.count = c.rng.IntN(n/2), n/2 // a long trim: an overlay range
		}
		return c.stage(vi, e, mv.v.TrimStaged(int64(e.lba)*BlockSize, int64(e.count)*BlockSize, e.token))
	case k < 71:
		err := c.r.s.Flush(ctx)
		if err == nil {
			for _, mv := range c.vols {
				if floor, ok := mv.v.StagedFloor(); ok {
					return false, fmt.Errorf("%s: floor %d after a Flush", mv.name, floor)
				}
			}
		}
		return c.settle(mv, 0, nil, err)
	default:
		return c.checkRead(mv)
	}
}

// stage records a staged operation's outcome in the model and the log.
func (c *stagedCrash) stage(vi int, e stagedEntry, err error) (bool, error) {
	crashed := c.r.gate.crashed.Load()
	switch {
	case err == nil:
	case !crashed && errors.Is(err, backend.ErrNoSpace):
		return false, nil
	case crashed && (errors.Is(err, backend.ErrWriteFault) || errors.Is(err, backend.ErrNoSpace)):
		// The store failed, or lost every drive to the crash's failed
		// writes: the write is in the caller's log, which applies it again
		// after the restart.
		e.unstaged = true
	default:
		return false, fmt.Errorf("staging %d blocks at %d (token %d, crashed %v): %w", e.count, e.lba, e.token,
			crashed, err)
	}
	c.logs[vi] = append(c.logs[vi], e)
	tags := c.vols[vi].tags[e.lba : e.lba+e.count]
	for i := range tags {
		tags[i] = 0
		if e.data != nil {
			tags[i] = binaryTag(e.data[i*BlockSize:])
		}
	}
	return e.unstaged, nil
}

func binaryTag(block []byte) uint64 {
	tag, _ := blockTag(block)
	return tag
}

// releaseBelowFloors drops, poisoning their bytes, the logged writes each
// volume's floor has passed.
func (c *stagedCrash) releaseBelowFloors() {
	for vi, mv := range c.vols {
		floor, ok := mv.v.StagedFloor()
		log := c.logs[vi]
		for len(log) > 0 && !log[0].unstaged && (!ok || log[0].token < floor) {
			poison(log[0].data)
			log = log[1:]
		}
		c.logs[vi] = log
	}
}

// restart ends the life (a clean Close, or the crash), reads the floors the
// dead store left, cuts the logs there, reopens and replays the rest.
func (c *stagedCrash) restart(clean bool, seed int64) error {
	if clean {
		c.r.reopen()
	} else {
		c.r.crash(seed, []int{0, 30, 100}[c.rng.IntN(3)])
	}
	c.releaseBelowFloors() // the old handles keep the floors Close left
	if !clean {
		if err := c.r.tryOpen(); err != nil {
			return fmt.Errorf("reopening after the crash: %w", err)
		}
	}
	for vi, mv := range c.vols {
		v, err := c.r.s.Volume(mv.name)
		if err != nil {
			return err
		}
		mv.v = v
		for i := range c.logs[vi] {
			e := &c.logs[vi][i]
			e.unstaged = false
			off := int64(e.lba) * BlockSize
			if e.data != nil {
				err = v.WriteStaged(e.data, off, e.token)
			} else {
				err = v.TrimStaged(off, int64(e.count)*BlockSize, e.token)
			}
			if err != nil {
				return fmt.Errorf("replaying %s token %d: %w", mv.name, e.token, err)
			}
		}
	}
	return nil
}
