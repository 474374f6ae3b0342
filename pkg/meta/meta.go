package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Errors returned by this package wrap one of these (or badger's error).
var (
	// ErrClosed: the DB was closed.
	ErrClosed = errors.New("meta: closed")
	// ErrCorrupt: a record does not decode.
	ErrCorrupt = errors.New("meta: corrupt record")
	// ErrVersion: the store was written by an unknown format version.
	ErrVersion = errors.New("meta: unsupported format version")
	// ErrGate: the Gate refused a write (a simulated crash).
	ErrGate = errors.New("meta: write refused by gate")
)

// Gate brackets write transactions; see Options.Gate.
type Gate interface {
	// Enter is called before a write transaction. A non-nil error refuses
	// the write, which then fails with an error wrapping ErrGate and it.
	Enter() error
	// Exit is called after the transaction, once per successful Enter.
	Exit()
}

// Options configure Open. Sizes are small by default because a machine runs
// several nodes and many tests; the metadata of one node is a few MiB plus
// its map checkpoints.
type Options struct {
	// Dir is the badger directory. Required unless InMemory.
	Dir string
	// InMemory keeps everything in memory (tests): nothing survives Close.
	InMemory bool
	// MemTableSize in bytes; default 8 MiB. Bounds one write transaction
	// (15% of it) and the memory of each memtable.
	MemTableSize int64
	// BlockCacheSize in bytes; default 4 MiB.
	BlockCacheSize int64
	// Logger receives badger's messages: errors and warnings at their level,
	// the rest at debug. Default: discard.
	Logger *slog.Logger
	// Gate, when set, brackets every write transaction (a test hook).
	Gate Gate
}

// EnsureDefaults fills unset fields.
func (o *Options) EnsureDefaults() {
	if o.MemTableSize == 0 {
		o.MemTableSize = 8 << 20
	}
	if o.BlockCacheSize == 0 {
		o.BlockCacheSize = 4 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" && !o.InMemory {
		errs = append(errs, errors.New("meta: Dir is required unless InMemory"))
	}
	if o.MemTableSize < 1<<20 {
		errs = append(errs, fmt.Errorf("meta: MemTableSize %d < 1 MiB", o.MemTableSize))
	}
	if o.BlockCacheSize < 0 {
		errs = append(errs, fmt.Errorf("meta: BlockCacheSize %d < 0", o.BlockCacheSize))
	}
	return errors.Join(errs...)
}

// DB is the node's metadata. Its methods are safe for concurrent use.
type DB struct {
	db       *badger.DB
	maxBatch int64 // bytes per write transaction we aim to stay under
	mu       struct {
		sync.Mutex
		gate Gate
	}
}

// Open opens (or creates) the metadata store and deletes checkpoint chunks
// left by an interrupted checkpoint.
func Open(opts Options) (*DB, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	bo := badger.DefaultOptions(opts.Dir).
		WithInMemory(opts.InMemory).
		WithSyncWrites(!opts.InMemory).
		WithLogger(badgerLogger{opts.Logger}).
		WithMemTableSize(opts.MemTableSize).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(2 << 20).
		WithBaseLevelSize(8 << 20).
		WithValueThreshold(64 << 10).
		WithValueLogFileSize(16 << 20).
		WithBlockCacheSize(opts.BlockCacheSize).
		WithIndexCacheSize(0).
		WithNumCompactors(2).
		WithNumGoroutines(2).
		WithCompression(options.None).
		WithMetricsEnabled(false).
		WithDetectConflicts(false).
		WithCompactL0OnClose(true)
	if opts.InMemory {
		bo.Dir, bo.ValueDir = "", ""
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("meta: while opening badger in %q: %w", opts.Dir, err)
	}
	d := &DB{db: db, maxBatch: opts.MemTableSize * 15 / 100 / 2}
	d.mu.gate = opts.Gate
	if err := d.deleteStrayChunks(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return d, nil
}

// SetGate replaces the Gate (nil: none). Tests call it between the lives of
// a simulated node.
func (d *DB) SetGate(g Gate) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.gate = g
}

// Close closes the store.
func (d *DB) Close() error {
	if err := d.db.Close(); err != nil {
		return fmt.Errorf("meta: while closing: %w", err)
	}
	return nil
}

// Tx is a write transaction: its Puts and Deletes are applied atomically by
// Update.
type Tx struct{ txn *badger.Txn }

// Update runs fn in one durable write transaction. fn's error aborts it.
func (d *DB) Update(fn func(tx *Tx) error) error {
	return d.gated(func() error {
		return d.db.Update(func(txn *badger.Txn) error { return fn(&Tx{txn: txn}) })
	})
}

// gated runs a write between Gate.Enter and Gate.Exit.
func (d *DB) gated(write func() error) error {
	d.mu.Lock()
	gate := d.mu.gate
	d.mu.Unlock()
	if gate != nil {
		if err := gate.Enter(); err != nil {
			return fmt.Errorf("%w: %w", ErrGate, err)
		}
		defer gate.Exit()
	}
	if err := write(); err != nil {
		if errors.Is(err, badger.ErrDBClosed) {
			return fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return fmt.Errorf("meta: write: %w", err)
	}
	return nil
}

func (tx *Tx) putJSON(key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("meta: while encoding %q: %w", key, err)
	}
	return tx.txn.Set(key, b)
}

// PutNode writes the node record.
func (tx *Tx) PutNode(n NodeInfo) error { return tx.putJSON([]byte(keyNode), n) }

// PutDrive writes drive slot d.Index.
func (tx *Tx) PutDrive(d DriveInfo) error { return tx.putJSON(keyU32(prefixDrive, d.Index), d) }

// PutVolume writes volume v.ID.
func (tx *Tx) PutVolume(v VolumeInfo) error {
	return tx.putJSON(keyU32(prefixVolume, uint32(v.ID)), v)
}

// DeleteVolume removes volume id's record.
func (tx *Tx) DeleteVolume(id VolumeID) error {
	return tx.txn.Delete(keyU32(prefixVolume, uint32(id)))
}

// PutSegment writes segment s.ID's row. A free segment keeps its row, so
// that its Gen keeps growing across lives.
func (tx *Tx) PutSegment(s SegmentInfo) error {
	return tx.putJSON(keyU32(prefixSeg, uint32(s.ID)), s)
}

// PutGCStats writes the GC counters.
func (tx *Tx) PutGCStats(g GCStats) error { return tx.putJSON([]byte(keyGC), g) }

// getJSON reads key into v; it reports false if the key is absent.
func (d *DB) getJSON(key []byte, v any) (bool, error) {
	err := d.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error { return decodeJSON(key, b, v) })
	})
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("meta: while reading %q: %w", key, err)
	}
	return true, nil
}

func decodeJSON(key, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrCorrupt, key, err)
	}
	return nil
}

// scanJSON decodes every record under prefix, in key order, passing each to
// add after decoding into a fresh T.
func scanJSON[T any](d *DB, prefix string, add func(T)) error {
	err := d.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var v T
			item := it.Item()
			if err := item.Value(func(b []byte) error { return decodeJSON(item.Key(), b, &v) }); err != nil {
				return err
			}
			add(v)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: while scanning %q: %w", prefix, err)
	}
	return nil
}

// Node returns the node record; ok is false on a store never formatted.
func (d *DB) Node() (n NodeInfo, ok bool, err error) {
	ok, err = d.getJSON([]byte(keyNode), &n)
	if err == nil && ok && n.FormatVersion != FormatVersion {
		return n, ok, fmt.Errorf("%w: %d (this code knows %d)", ErrVersion, n.FormatVersion, FormatVersion)
	}
	return n, ok, err
}

// Drives returns the drive slots in index order.
func (d *DB) Drives() ([]DriveInfo, error) {
	var out []DriveInfo
	err := scanJSON(d, prefixDrive, func(v DriveInfo) { out = append(out, v) })
	return out, err
}

// Volumes returns the volumes in ID order.
func (d *DB) Volumes() ([]VolumeInfo, error) {
	var out []VolumeInfo
	err := scanJSON(d, prefixVolume, func(v VolumeInfo) { out = append(out, v) })
	return out, err
}

// Segments returns every segment row ever written, in ID order; a segment
// without a row has never been used (free, generation 0).
func (d *DB) Segments() ([]SegmentInfo, error) {
	var out []SegmentInfo
	err := scanJSON(d, prefixSeg, func(v SegmentInfo) { out = append(out, v) })
	return out, err
}

// GCStats returns the GC counters (zero if never written).
func (d *DB) GCStats() (GCStats, error) {
	var g GCStats
	_, err := d.getJSON([]byte(keyGC), &g)
	return g, err
}

// badgerLogger sends badger's messages to slog, quietly.
type badgerLogger struct{ log *slog.Logger }

func (l badgerLogger) Errorf(f string, a ...any) { l.logf(slog.LevelError, f, a) }
func (l badgerLogger) Warningf(f string, a ...any) {
	l.logf(slog.LevelWarn, f, a)
}
func (l badgerLogger) Infof(f string, a ...any)  { l.logf(slog.LevelDebug, f, a) }
func (l badgerLogger) Debugf(f string, a ...any) { l.logf(slog.LevelDebug, f, a) }

func (l badgerLogger) logf(level slog.Level, f string, a []any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, "badger: "+fmt.Sprintf(f, a...))
	}
}
