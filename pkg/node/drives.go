package node

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/config"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/metrics"
	"basalt/pkg/store"
)

// openDrive opens the drive file at path. Once the store is formatted (its
// node record is in db), a drive that is absent or cannot be opened is not
// created again: it is given to the store as a missingDrive, which fails
// every I/O, so the store opens degraded with that slot failed (or refuses,
// if more are lost than its parity covers), and the log says which drive
// and why. Before the format, drive files are created as always.
func openDrive(db *meta.DB, path string, size int64, log *slog.Logger) (disk.Drive, error) {
	_, formatted, err := db.Node()
	if err != nil {
		return nil, fmt.Errorf("node: metadata: %w", err)
	}
	if formatted {
		if _, err := os.Stat(path); err != nil {
			return lostDrive(path, size, err, log), nil
		}
	}
	d, err := disk.OpenFile(path, size)
	if err != nil {
		if formatted {
			return lostDrive(path, size, err, log), nil
		}
		return nil, fmt.Errorf("node: drive %s: %w", path, err)
	}
	return d, nil
}

func lostDrive(path string, size int64, cause error, log *slog.Logger) disk.Drive {
	what := "cannot be opened"
	if errors.Is(cause, fs.ErrNotExist) {
		what = "is missing"
	}
	log.Error("drive "+what+": the store starts without it, serving its data from parity while the rebuild "+
		"re-protects it; replace it with basaltctl drive replace", "path", path, "err", cause)
	return &missingDrive{path: path, size: size, cause: cause}
}

// missingDrive stands for a drive that could not be opened: every I/O fails
// with disk.ErrDriveFailed, naming the path and the cause.
type missingDrive struct {
	path  string
	size  int64
	cause error
}

func (d *missingDrive) err() error {
	return fmt.Errorf("%w: %s could not be opened: %w", disk.ErrDriveFailed, d.path, d.cause)
}

func (d *missingDrive) ReadAt([]byte, int64) (int, error)  { return 0, d.err() }
func (d *missingDrive) WriteAt([]byte, int64) (int, error) { return 0, d.err() }
func (d *missingDrive) Sync() error                        { return d.err() }
func (d *missingDrive) Discard(int64, int64) error         { return d.err() }
func (d *missingDrive) Size() int64                        { return d.size }
func (d *missingDrive) BlockSize() int                     { return disk.BlockSize }
func (d *missingDrive) Close() error                       { return nil }

// startRebuilder starts the store's background rebuild at [store]
// rebuild_rate.
func startRebuilder(st *store.Store, sc *config.Store) error {
	if err := st.StartRebuilder(store.RebuildOptions{BytesPerSecond: sc.RebuildBytesPerSecond()}); err != nil {
		return fmt.Errorf("node: store: %w", err)
	}
	return nil
}

// nodeDrives is the API's DriveManager over the node's store.
type nodeDrives struct {
	st   *store.Store
	size int64 // [store] drive_size, for replacements
	log  *slog.Logger
	mu   sync.Mutex
	// paths are the drive files, by slot: the configuration's, then the
	// replacements'.
	paths []string
}

var _ api.DriveManager = (*nodeDrives)(nil)

func newNodeDrives(st *store.Store, sc *config.Store, log *slog.Logger) *nodeDrives {
	return &nodeDrives{st: st, size: int64(sc.DriveSize), log: log, paths: append([]string(nil), sc.Drives...)}
}

// Drives implements api.DriveManager.
func (m *nodeDrives) Drives() api.DrivesView {
	m.mu.Lock()
	paths := append([]string(nil), m.paths...)
	m.mu.Unlock()
	var v api.DrivesView
	for _, d := range m.st.Drives() {
		dv := api.DriveView{Slot: d.Index, UUID: d.UUID, Size: d.Size, State: d.State, Reads: d.Reads,
			Writes: d.Writes, Errors: d.Errors}
		if d.Index < len(paths) {
			dv.Path = paths[d.Index]
		}
		v.Drives = append(v.Drives, dv)
	}
	r := m.st.RebuildStatus()
	v.Rebuild = api.RebuildView{Running: r.Running, Drives: r.Drives, SegmentsDone: r.SegmentsDone,
		SegmentsTotal: r.SegmentsTotal, SegmentsSkipped: r.SegmentsSkipped, BytesDone: r.BytesDone,
		BytesTotal: r.BytesTotal, BytesPerSecond: r.BytesPerSecond, ETASeconds: r.ETA.Seconds(),
		RateLimit: r.RateLimit, Started: r.Started, Finished: r.Finished, Passes: r.Passes, LastError: r.LastError}
	return v
}

func (m *nodeDrives) slot(slot int) (store.DriveStatus, error) {
	drives := m.st.Drives()
	if slot < 0 || slot >= len(drives) {
		return store.DriveStatus{}, fmt.Errorf("%w: no drive slot %d (this node has slots 0 to %d)",
			cluster.ErrInvalid, slot, len(drives)-1)
	}
	return drives[slot], nil
}

// FailDrive implements api.DriveManager.
func (m *nodeDrives) FailDrive(slot int) error {
	if _, err := m.slot(slot); err != nil {
		return err
	}
	if err := m.st.FailDrive(slot); err != nil {
		return fmt.Errorf("node: failing drive %d: %w", slot, err)
	}
	m.log.Warn("drive taken out by the operator", "drive", slot)
	return nil
}

// ReplaceDrive implements api.DriveManager: it opens path as the node
// opens its drives at start ([store] drive_size), refusing a path another
// slot uses, and hands it to the store, which formats it and rebuilds onto
// it in the background.
func (m *nodeDrives) ReplaceDrive(slot int, path string) error {
	d, err := m.slot(slot)
	if err != nil {
		return err
	}
	if d.State != "failed" && d.State != "evacuated" {
		return fmt.Errorf("%w: drive %d is %s; fail it first (basaltctl drive fail %d)", api.ErrDriveState, slot,
			d.State, slot)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, p := range m.paths {
		if p == path && i != slot {
			return fmt.Errorf("%w: %s is drive %d's", cluster.ErrInvalid, path, i)
		}
	}
	drive, err := disk.OpenFile(path, m.size)
	if err != nil {
		return fmt.Errorf("%w: replacement for drive %d: %w", cluster.ErrInvalid, slot, err)
	}
	if err := m.st.ReplaceDrive(slot, drive); err != nil {
		_ = drive.Close()
		if errors.Is(err, store.ErrDriveState) {
			err = fmt.Errorf("%w: %w", api.ErrDriveState, err)
		}
		return fmt.Errorf("node: replacing drive %d: %w", slot, err)
	}
	m.paths[slot] = path
	m.log.Warn("drive replaced; rebuilding onto it. Put its path into [store] drives", "drive", slot, "path", path)
	return nil
}

// rebuildSample converts the store's rebuild status for the metrics.
func rebuildSample(st *store.Store) *metrics.RebuildSample {
	r := st.RebuildStatus()
	return &metrics.RebuildSample{Running: r.Running, SegmentsDone: r.SegmentsDone, SegmentsTotal: r.SegmentsTotal,
		BytesDone: r.BytesDone, BytesTotal: r.BytesTotal, BytesPerSecond: r.BytesPerSecond, ETA: r.ETA,
		RateLimit: r.RateLimit, Passes: r.Passes}
}
