package store

import (
	"fmt"

	"basalt/pkg/disk"
	"basalt/pkg/pmem"
)

// Paths names the files of a node's store, for OpenPaths.
type Paths struct {
	// Drives are the drive files or block devices, in slot order. Files
	// are created (sparse) if missing.
	Drives []string
	// DriveSize is the size of each drive file in bytes (a multiple of
	// 4096); 0 means the whole existing file or device.
	DriveSize int64
	// Buffer is the write-buffer file: on a DAX filesystem for persistent
	// memory, on tmpfs for development (fast, lost on power loss), anywhere
	// else with msync.
	Buffer string
	// BufferSize is its size in bytes, a multiple of the page size; the
	// file is created or extended to it.
	BufferSize int64
	// MetaDir is the badger directory; created if missing.
	MetaDir string
}

// OpenPaths opens the drives and the write-buffer region named by p and
// then the store on them with opts (whose Drives, Buffer and MetaDir it
// sets). It is what basaltd calls.
func OpenPaths(p Paths, opts Options) (*Store, error) {
	if len(p.Drives) == 0 || p.Buffer == "" || p.MetaDir == "" {
		return nil, fmt.Errorf("%w: paths need drives, a buffer file and a metadata directory", ErrInvalidOptions)
	}
	var drives []disk.Drive
	closeDrives := func() {
		for _, d := range drives {
			_ = d.Close()
		}
	}
	for _, path := range p.Drives {
		d, err := disk.OpenFile(path, p.DriveSize)
		if err != nil {
			closeDrives()
			return nil, fmt.Errorf("store: while opening drive %s: %w", path, err)
		}
		if !d.Direct() && opts.Logger != nil {
			opts.Logger.Warn("drive runs without O_DIRECT", "path", path)
		}
		drives = append(drives, d)
	}
	region, err := pmem.OpenFile(p.Buffer, int(p.BufferSize))
	if err != nil {
		closeDrives()
		return nil, fmt.Errorf("store: while mapping the write buffer %s: %w", p.Buffer, err)
	}
	if opts.Logger != nil {
		opts.Logger.Info("write buffer mapped", "path", p.Buffer, "mode", region.Mode().String(),
			"survives_power_loss", region.Mode().Durable())
	}
	opts.Drives, opts.Buffer, opts.MetaDir, opts.Meta = drives, region, p.MetaDir, nil
	return Open(opts)
}
