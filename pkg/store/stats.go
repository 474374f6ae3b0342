package store

import (
	"sync/atomic"

	"basalt/ec"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
)

// counters are the store's statistics. The lifetime ones (those also in
// meta.GCStats) start from base, saved with every checkpoint.
type counters struct {
	base meta.GCStats

	hostBlocks      atomic.Uint64 // blocks acknowledged to hosts
	destagedBlocks  atomic.Uint64 // host blocks written to the drives
	relocatedBlocks atomic.Uint64 // blocks moved by the cleaner or re-striping
	paddingBlocks   atomic.Uint64 // empty data slots of written stripes
	gcRuns          atomic.Uint64 // segments cleaned

	stripes        atomic.Uint64
	checkpoints    atomic.Uint64
	degradedReads  atomic.Uint64
	repairs        atomic.Uint64
	unrecoverable  atomic.Uint64
	scrubbed       atomic.Uint64
	discardedBytes atomic.Uint64 // drive bytes of freed segments discarded
	discardErrors  atomic.Uint64 // discards that failed (best effort)
	destageRate    atomic.Uint64 // blocks per second, over the last second or so

	mappedBlocks  atomic.Int64 // mapped entries over all volumes
	logicalBytes  atomic.Int64 // host blocks packed since Open (compress.go)
	storedBytes   atomic.Int64 // the bytes they took in their slots
	pendingWrites atomic.Int64 // block writes in the overlays
	pendingFresh  atomic.Int64 // those to blocks the maps do not hold
	freeSegments  atomic.Int64
	capacity      atomic.Int64 // blocks; see capacityBlocks

	maxPayload int // the write buffer's largest record payload
}

func (c *counters) lifetime() meta.GCStats {
	return meta.GCStats{
		Runs:            c.base.Runs + c.gcRuns.Load(),
		RelocatedBlocks: c.base.RelocatedBlocks + c.relocatedBlocks.Load(),
		DestagedBlocks:  c.base.DestagedBlocks + c.destagedBlocks.Load(),
		PaddingBlocks:   c.base.PaddingBlocks + c.paddingBlocks.Load(),
		HostBlocks:      c.base.HostBlocks + c.hostBlocks.Load(),
	}
}

// Stats is a snapshot of the store's state for status pages and metrics.
// Block counts are in 4096-byte blocks; the lifetime counters survive
// restarts (as of the last checkpoint).
type Stats struct {
	CapacityBytes int64 // data the store accepts (thin volumes may promise more)
	UsedBytes     int64 // mapped data: what volumes hold on the drives
	BufferedBytes int64 // block writes still only in the write buffer
	// CompressionLogicalBytes and CompressionStoredBytes sum the host
	// blocks packed into stripes since Open and the data slots they took
	// (4096 bytes each: a raw block's own, a packed slot once for all its
	// fragments): their ratio is the compression achieved on the drives.
	CompressionLogicalBytes, CompressionStoredBytes int64
	Volumes                                         int

	Segments       int
	FreeSegments   int
	OpenSegments   int
	SealedSegments int

	// The write buffer: its region's mode, its log's bytes, the bytes its
	// records take and the records not yet released. With
	// StageByReference: "staged by reference", Options.StagedSize, the
	// bytes of data staged records reference (the caller's, and WriteAt's
	// copies) and the records not yet released.
	BufferMode    string
	BufferSize    int64
	BufferUsed    int64
	BufferRecords int

	HostBlocks      uint64
	DestagedBlocks  uint64
	RelocatedBlocks uint64
	PaddingBlocks   uint64
	GCRuns          uint64
	GCPolicy        string
	// WriteAmplification is (destaged + relocated) / destaged blocks: the
	// drive writes the cleaner adds per host block destaged (1 = none).
	// Parity and padding are not counted; the Geometry gives the former,
	// PaddingBlocks the latter.
	WriteAmplification float64
	// DestageRate is in blocks per second, measured over about a second.
	DestageRate float64

	Stripes        uint64
	Checkpoints    uint64
	DegradedReads  uint64
	Repairs        uint64
	Unrecoverable  uint64
	ScrubbedBlocks uint64
	// DiscardedBytes counts the drive bytes of freed segments discarded
	// (summed over drives); DiscardErrors the discards that failed.
	DiscardedBytes uint64
	DiscardErrors  uint64

	Geometry ec.Geometry // of new stripes (narrower while drives are lost)
	Drives   []DriveStats
	// Failed is the error that stopped destaging, or "".
	Failed string
}

// DriveStats describes one drive slot.
type DriveStats struct {
	Index  int
	UUID   string
	State  string
	Reads  uint64
	Writes uint64
	Errors uint64
}

// Stats returns a snapshot of the store's state.
func (s *Store) Stats() Stats {
	c := &s.counters
	life := c.lifetime()
	st := Stats{
		CapacityBytes: s.capacityBlocks() * BlockSize, UsedBytes: c.mappedBlocks.Load() * BlockSize,
		CompressionLogicalBytes: c.logicalBytes.Load(), CompressionStoredBytes: c.storedBytes.Load(),
		BufferedBytes: c.pendingWrites.Load() * BlockSize, Volumes: len(s.volumeList()),
		Segments: len(s.segs), HostBlocks: life.HostBlocks, DestagedBlocks: life.DestagedBlocks,
		RelocatedBlocks: life.RelocatedBlocks, PaddingBlocks: life.PaddingBlocks, GCRuns: life.Runs,
		GCPolicy: s.opts.GCPolicy.String(), DestageRate: float64(c.destageRate.Load()),
		Stripes: c.stripes.Load(), Checkpoints: c.checkpoints.Load(), DegradedReads: c.degradedReads.Load(),
		Repairs: c.repairs.Load(), Unrecoverable: c.unrecoverable.Load(), ScrubbedBlocks: c.scrubbed.Load(),
		WriteAmplification: 1, DiscardedBytes: c.discardedBytes.Load(), DiscardErrors: c.discardErrors.Load(),
	}
	if life.DestagedBlocks > 0 {
		st.WriteAmplification = float64(life.DestagedBlocks+life.RelocatedBlocks) / float64(life.DestagedBlocks)
	}
	for _, g := range s.segs {
		switch g.getState() {
		case meta.SegmentFree:
			st.FreeSegments++
		case meta.SegmentOpen:
			st.OpenSegments++
		case meta.SegmentSealed:
			st.SealedSegments++
		}
	}
	u := s.stage.usage()
	st.BufferMode, st.BufferSize, st.BufferUsed, st.BufferRecords = u.mode, u.size, u.used, u.live
	g, err := ec.Narrower(ec.Geometry{Data: s.node.Data, Parity: s.node.Parity, ChunkSize: s.node.ChunkSize},
		len(s.healthyDrives()))
	if err == nil {
		st.Geometry = g
	}
	for _, d := range s.drives {
		d.mu.Lock()
		uuid := disk.UUID(d.mu.info.UUID).String()
		d.mu.Unlock()
		st.Drives = append(st.Drives, DriveStats{Index: d.index, UUID: uuid, State: d.getState().String(),
			Reads: d.reads.Load(), Writes: d.writes.Load(), Errors: d.errors.Load()})
	}
	if err := s.Err(); err != nil {
		st.Failed = err.Error()
	}
	return st
}

// capacityBlocks is the data the store accepts: the segments above the
// cleaner's high water mark (less two open segments), at the width new
// stripes are written with. It is recomputed when a drive changes state.
func (s *Store) capacityBlocks() int64 { return s.counters.capacity.Load() }

func (s *Store) refreshCapacity() {
	g, err := ec.Narrower(ec.Geometry{Data: s.node.Data, Parity: s.node.Parity, ChunkSize: s.node.ChunkSize},
		len(s.healthyDrives()))
	if err != nil {
		s.counters.capacity.Store(0)
		return
	}
	usable := int64(s.lay.segments - s.opts.GCHighSegments - 2)
	s.counters.capacity.Store(usable * int64(s.lay.segStripes) * int64(s.lay.shape(g.Data).slots))
}
