package store

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"basalt/ec"
	"basalt/pkg/clock"
	"basalt/pkg/disk"
	"basalt/pkg/identity"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
)

// GCPolicy chooses the segment the garbage collector cleans next.
type GCPolicy uint8

const (
	// GCCostBenefit picks the sealed segment with the highest
	// (1-u)*age/(1+u), u its live fraction and age the stripes written since
	// it was sealed (Rosenblum and Ousterhout's LFS cleaner): it lets
	// recently written segments, whose blocks are still being overwritten,
	// empty on their own, and cleans cold segments even when moderately full.
	// The default.
	GCCostBenefit GCPolicy = iota
	// GCGreedy picks the sealed segment with the fewest live blocks.
	GCGreedy
)

func (p GCPolicy) String() string {
	switch p {
	case GCCostBenefit:
		return "cost-benefit"
	case GCGreedy:
		return "greedy"
	}
	return fmt.Sprintf("GCPolicy(%d)", uint8(p))
}

// ParseGCPolicy parses "greedy" or "cost-benefit".
func ParseGCPolicy(s string) (GCPolicy, error) {
	switch s {
	case "greedy":
		return GCGreedy, nil
	case "cost-benefit", "costbenefit", "":
		return GCCostBenefit, nil
	}
	return 0, fmt.Errorf("%w: GC policy %q (want greedy or cost-benefit)", ErrInvalidOptions, s)
}

// Options configure Open. Fields marked "format" are fixed when the store is
// first formatted; later Opens take them from the metadata and ignore the
// Options' values.
type Options struct {
	// Drives are the node's drives, in slot order. Required, at least
	// Parity+1. The Store owns them from Open on and closes them in Close
	// (also when Open fails).
	Drives []disk.Drive
	// Buffer is the write buffer's persistent-memory region. Required,
	// except with StageByReference, which uses no region: one given anyway
	// only sets StagedSize's default. The Store owns it and closes it in
	// Close.
	Buffer pmem.Region
	// MetaDir is the badger directory of the node's metadata. Either it or
	// Meta is required.
	MetaDir string
	// Meta is an open metadata store to use instead of MetaDir; the Store
	// does not close it.
	Meta *meta.DB
	// Stamp is the cluster node's identity (pkg/identity; zero on a node
	// without a cluster). A new format writes its node UUID into the node
	// record and every superblock, with its cluster UUID in the node record;
	// a later Open refuses a store formatted for another (ErrForeignStore).
	Stamp identity.Stamp

	// Parity is the number of parity chunks per stripe (format). When both
	// Parity and Data are 0 and there are at least two drives, Parity is 1
	// ("k+1"); to run without protection, set Data and leave Parity 0.
	Parity int
	// Data is the number of data chunks per stripe (format). Default
	// len(Drives)-Parity; Data+Parity <= len(Drives).
	Data int
	// ChunkSize is the bytes of one stripe chunk on one drive (format): a
	// multiple of 4096 of at least 16 KiB. Default 256 KiB: with one
	// summary block per chunk, 1.6% of the space goes to summaries.
	ChunkSize int
	// SegmentStripes is the number of stripes in a segment, the unit of
	// allocation and cleaning (format). Default 32 (8 MiB per drive with the
	// default chunk).
	SegmentStripes int

	// BatchStripes bounds the stripes of host data written to a drive in
	// one I/O (the cleaner's batches hold at most 4). Each of the host
	// stream's BatchFlights+1 batches holds BatchStripes*ChunkSize bytes per
	// drive: the destager fills one while the drives write the others.
	// Default 16 (4 MiB
	// per drive per I/O with the default chunk: large writes amortize the
	// drive sync that ends every batch).
	BatchStripes int
	// BatchFlights bounds the host batches being written at once: the
	// destager encodes and fills the next batches while the drives write
	// earlier ones, so the drives are not idle while it works. Each costs
	// one more set of batch buffers. Default 2.
	BatchFlights int
	// FlushStripes: while no host batch is in flight, the destager writes
	// the full stripes it holds once there are this many, and the ones it
	// holds at each tick otherwise. Every batch ends with a sync of each
	// drive, so a batch per stripe spends most of its drive time, and much
	// of the node's CPU, syncing. The stripes waiting are in the write
	// buffer, durable there. Default min(4, BatchStripes); at most
	// BatchStripes; 1 writes each stripe as soon as it is full.
	FlushStripes int
	// PartialStripeDelay: a stripe that is not full is padded and written
	// once no new write has arrived for this long. Default 2s.
	PartialStripeDelay time.Duration
	// BufferHighWater: when the write buffer is fuller than this fraction,
	// partial stripes are padded and written so the buffer drains.
	// Default 0.5; in (0, 1].
	BufferHighWater float64

	// GCPolicy chooses victims. Default GCCostBenefit.
	GCPolicy GCPolicy
	// Discard says which drives are told that a freed segment's range is
	// unused. Default DiscardAuto.
	Discard DiscardMode
	// GCReserveSegments are kept for the cleaner: host destaging never takes
	// the last ones. Default 2, at least 1 (with parity, at least 1).
	GCReserveSegments int
	// GCLowSegments: the cleaner starts when fewer segments are free.
	// Default max(GCReserveSegments+2, segments/16).
	GCLowSegments int
	// GCHighSegments: the cleaner stops when this many are free. Default
	// GCLowSegments + max(2, segments/32).
	GCHighSegments int

	// CheckpointInterval is the time between map checkpoints. Default 30s.
	CheckpointInterval time.Duration
	// CheckpointStripes: a checkpoint is also taken after this many stripes,
	// bounding the summaries recovery must read. Default 4096.
	CheckpointStripes int
	// TickInterval is the period of the background timer that drives the
	// idle destage and checkpoint timing. Default 100ms.
	TickInterval time.Duration

	// Clock is the time source; default clock.Real().
	Clock clock.Clock
	// Logger; default discards.
	Logger *slog.Logger

	// StageByReference: the store keeps no copy of written data of its
	// own. Writes arrive through Volume.WriteStaged and Volume.TrimStaged
	// with bytes the caller keeps valid and unchanged until the store
	// releases them, and the store reports per volume how far its staged
	// writes have reached the drives (Volume.StagedFloor). Nothing staged
	// survives a crash or a Close: the caller replays what was not yet
	// released. WriteAt, Trim and WriteZeroes still work (WriteAt stages a
	// copy of its own); like staged writes they are durable once
	// destaged, so Flush and FUA destage. doc.go, "Staging by reference".
	StageByReference bool
	// StagedSize, with StageByReference, is the bytes of staged data that
	// BufferHighWater is a fraction of: once more is referenced, partial
	// stripes are padded and written so that the caller's log can be
	// released. Set it to what the caller's log may hold of staged writes.
	// Default: Buffer's size if one is given, else 256 MiB.
	StagedSize int64

	// Simulated runs the store without goroutines of its own, for a
	// deterministic simulation: no writer goroutine is started, commands
	// (Flush, Close, DeleteVolume, ...) run on the caller's goroutine, stripe
	// I/O is sequential, and destaging, cleaning and checkpoints happen only
	// when the caller runs Work and Tick (simulate.go). With a manual clock
	// and seeded drives, a seed then determines the whole run.
	Simulated bool

	// synchronous is a test hook: no writer goroutine is started; the test
	// runs the writer's steps itself, commands run inline, and stripe I/O
	// is sequential, so that a seed determines the whole run.
	synchronous bool
	// noCloseCheckpoint is a test hook: Close destages but takes no
	// checkpoint, so the next Open replays every summary since the last.
	noCloseCheckpoint bool
}

// Defaults.
const (
	DefaultChunkSize      = 256 << 10
	DefaultSegmentStripes = 32
	DefaultStagedSize     = 256 << 20
	minChunkSize          = 16 << 10
)

// EnsureDefaults fills unset fields with their defaults. The GC thresholds
// that depend on the number of segments are filled in by Open.
func (o *Options) EnsureDefaults() {
	if o.Simulated {
		o.synchronous = true
	}
	if o.Parity == 0 && o.Data == 0 && len(o.Drives) > 1 {
		o.Parity = 1
	}
	if o.Data == 0 {
		o.Data = len(o.Drives) - o.Parity
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.SegmentStripes == 0 {
		o.SegmentStripes = DefaultSegmentStripes
	}
	setDefault(&o.BatchStripes, 16)
	setDefault(&o.BatchFlights, 2)
	setDefault(&o.FlushStripes, min(4, o.BatchStripes))
	setDefault(&o.GCReserveSegments, 2)
	setDefault(&o.CheckpointStripes, 4096)
	if o.PartialStripeDelay == 0 {
		o.PartialStripeDelay = 2 * time.Second
	}
	if o.BufferHighWater == 0 {
		o.BufferHighWater = 0.5
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = 30 * time.Second
	}
	if o.TickInterval == 0 {
		o.TickInterval = 100 * time.Millisecond
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StageByReference && o.StagedSize == 0 {
		o.StagedSize = DefaultStagedSize
		if o.Buffer != nil {
			o.StagedSize = int64(o.Buffer.Size())
		}
	}
}

func setDefault(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

// Validate reports every problem at once, wrapping ErrInvalidOptions.
func (o *Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(o.Drives) == 0 {
		add("no drives")
	}
	if o.Buffer == nil && !o.StageByReference {
		add("no write-buffer region")
	}
	if o.StagedSize < 0 || (o.StageByReference && o.StagedSize == 0) {
		add("StagedSize %d must be positive", o.StagedSize)
	}
	if o.MetaDir == "" && o.Meta == nil {
		add("neither MetaDir nor Meta")
	}
	if err := (ec.Geometry{Data: o.Data, Parity: o.Parity, ChunkSize: o.ChunkSize}).Validate(); err != nil {
		add("%w", err)
	}
	if o.Data+o.Parity > len(o.Drives) {
		add("geometry %d+%d is wider than %d drives", o.Data, o.Parity, len(o.Drives))
	}
	if o.ChunkSize < minChunkSize {
		add("ChunkSize %d < %d", o.ChunkSize, minChunkSize)
	}
	if o.SegmentStripes < 1 || o.SegmentStripes > 1<<16 {
		add("SegmentStripes %d outside [1, 65536]", o.SegmentStripes)
	}
	if o.BatchFlights < 1 {
		add("BatchFlights %d < 1", o.BatchFlights)
	}
	if o.BatchStripes < 1 {
		add("BatchStripes %d < 1", o.BatchStripes)
	}
	if o.FlushStripes < 1 || o.FlushStripes > max(o.BatchStripes, 1) {
		add("FlushStripes %d outside [1, BatchStripes %d]", o.FlushStripes, o.BatchStripes)
	}
	if o.BufferHighWater <= 0 || o.BufferHighWater > 1 {
		add("BufferHighWater %v outside (0, 1]", o.BufferHighWater)
	}
	if o.GCPolicy > GCGreedy {
		add("unknown GCPolicy %v", o.GCPolicy)
	}
	if o.GCReserveSegments < 1 {
		add("GCReserveSegments %d < 1", o.GCReserveSegments)
	}
	if o.GCLowSegments < 0 || (o.GCLowSegments != 0 && o.GCLowSegments <= o.GCReserveSegments) {
		add("GCLowSegments %d must exceed GCReserveSegments %d", o.GCLowSegments, o.GCReserveSegments)
	}
	if o.GCHighSegments < 0 || (o.GCHighSegments != 0 && o.GCHighSegments < o.GCLowSegments) {
		add("GCHighSegments %d < GCLowSegments %d", o.GCHighSegments, o.GCLowSegments)
	}
	if o.CheckpointInterval < 0 || o.CheckpointStripes < 1 || o.TickInterval <= 0 || o.PartialStripeDelay < 0 {
		add("negative or zero intervals")
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
}

// gcThresholds fills the segment-count dependent defaults and checks that
// the store has room for them.
func (o *Options) gcThresholds(segments int) error {
	if o.GCLowSegments == 0 {
		o.GCLowSegments = max(o.GCReserveSegments+2, segments/16)
	}
	if o.GCHighSegments == 0 {
		o.GCHighSegments = o.GCLowSegments + max(2, segments/32)
	}
	if o.GCHighSegments+4 > segments {
		return fmt.Errorf("%w: %d segments leave no room above the cleaner's %d", ErrInvalidOptions,
			segments, o.GCHighSegments)
	}
	return nil
}
