package sim

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
	"basalt/pkg/store"
	"basalt/pkg/volume"
	"basalt/replication"
)

// Geometry of the simulated cluster.
const (
	nodeCount    = 4 // the initial voters and a spare (membership_test.go)
	groupCount   = 2
	blockSize    = 4096
	volumeBlocks = 48
	volumeSize   = volumeBlocks * blockSize
	regionSize   = 4096 + 1<<20 // each node's write buffer: a 1 MiB log
	stepLength   = time.Millisecond
	maxInFlight  = 6 // operations in flight per volume
)

// members are each group's voters at the start; the other nodes are spares
// that the membership changes bring in (membership_test.go).
var members = []replication.NodeID{1, 2, 3}

var nodeIDs = []replication.NodeID{1, 2, 3, 4}

var errPowerLost = errors.New("sim: power lost")

// options vary per seed, so that the seeds cover several configurations.
type options struct {
	lease      bool
	margin     uint64
	dropRate   float64
	crashRate  float64 // per step
	writeRate  float64 // per step and volume
	powerLoss  float64 // share of crashes that cut a persist short
	partitions float64 // per step
	driveLoss  float64 // per step: a drive of some node fails for good
	store      storeOptions
	membership float64 // per step and group: a membership change starts
}

func optionsFor(r *rand.Rand, mode storeMode) options {
	if mode == 0 {
		mode = []storeMode{storeCopy, storeStaged}[r.IntN(2)]
	}
	return options{
		lease:      r.IntN(4) != 0,
		margin:     []uint64{4, 16, 64}[r.IntN(3)],
		dropRate:   []float64{0, 0.01, 0.05}[r.IntN(3)],
		crashRate:  0.0004 + r.Float64()*0.0008,
		writeRate:  0.05 + r.Float64()*0.25,
		powerLoss:  0.3,
		partitions: 0.0002 + r.Float64()*0.0004,
		driveLoss:  []float64{0, 0.0002, 0.0005}[r.IntN(3)],
		store:      storeOptionsFor(r, mode),
		membership: membershipRate(r),
	}
}

// simNode is one node: its persistent media (Raft log region, drives,
// metadata) survive its crashes, as a power loss leaves them; its Host and
// Store do not.
type simNode struct {
	id     replication.NodeID
	region *pmem.Fake
	drives []*disk.MemDrive
	lost   []bool // drives failed for good
	db     *meta.DB

	// This life's.
	power     *power
	faults    []*disk.FaultDrive // over drives
	store     *store.Store
	locals    [groupCount]*store.Volume // the replicas
	host      *replication.Host
	vols      [groupCount]*volume.Volume
	lastTick  time.Time
	counts    storeCounts
	downUntil time.Time               // when a crashed node restarts
	groups    [groupCount]memberState // survives crashes
	crashAt   time.Time               // power loss armed: crash then
	failing   bool
}

func (n *simNode) up() bool { return n.host != nil }

// simOp is a write, trim or read in flight.
type simOp struct {
	seq    uint64
	node   *simNode
	group  int
	first  int64 // block
	count  int64
	id     uint64 // write ID (0: trim); unused for reads
	read   bool
	buf    []byte
	issued time.Time
	done   bool
}

type sim struct {
	t     *testing.T
	seed  uint64
	rand  *rand.Rand
	opts  options
	clock *clock.Manual
	net   *replication.SimNetwork
	log   *slog.Logger
	nodes []*simNode
	model [groupCount][]blockModel

	inflight    []*simOp
	opSeq       uint64
	nextWriteID uint64
	healAt      time.Time // a partition is in force until then
	leaders     map[[2]uint64]replication.NodeID
	mem         [groupCount]groupMembership
	calls       []*changeCall
	sweeps      []*sweep
	aiming      bool // faults aimed at the membership changes (with chaos)
	trace       hash.Hash64
	verbose     bool
	failure     error
	stats       struct {
		acked, unknown, reads, readErrors, crashes, powerLosses, blackouts, partitions, transfers, drivesLost uint64
		membership                                                                                            memberStats
	}
}

func newSim(t *testing.T, seed uint64, verbose bool, mode storeMode) *sim {
	r := rand.New(rand.NewPCG(seed, 0xBA5A17))
	s := &sim{
		t: t, seed: seed, rand: r, opts: optionsFor(r, mode), verbose: verbose,
		clock:   clock.NewManual(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)),
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		leaders: make(map[[2]uint64]replication.NodeID),
		trace:   fnv.New64a(),
	}
	if verbose {
		s.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo,
			ReplaceAttr: dropTime}))
	}
	s.net = replication.NewSimNetwork(seed, s.clock)
	s.net.SetOptions(replication.SimOptions{DelayMin: time.Millisecond, DelayMax: 6 * time.Millisecond,
		DropRate: s.opts.dropRate, DuplicateRate: s.opts.dropRate / 2})
	for g := range groupCount {
		s.model[g] = make([]blockModel, volumeBlocks)
		for b := range s.model[g] {
			s.model[g][b].possible = []uint64{0} // never written: zeroes
		}
	}
	s.tracef("options %+v", s.opts)
	s.initMembership()
	for _, id := range nodeIDs {
		n := &simNode{id: id}
		if slices.Contains(members, id) {
			n.groups = [groupCount]memberState{bootstrapMember, bootstrapMember}
		}
		if err := s.newNodeMedia(n); err != nil {
			s.failf("%v", err)
			return s
		}
		s.nodes = append(s.nodes, n)
		s.start(n)
	}
	return s
}

// dropTime leaves out the records' real time, so that a replayed trace
// reads the same.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// tracef records an event in the run's digest (and the test log when
// verbose); two runs of a seed must produce the same digest.
func (s *sim) tracef(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", s.clock.Now().Sub(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)).Seconds()) +
		fmt.Sprintf(format, args...)
	s.trace.Write([]byte(line))
	if s.verbose {
		s.t.Log(line)
	}
}

// failf records the first check that failed; the run stops at the end of
// the step.
func (s *sim) failf(format string, args ...any) {
	if s.failure == nil {
		s.failure = fmt.Errorf(format, args...)
		s.tracef("FAILED: %v", s.failure)
	}
}

// start opens node n's store on its drives and metadata, then its Host on
// its region, and joins the volumes it is a member of with the store's as
// replicas (startGroups).
func (s *sim) start(n *simNode) {
	if err := s.openStore(n); err != nil {
		s.failf("%v", err)
		return
	}
	h, err := replication.NewHost(replication.Config{
		NodeID: n.id, LogRegion: poweredRegion{Fake: n.region, power: n.power}, Clock: s.clock, Logger: s.log.With("node", n.id),
		TickInterval: 10 * time.Millisecond, Transport: s.net.Endpoint(n.id), Manual: true,
		CompactionMargin: s.opts.margin, DisableLease: !s.opts.lease, EntryCacheSize: 64 << 10,
	})
	if err != nil {
		s.failf("%v: recovery failed: %v", n.id, err)
		return
	}
	if err := h.Start(); err != nil {
		s.failf("%v: start: %v", n.id, err)
		return
	}
	if err := s.startGroups(n, h); err != nil {
		s.failf("%v", err)
		return
	}
	n.host = h
}

// settle delivers messages, polls the hosts and runs the stores' work
// until nothing moves.
func (s *sim) settle() {
	for range 10000 {
		busy := s.net.Deliver() > 0
		for _, n := range s.nodes {
			if n.up() {
				busy = n.host.Poll() || busy
				s.storeWork(n)
			}
		}
		if !busy {
			return
		}
	}
	s.failf("the cluster did not settle within one step (livelock)")
}

// run advances the simulation by d, with the random workload and faults
// when chaos is set.
func (s *sim) run(d time.Duration, chaos bool) {
	end := s.clock.Now().Add(d)
	for s.clock.Now().Before(end) && s.failure == nil {
		s.settle()
		if chaos {
			s.chaos()
		}
		s.lifecycle()
		s.membership(chaos)
		s.settle()
		for _, n := range s.nodes {
			if n.up() {
				s.storeTimers(n)
			}
		}
		s.checkLeaders()
		s.clock.Advance(stepLength)
	}
}

// chaos draws this step's operations and faults.
func (s *sim) chaos() {
	r := s.rand
	for g := range groupCount {
		if r.Float64() < s.opts.writeRate {
			s.write(g, r.IntN(10) == 0)
		}
		if r.Float64() < s.opts.writeRate/2 {
			s.read(g)
		}
		if r.Float64() < 0.002 {
			s.writeToFollower(g)
		}
		if r.Float64() < 0.0003 {
			s.transfer(g)
		}
	}
	if r.Float64() < s.opts.crashRate {
		s.crashSomeone()
	}
	if s.healAt.IsZero() && r.Float64() < s.opts.partitions {
		s.partition()
	}
	if r.Float64() < s.opts.driveLoss {
		s.loseDrive()
	}
}

// lifecycle carries out scheduled restarts, heals and power losses.
func (s *sim) lifecycle() {
	now := s.clock.Now()
	for _, n := range s.nodes {
		switch {
		case n.failing && !now.Before(n.crashAt):
			s.crash(n, "power loss")
		case !n.up() && !now.Before(n.downUntil):
			s.tracef("%v restarts", n.id)
			s.start(n)
			s.recovered()
		}
	}
	if !s.healAt.IsZero() && !now.Before(s.healAt) {
		s.tracef("network heals")
		s.net.Heal()
		s.healAt = time.Time{}
	}
}

func (s *sim) upNodes() []*simNode {
	var up []*simNode
	for _, n := range s.nodes {
		if n.up() && !n.failing {
			up = append(up, n)
		}
	}
	return up
}

// crashSomeone crashes a random node, or arms a power loss that cuts one of
// its next persists short, or now and then cuts every node's power at once
// (blackout). Usually at most one node is down at a time.
func (s *sim) crashSomeone() {
	up := s.upNodes()
	if len(up) < nodeCount && s.rand.IntN(5) != 0 || len(up) == 0 {
		return
	}
	if len(up) == nodeCount && s.rand.IntN(10) == 0 {
		s.blackout()
		return
	}
	n := up[s.rand.IntN(len(up))]
	if s.rand.Float64() < s.opts.powerLoss {
		n.region.FailAfter(n.region.PersistCalls()+s.rand.IntN(4), errPowerLost)
		n.failing, n.crashAt = true, s.clock.Now().Add(time.Duration(1+s.rand.IntN(20))*time.Millisecond)
		s.stats.powerLosses++
		s.tracef("%v: power loss armed", n.id)
		return
	}
	s.crash(n, "crash")
}

// crash stops node n abruptly: its Host and Store are abandoned without a
// Close, its media keep only what a power loss would leave (crashMedia), and
// its operations in flight end with an unknown outcome.
func (s *sim) crash(n *simNode, why string) {
	s.stats.crashes++
	s.net.Crash(n.id)
	if n.store != nil {
		s.tracef("%s", n.storeSummary())
		n.noteStore()
		s.crashMedia(n)
	}
	n.host, n.vols, n.failing = nil, [groupCount]*volume.Volume{}, false
	n.store, n.locals, n.faults = nil, [groupCount]*store.Volume{}, nil
	n.downUntil = s.clock.Now().Add(time.Duration(50+s.rand.IntN(1500)) * time.Millisecond)
	s.tracef("%v: %s, down until %v", n.id, why, n.downUntil.Format("05.000"))
	for _, op := range slices.Clone(s.inflight) {
		if op.node == n {
			s.finish(op, errCrashed)
		}
	}
	s.crashedMembership(n)
}

var errCrashed = errors.New("sim: node crashed")

// partition isolates a node (often a leader), or cuts one direction of a
// link, for a while.
func (s *sim) partition() {
	s.stats.partitions++
	victim := nodeIDs[s.rand.IntN(nodeCount)]
	if l := s.leaderOf(s.rand.IntN(groupCount)); l != nil && s.rand.IntN(2) == 0 {
		victim = l.id
	}
	if s.rand.IntN(4) == 0 {
		other := nodeIDs[(int(victim)+s.rand.IntN(nodeCount-1))%nodeCount] // victim is nodeIDs[victim-1]
		s.net.Block(victim, other)
		s.tracef("network: %v -> %v cut", victim, other)
	} else {
		var others []replication.NodeID
		for _, id := range nodeIDs {
			if id != victim {
				others = append(others, id)
			}
		}
		s.net.Isolate(victim, others...)
		s.tracef("network: %v isolated", victim)
	}
	s.healAt = s.clock.Now().Add(time.Duration(100+s.rand.IntN(1500)) * time.Millisecond)
}

// leaderOf returns a node that believes it leads group g (a random one if a
// partitioned old leader still believes it too), or nil.
func (s *sim) leaderOf(g int) *simNode {
	var leaders []*simNode
	for _, n := range s.upNodes() {
		if n.vols[g] != nil && n.vols[g].Group().IsLeader() {
			leaders = append(leaders, n)
		}
	}
	if len(leaders) == 0 {
		return nil
	}
	return leaders[s.rand.IntN(len(leaders))]
}

func (s *sim) transfer(g int) {
	l := s.leaderOf(g)
	if l == nil {
		return
	}
	var others []replication.NodeID
	for _, id := range l.vols[g].Group().Members().Voters {
		if id != l.id {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return
	}
	to := others[s.rand.IntN(len(others))]
	s.stats.transfers++
	s.tracef("g%d: transfer leadership %v -> %v", g+1, l.id, to)
	l.vols[g].Group().TransferLeadership(to)
}

// checkLeaders checks Election Safety: at most one leader per term.
func (s *sim) checkLeaders() {
	for _, n := range s.upNodes() {
		for g := range groupCount {
			if n.vols[g] == nil {
				continue
			}
			st := n.vols[g].Group().Status()
			if st.Role != replication.RoleLeader {
				continue
			}
			key := [2]uint64{uint64(g), st.Term}
			if other, ok := s.leaders[key]; ok && other != n.id {
				s.failf("g%d term %d has two leaders: %v and %v", g+1, st.Term, other, n.id)
			}
			s.leaders[key] = n.id
		}
	}
}
