package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
	"basalt/pkg/store"
)

// Geometry of each node's store: small drives and segments, so that the
// cleaner, the checkpoints and degraded stripes all get work in a few
// simulated seconds.
const (
	driveSize = 4 << 20
	// storeBuffer is the copying store's write buffer (in memory, as a
	// cluster node's is: nothing in it survives a crash). It is larger
	// than what one Poll can apply (the Raft log's 1 MiB and a snapshot),
	// since in the simulated mode a full buffer would block the one
	// goroutine.
	storeBuffer = 4 << 20
	// minCapacity is the fewest blocks a store may accept: the volumes'
	// blocks, as many buffered to blocks not yet mapped, and the headroom
	// a Volume keeps for what the Raft log may hold in flight (209 blocks
	// with its 1 MiB), with some to spare. With less, the leader refuses
	// writes (backend.ErrNoSpace) it could take.
	minCapacity = 2*groupCount*volumeBlocks + 209 + 20
	// storeTick is the store's TickInterval: Tick runs once per interval.
	storeTick = 100 * time.Millisecond
)

// storeMode says how a node's store takes the replica's writes.
type storeMode uint8

const (
	// storeCopy: the store copies every write into its own write buffer,
	// a volatile one (pmem.Memory, as [store] buffer = "memory").
	storeCopy storeMode = iota + 1
	// storeStaged: the store keeps no copy (Options.StageByReference);
	// what is not destaged is lost in a crash.
	storeStaged
)

func (m storeMode) String() string {
	switch m {
	case storeCopy:
		return "copy"
	case storeStaged:
		return "staged"
	}
	return fmt.Sprintf("storeMode(%d)", uint8(m))
}

// storeOptions are the seed's store settings.
type storeOptions struct {
	mode    storeMode
	drives  int
	parity  int
	options store.Options // tuning; Drives, Buffer, Meta, Clock set per open
}

func storeOptionsFor(r *rand.Rand, mode storeMode) storeOptions {
	so := storeOptions{mode: mode, drives: 4, parity: 1}
	if r.IntN(3) == 0 {
		so.drives, so.parity = 6, 2
	}
	batch := 1 + r.IntN(3)
	// Chunks of 16 KiB make stripes of 9 data blocks (at 3+1), which fill
	// and go to the drives almost at once; chunks of 64 KiB make stripes of
	// 45, which wait in the write buffer for more, as a production store's
	// do.
	chunk := []int{16 << 10, 64 << 10}[r.IntN(2)]
	minSlots := 2 * (chunk/4096 - 1) // a stripe's data blocks with 2 data chunks (parity drives lost)
	// The cleaner starts when fewer than gcLow segments are free (0: the
	// default, a sixteenth). Most segments empty on their own; a high mark
	// makes the cleaner relocate live blocks. It is bounded so that the
	// capacity left (the segments above the high mark, gcLow+2, less two
	// open, at minSlots blocks a stripe) keeps minCapacity blocks.
	stripes := []int{1, 2, 4}[r.IntN(3)]
	segments := driveSize / (chunk * stripes) * 3 / 4 // the layout keeps a quarter for summaries and metadata
	gcLow := int(float64(segments) * []float64{0, 0.5, 0.65}[r.IntN(3)])
	gcLow = min(gcLow, segments-4-(minCapacity+minSlots*stripes-1)/(minSlots*stripes))
	so.options = store.Options{
		Parity: so.parity, Data: so.drives - so.parity, ChunkSize: chunk, SegmentStripes: stripes,
		BatchStripes: batch, FlushStripes: 1 + r.IntN(batch), GCPolicy: store.GCPolicy(r.IntN(2)),
		CheckpointStripes: 4 + r.IntN(40), BufferHighWater: []float64{0.05, 0.3, 0.6}[r.IntN(3)],
		PartialStripeDelay: time.Duration(200+r.IntN(2000)) * time.Millisecond,
		CheckpointInterval: time.Duration(1+r.IntN(4)) * time.Second, TickInterval: storeTick,
		Simulated: true, StageByReference: mode == storeStaged,
	}
	if mode == storeStaged {
		so.options.StagedSize = regionSize // what the Raft log may hold
	}
	if gcLow > 0 {
		so.options.GCLowSegments, so.options.GCHighSegments = gcLow, gcLow+2
	}
	return so
}

// power is one life of a node's power supply: once off (a crash, or a
// persist the power loss cut short), nothing more reaches the node's
// persistent media (Raft log region, drives, metadata), as at the instant
// of a real power loss.
type power struct{ off bool }

var errPowerOff = errors.New("sim: the node has no power")

// Enter implements meta.Gate: a metadata transaction after the power loss
// does not commit.
func (p *power) Enter() error {
	if p.off {
		return errPowerOff
	}
	return nil
}

// Exit implements meta.Gate.
func (p *power) Exit() {}

// poweredRegion is the Raft log region behind a node's power: the
// persist that a power loss cuts short (pmem.Fake.FailAfter) turns the
// power off for the node's drives and metadata too.
type poweredRegion struct {
	*pmem.Fake
	power *power
}

func (r poweredRegion) Persist(off, n int) error {
	if r.power.off {
		return errPowerOff
	}
	err := r.Fake.Persist(off, n)
	if errors.Is(err, errPowerLost) {
		r.power.off = true
	}
	return err
}

// poweredDrive is a drive behind a node's power: writes, discards and
// syncs fail once it is off.
type poweredDrive struct {
	disk.Drive
	power *power
}

func (d poweredDrive) WriteAt(p []byte, off int64) (int, error) {
	if d.power.off {
		return 0, errPowerOff
	}
	return d.Drive.WriteAt(p, off)
}

func (d poweredDrive) Discard(off, n int64) error {
	if d.power.off {
		return errPowerOff
	}
	return d.Drive.Discard(off, n)
}

func (d poweredDrive) Sync() error {
	if d.power.off {
		return errPowerOff
	}
	return d.Drive.Sync()
}

// newNodeMedia gives node n its persistent media: a Raft log region,
// blank drives and an empty metadata store.
func (s *sim) newNodeMedia(n *simNode) error {
	n.region = pmem.NewFake(regionSize, int64(s.seed)*10+int64(n.id))
	n.drives = make([]*disk.MemDrive, s.opts.store.drives)
	n.lost = make([]bool, s.opts.store.drives)
	for i := range n.drives {
		n.drives[i] = disk.NewMem(driveSize)
	}
	db, err := meta.Open(meta.Options{InMemory: true, MemTableSize: 2 << 20, BlockCacheSize: 1 << 20})
	if err != nil {
		return fmt.Errorf("%v: metadata: %w", n.id, err)
	}
	n.db = db
	s.t.Cleanup(func() { _ = db.Close() })
	return nil
}

// openStore opens node n's store on its drives and metadata, in a new
// life of its power: a blank store formats, one that crashed recovers.
// Drives lost earlier stay lost.
func (s *sim) openStore(n *simNode) error {
	n.power = &power{}
	n.db.SetGate(n.power)
	opts := s.opts.store.options
	opts.Meta, opts.Clock, opts.Logger = n.db, s.clock, s.log.With("node", n.id, "part", "store")
	n.faults = make([]*disk.FaultDrive, len(n.drives))
	for i, d := range n.drives {
		f := disk.NewFault(d, disk.FaultOptions{Clock: s.clock}, s.rand.Int64())
		if n.lost[i] {
			f.Fail()
		}
		n.faults[i] = f
		opts.Drives = append(opts.Drives, poweredDrive{Drive: f, power: n.power})
	}
	if s.opts.store.mode == storeCopy {
		buf, err := pmem.NewMemory(storeBuffer)
		if err != nil {
			return err
		}
		opts.Buffer = buf
	}
	st, err := store.Open(opts)
	if err != nil {
		return fmt.Errorf("%v: store recovery failed: %w", n.id, err)
	}
	n.store = st
	for g := range groupCount {
		v, err := st.EnsureVolume(fmt.Sprintf("g%d", g+1), volumeSize)
		if err != nil {
			return fmt.Errorf("%v: store volume g%d: %w", n.id, g+1, err)
		}
		n.locals[g] = v
	}
	return nil
}

// crashMedia turns node n's power off and replaces its media by what the
// power loss leaves: the Raft log region's crash image (persisted bytes
// plus random cache-line fragments), each drive's synced blocks plus a
// share of the unsynced ones (some torn), and the metadata's committed
// transactions (badger commits are synchronous; the gate refused any
// after the power went).
func (s *sim) crashMedia(n *simNode) {
	n.power.off = true
	n.region = n.region.CrashRegion()
	keep := []int{0, 30, 100}[s.rand.IntN(3)]
	for i, d := range n.drives {
		n.drives[i] = d.CrashClone(s.rand.Int64(), keep)
	}
}

// loseDrive fails one drive of a random node for good, unless that would
// lose more drives on the node than its stripes have parity.
func (s *sim) loseDrive() {
	n := s.nodes[s.rand.IntN(nodeCount)]
	lost := 0
	for _, l := range n.lost {
		if l {
			lost++
		}
	}
	if lost >= s.opts.store.parity {
		return
	}
	i := s.rand.IntN(len(n.drives))
	if n.lost[i] {
		return
	}
	n.lost[i] = true
	if n.up() {
		n.faults[i].Fail()
	}
	s.stats.drivesLost++
	s.tracef("%v: drive %d fails", n.id, i)
}

// storeWork runs node n's store background work (destaging, cleaning,
// freeing, checkpoints), as its writer goroutine would after every request.
func (s *sim) storeWork(n *simNode) { n.store.Work() }

// storeTimers runs, once a step, node n's store timer work once per
// storeTick, as its ticker would, and checks that the copying store's
// write buffer drains: in the simulated mode a write to a full buffer
// would wait for ever.
func (s *sim) storeTimers(n *simNode) {
	if now := s.clock.Now(); now.Sub(n.lastTick) >= storeTick {
		n.lastTick = now
		n.store.Tick()
		n.store.Work()
	}
	if s.opts.store.mode != storeCopy || n.power.off {
		return
	}
	if st := n.store.Stats(); st.BufferUsed > st.BufferSize*3/4 { // above every high water mark drawn
		s.failf("%v: the store's write buffer stays %d of %d bytes full after its work", n.id, st.BufferUsed,
			st.BufferSize)
	}
}

// readReplica reads node n's whole replica of volume g from its store.
func (n *simNode) readReplica(g int) ([]byte, error) {
	out := make([]byte, volumeSize)
	if err := n.locals[g].ReadAt(context.Background(), out, 0); err != nil {
		return nil, fmt.Errorf("%v: reading its replica of g%d: %w", n.id, g+1, err)
	}
	return out, nil
}

// storeSummary is a line of the store's counters for the trace: it ties the
// store's work into the run's digest.
func (n *simNode) storeSummary() string {
	st := n.store.Stats()
	return fmt.Sprintf("%v store: %d host blocks, %d destaged, %d relocated, %d padding, %d GC runs, %d stripes, "+
		"%d checkpoints, %d degraded reads, geometry %d+%d, %d free segments of %d, failed %q", n.id, st.HostBlocks,
		st.DestagedBlocks, st.RelocatedBlocks, st.PaddingBlocks, st.GCRuns, st.Stripes, st.Checkpoints,
		st.DegradedReads, st.Geometry.Data, st.Geometry.Parity, st.FreeSegments, st.Segments, st.Failed)
}

// storeCounts are a node's store counters, the highest seen over its lives
// (they survive a crash as of the store's last checkpoint).
type storeCounts struct{ host, padding, gcRuns, relocated, degraded uint64 }

// noteStore records node n's store counters before its store goes.
func (n *simNode) noteStore() {
	st := n.store.Stats()
	c := &n.counts
	c.host, c.padding = max(c.host, st.HostBlocks), max(c.padding, st.PaddingBlocks)
	c.gcRuns, c.relocated = max(c.gcRuns, st.GCRuns), max(c.relocated, st.RelocatedBlocks)
	c.degraded += st.DegradedReads
}

// storeTotals sums the nodes' store counters for the seed's summary.
func (s *sim) storeTotals() string {
	var t storeCounts
	for _, n := range s.nodes {
		if n.store != nil {
			n.noteStore()
			n.counts.degraded -= n.store.Stats().DegradedReads // counted again at the next note
		}
		c := n.counts
		t.host, t.padding, t.gcRuns = t.host+c.host, t.padding+c.padding, t.gcRuns+c.gcRuns
		t.relocated, t.degraded = t.relocated+c.relocated, t.degraded+c.degraded
	}
	return fmt.Sprintf("stores: %d host blocks, %d padding, %d GC runs relocating %d blocks, %d degraded reads",
		t.host, t.padding, t.gcRuns, t.relocated, t.degraded)
}
