package sim

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/cryptotest"
	"time"
)

var (
	flagSeeds    = flag.Int("sim.seeds", 0, "number of seeds to run (default: 4, or 1 with -short)")
	flagFirst    = flag.Uint64("sim.first", 0, "first seed of the run (default: drawn fresh each run)")
	flagSeed     = flag.Uint64("sim.seed", 0, "replay this one seed (with -v: its trace)")
	flagDuration = flag.Duration("sim.duration", 6*time.Second, "simulated time of the chaotic phase per seed")
	flagStore    = flag.String("sim.store", "", "the stores' mode: copy or staged (default: each seed draws one)")
	flagMembers  = flag.Bool("sim.membership", true, "change the groups' membership during the run (false: never)")
)

// storeModeFlag returns the mode -sim.store asks for (0: the seed's).
func storeModeFlag(t *testing.T) storeMode {
	switch *flagStore {
	case "":
		return 0
	case "copy":
		return storeCopy
	case "staged":
		return storeStaged
	}
	t.Fatalf("-sim.store=%q: want copy or staged", *flagStore)
	return 0
}

// TestSim runs the simulation for several seeds. A failure names its seed;
// -sim.seed=S replays it exactly, and with -v prints its trace.
func TestSim(t *testing.T) {
	seeds := []uint64{}
	switch {
	case *flagSeed != 0:
		seeds = append(seeds, *flagSeed)
	default:
		n := *flagSeeds
		if n == 0 {
			n = 4
			if testing.Short() {
				n = 1
			}
		}
		first := *flagFirst
		if first == 0 {
			first = 1 + rand.Uint64N(1<<40)
		}
		t.Logf("seeds %d..%d (-sim.first=%d replays them)", first, first+uint64(n)-1, first)
		for i := range uint64(n) {
			seeds = append(seeds, first+i)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s := runSeed(t, seed, *flagSeed != 0 && testing.Verbose(), *flagDuration, storeModeFlag(t))
			if s.failure != nil {
				t.Fatalf("seed %d failed: %v\nreplay: go test ./tests/sim -run 'TestSim$' -sim.seed=%d -v", seed, s.failure, seed)
			}
			t.Logf("seed %d (%v stores, %d+%d): %d writes acknowledged, %d unknown, %d reads checked (%d failed), "+
				"%d crashes (%d power losses, %d blackouts), %d partitions, %d transfers, %d drives lost; %s; %s; network %+v", seed,
				s.opts.store.mode, s.opts.store.drives-s.opts.store.parity, s.opts.store.parity, s.stats.acked,
				s.stats.unknown, s.stats.reads, s.stats.readErrors, s.stats.crashes, s.stats.powerLosses, s.stats.blackouts,
				s.stats.partitions, s.stats.transfers, s.stats.drivesLost, s.stats.membership, s.storeTotals(), s.net.Stats())
		})
	}
}

// runSeed runs one seed: the chaotic phase, then convergence and the final
// checks, then a power loss of every node at once, and the checks again.
func runSeed(t *testing.T, seed uint64, verbose bool, d time.Duration, mode storeMode) *sim {
	cryptotest.SetGlobalRandom(t, seed) // Raft's election timeouts
	s := newSim(t, seed, verbose, mode)
	s.run(d, true)
	if s.failure == nil {
		s.converge()
	}
	if s.failure == nil {
		s.blackout()
		s.converge()
	}
	s.endChanges()
	return s
}

// TestSimIsDeterministic runs one seed twice with each store mode and
// compares the digests of their traces (which include the stores'
// counters): a seed must replay exactly.
func TestSimIsDeterministic(t *testing.T) {
	for _, mode := range []storeMode{storeCopy, storeStaged} {
		var digests [2]uint64
		for i := range digests {
			s := runSeed(t, 42, false, time.Second, mode)
			if s.failure != nil {
				t.Fatalf("seed 42 (%v stores): %v", mode, s.failure)
			}
			digests[i] = s.trace.Sum64()
		}
		if digests[0] != digests[1] {
			t.Fatalf("two runs of seed 42 (%v stores) differ: trace digests %x and %x", mode, digests[0], digests[1])
		}
	}
}

// foundSeeds are seeds that found bugs, each replayed on every run (with
// -short too): as long as the code they ran through is unchanged they take
// the same path, and after a change they remain runs the model checks.
var foundSeeds = []struct {
	seed uint64
	bug  string
}{
	{7002, "a node that joined and lost power before the leader's snapshot could not recover its log"},
	{30043, "a member rejoined with an empty log voted for a candidate with an old configuration: a committed one was lost"},
	{30037, "a member restarted with an old configuration refused the members added since, the leader among them"},
	{40143, "a member cut off while a node was added refused the new leader for ever"},
}

// TestSimFoundSeeds replays foundSeeds.
func TestSimFoundSeeds(t *testing.T) {
	if *flagSeed != 0 {
		t.Skip("-sim.seed replays one seed in TestSim")
	}
	for _, f := range foundSeeds {
		t.Run(fmt.Sprintf("seed=%d", f.seed), func(t *testing.T) {
			s := runSeed(t, f.seed, false, *flagDuration, storeModeFlag(t))
			if s.failure != nil {
				t.Fatalf("seed %d (it found: %s) failed: %v\nreplay: go test ./tests/sim -run 'TestSim$' -sim.seed=%d -v",
					f.seed, f.bug, s.failure, f.seed)
			}
		})
	}
}
