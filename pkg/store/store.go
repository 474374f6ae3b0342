package store

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"basalt/cache"
	"basalt/ec"
	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
)

// Errors. Volume methods return the backend error classes (backend.ErrMedia,
// backend.ErrNoSpace, ...) wrapped with context; the store's own failures
// wrap one of these.
var (
	// ErrInvalidOptions: Options.Validate failed, or the drives cannot hold
	// the geometry.
	ErrInvalidOptions = errors.New("store: invalid options")
	// ErrCorrupt: the metadata or the summaries on the drives contradict
	// each other in a way recovery cannot resolve.
	ErrCorrupt = errors.New("store: corrupt")
	// ErrForeignDrive: a drive carries a superblock that is not this
	// store's (another node, another slot), or drives carry superblocks but
	// the metadata is empty.
	ErrForeignDrive = errors.New("store: drive belongs elsewhere")
	// ErrVolumeExists: CreateVolume with a name in use.
	ErrVolumeExists = errors.New("store: volume exists")
	// ErrNoVolume: no volume by that name.
	ErrNoVolume = errors.New("store: no such volume")
	// ErrShrinkVolume: ResizeVolume to fewer bytes than the volume has;
	// volumes only grow.
	ErrShrinkVolume = errors.New("store: a volume cannot shrink")
	// ErrVolumeSize: ResizeVolume to a size that is not a positive
	// multiple of BlockSize, or of 2^40 blocks or more.
	ErrVolumeSize = errors.New("store: invalid volume size")
	// ErrDriveState: ReplaceDrive of a drive that has not failed, or a drive
	// index out of range.
	ErrDriveState = errors.New("store: wrong drive state")
	// ErrFailed: the store stopped destaging after an error it cannot
	// recover from (more drives lost than parity covers while writing, the
	// write buffer or metadata failing). Reads still work where they can.
	ErrFailed = errors.New("store: failed")
)

// Store is one node's storage engine: the write buffer, the drives, the LBA
// maps, the destager and the cleaner. Its methods are safe for concurrent
// use.
type Store struct {
	opts  Options
	log   *slog.Logger
	clock clock.Clock

	meta    *meta.DB
	ownMeta bool
	region  pmem.Region   // Options.Buffer; nil when staging by reference without one
	buf     *cache.Buffer // the write buffer (copying mode), or nil
	ring    *refRing      // the staged records (StageByReference), or nil
	stage   stager        // buf or ring
	node    meta.NodeInfo
	lay     *layout
	drives  []*driveSlot
	segs    []*segment

	// segMu orders pinning a segment against freeing it.
	segMu sync.Mutex

	vols struct {
		sync.Mutex // protects byName and nextID; byID is replaced under it
		byName     map[string]*volume
		nextID     meta.VolumeID
	}
	byID atomic.Pointer[map[meta.VolumeID]*volume]

	pub  publisher
	kick chan struct{} // capacity 1: wakes the writer
	cmds chan command  // bounded: requests to the writer
	w    *writer

	// driveEpoch counts drive failures, so the writer notices new ones.
	driveEpoch atomic.Uint64
	closed     atomic.Bool
	failure    atomic.Pointer[error]
	bufs       sync.Pool // *[]byte: chunk-sized aligned buffers
	rowBufs    sync.Pool // *rowScratch
	counters   counters
	reb        rebuildState // rebuild_run.go
	closeOnce  sync.Once
	closeErr   error
}

// Open opens the store on opts.Drives, opts.Buffer and the metadata,
// formatting them if they are all blank, and recovers its state: the latest
// map checkpoint, the stripes written after it (from their summaries, in
// sequence order), then the write buffer. It runs ec.SelfTest first and
// refuses to open if the codec computes wrong parity. On error everything
// given to Open is closed.
func Open(opts Options) (_ *Store, err error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		closeAll(opts, nil)
		return nil, err
	}
	if err := ec.SelfTest(); err != nil {
		closeAll(opts, nil)
		return nil, fmt.Errorf("store: refusing to open: %w", err)
	}
	s := &Store{opts: opts, log: opts.Logger, clock: opts.Clock, region: opts.Buffer,
		kick: make(chan struct{}, 1), cmds: make(chan command, 16)}
	if err := s.openMeta(); err != nil {
		closeAll(opts, nil)
		return nil, err
	}
	defer func() {
		if err != nil {
			s.abandon()
		}
	}()
	if err := s.mount(); err != nil {
		return nil, err
	}
	if err := s.recover(); err != nil {
		return nil, err
	}
	s.w = newWriter(s)
	if !s.opts.synchronous {
		go s.w.run()
	}
	s.log.Info("store open", "drives", len(s.drives), "geometry",
		ec.Geometry{Data: s.node.Data, Parity: s.node.Parity, ChunkSize: s.node.ChunkSize},
		"segments", s.lay.segments, "buffer", s.stage.usage().mode,
		"volumes", len(s.volumeList()), "gc", s.opts.GCPolicy)
	return s, nil
}

func (s *Store) openMeta() error {
	if s.opts.Meta != nil {
		s.meta = s.opts.Meta
		return nil
	}
	db, err := meta.Open(meta.Options{Dir: s.opts.MetaDir, Logger: s.log})
	if err != nil {
		return err
	}
	s.meta, s.ownMeta = db, true
	return nil
}

// closeAll closes what Open was given; buf, if not nil, first.
func closeAll(opts Options, buf *cache.Buffer) {
	if buf != nil {
		_ = buf.Close()
	}
	for _, d := range opts.Drives {
		_ = d.Close()
	}
	if opts.Buffer != nil {
		_ = opts.Buffer.Close()
	}
}

// abandon releases everything after a failed Open.
func (s *Store) abandon() {
	closeAll(s.opts, s.buf)
	if s.ownMeta {
		_ = s.meta.Close()
	}
}

// Close stops the store cleanly: it destages everything in the write
// buffer (padding the last stripe), takes a checkpoint, and closes the
// drives, the region and the metadata it opened. Volumes fail with
// backend.ErrClosed afterwards. Close returns the first error met; a store
// that had failed closes without destaging. With StageByReference, once
// Close returns the store never reads a caller's staged bytes again.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.stopRebuilder()
		var errs []error
		if s.w != nil {
			errs = append(errs, s.w.shutdown())
		}
		if err := s.stage.close(); err != nil {
			errs = append(errs, err)
		}
		for i, d := range s.drives {
			if d.healthy() {
				_ = s.syncDrive(i, false) // in-place repairs are not synced as they happen
			}
			_ = d.drive().Close()
		}
		if s.region != nil {
			_ = s.region.Close()
		}
		if s.ownMeta {
			errs = append(errs, s.meta.Close())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// fail records the store's first fatal error and logs it.
func (s *Store) fail(err error) {
	wrapped := fmt.Errorf("%w: %w", ErrFailed, err)
	if s.failure.CompareAndSwap(nil, &wrapped) {
		s.log.Error("store failed; destaging stopped", "err", err)
	}
}

// Err returns the error that made the store fail, or nil.
func (s *Store) Err() error {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// usable returns backend.ErrClosed after Close.
func (s *Store) usable() error {
	if s.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

// mount reads or formats the node record, builds the layout and checks
// every drive's superblock.
func (s *Store) mount() error {
	node, ok, err := s.meta.Node()
	if err != nil {
		return err
	}
	if !ok {
		if node, err = s.format(); err != nil {
			return err
		}
	}
	if err := s.checkStamp(&node); err != nil {
		return err
	}
	if len(s.opts.Drives) != node.Drives {
		return fmt.Errorf("%w: formatted with %d drives, given %d", ErrInvalidOptions, node.Drives,
			len(s.opts.Drives))
	}
	s.node = node
	if s.lay, err = newLayout(node); err != nil {
		return err
	}
	if err := s.opts.gcThresholds(node.Segments); err != nil {
		return err
	}
	return s.mountDrives()
}

// format writes superblocks to blank drives, then the node record.
func (s *Store) format() (meta.NodeInfo, error) {
	o := &s.opts
	columnBytes := int64(o.SegmentStripes) * int64(o.ChunkSize)
	smallest := int64(-1)
	for i, d := range o.Drives {
		if _, err := disk.ReadSuperblock(d); !errors.Is(err, disk.ErrNoSuperblock) {
			return meta.NodeInfo{}, fmt.Errorf("%w: drive %d is not blank (%v) but the metadata is empty",
				ErrForeignDrive, i, err)
		}
		if smallest < 0 || d.Size() < smallest {
			smallest = d.Size()
		}
	}
	node := meta.NodeInfo{FormatVersion: meta.FormatVersion, NodeUUID: o.formatNodeUUID(), ClusterUUID: o.Stamp.Cluster,
		Drives: len(o.Drives), Data: o.Data, Parity: o.Parity, ChunkSize: o.ChunkSize,
		SegmentStripes: o.SegmentStripes, Segments: int((smallest - disk.ReservedSize) / columnBytes)}
	if node.Segments < 8 {
		return meta.NodeInfo{}, fmt.Errorf("%w: drives of %d bytes hold %d segments of %d bytes, need 8",
			ErrInvalidOptions, smallest, max(node.Segments, 0), columnBytes)
	}
	infos := make([]meta.DriveInfo, len(o.Drives))
	for i, d := range o.Drives {
		sb := disk.Superblock{DriveUUID: disk.NewUUID(), NodeUUID: node.NodeUUID, DriveIndex: disk.DriveIndex(i)}
		if err := disk.WriteSuperblock(d, sb); err != nil {
			return meta.NodeInfo{}, fmt.Errorf("store: while formatting drive %d: %w", i, err)
		}
		infos[i] = meta.DriveInfo{Index: uint32(i), UUID: sb.DriveUUID, Size: d.Size()}
	}
	err := s.meta.Update(func(tx *meta.Tx) error {
		for _, info := range infos {
			if err := tx.PutDrive(info); err != nil {
				return err
			}
		}
		return tx.PutNode(node)
	})
	if err != nil {
		return meta.NodeInfo{}, fmt.Errorf("store: while recording the format: %w", err)
	}
	s.log.Info("store formatted", "node", disk.UUID(node.NodeUUID), "segments", node.Segments)
	return node, nil
}
