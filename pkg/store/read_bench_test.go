package store

import (
	"fmt"
	"path/filepath"
	"testing"

	"basalt/pkg/disk"
	"basalt/pkg/pmem"
)

// The read benchmarks per drive I/O engine, next to fio (bench_test.go):
//
//	go test -run '^$' -bench 'RandomRead4K' -benchmem ./pkg/store/
//
// BenchmarkRawRandomRead4KByEngine reads the drive files directly and
// BenchmarkRandomRead4KByEngine reads destaged volume blocks through the
// store, each with the drives' ReadAt on pread and on io_uring.
// (BenchmarkRawRandomRead4K and BenchmarkRandomRead4K use OpenFile's
// default engine: io_uring where the kernel allows it.)

var benchEngines = []disk.FileOptions{{Engine: disk.EnginePread}, {Engine: disk.EngineURing}}

// engineName names a sub-benchmark after its options.
func engineName(opts disk.FileOptions) string {
	if opts.URingBlockingWait {
		return opts.Engine.String() + "-blocking-wait"
	}
	return opts.Engine.String()
}

// openEngineDrive opens a drive file with opts, skipping the benchmark
// where the kernel refuses io_uring.
func openEngineDrive(b *testing.B, path string, size int64, opts disk.FileOptions) *disk.FileDrive {
	b.Helper()
	d, err := disk.OpenFileWith(path, size, opts)
	if err != nil {
		if opts.Engine == disk.EngineURing {
			b.Skipf("io_uring: %v", err)
		}
		b.Fatal(err)
	}
	return d
}

// BenchmarkRawRandomRead4KByEngine is BenchmarkRawRandomRead4K per engine,
// and with io_uring's reaper waiting in io_uring_enter rather than on its
// eventfd.
func BenchmarkRawRandomRead4KByEngine(b *testing.B) {
	engines := append(benchEngines, disk.FileOptions{Engine: disk.EngineURing, URingBlockingWait: true})
	for _, engine := range engines {
		b.Run(engineName(engine), func(b *testing.B) {
			// Fill the files once (with the default engine), then reopen
			// them with the engine under test.
			_, paths := rawFiles(b)
			drives := make([]*disk.FileDrive, len(paths))
			for i, path := range paths {
				drives[i] = openEngineDrive(b, path, benchDriveSize, engine)
				b.Cleanup(func() { _ = drives[i].Close() })
			}
			driveOps(b, drives, false)
		})
	}
}

// BenchmarkRandomRead4KByEngine is BenchmarkRandomRead4K per engine.
func BenchmarkRandomRead4KByEngine(b *testing.B) {
	for _, engine := range benchEngines {
		b.Run(engineName(engine), func(b *testing.B) {
			randomReads(b, openEngineStore(b, engine))
		})
	}
}

// openEngineStore is openBenchStore with the drives opened on engine:
// what OpenPaths does, with the engine chosen.
func openEngineStore(b *testing.B, engine disk.FileOptions) *Store {
	b.Helper()
	dir := benchTempDir(b)
	var drives []disk.Drive
	for i := range benchDrives {
		drives = append(drives, openEngineDrive(b, filepath.Join(dir, fmt.Sprintf("drive%d", i)), benchDriveSize, engine))
	}
	region, err := pmem.OpenFile(benchBufferPath(b), benchBufferSize)
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(Options{Drives: drives, Buffer: region, MetaDir: filepath.Join(dir, "meta")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}
