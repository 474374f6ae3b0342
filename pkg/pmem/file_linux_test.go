package pmem

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestOpenFileFallsBackToMsyncAndKeepsDataAcrossReopen(t *testing.T) {
	dirs := map[string]string{"tempdir": t.TempDir()}
	if info, err := os.Stat("/dev/shm"); err == nil && info.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "pmem-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			dirs["shm"] = dir
		}
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, "region")
			size := 4 * os.Getpagesize()
			r, err := OpenFile(path, size)
			if err != nil {
				t.Fatal(err)
			}
			// Not DAX here, unless the test runs on a DAX filesystem.
			t.Logf("mode: %v", r.Mode())
			if r.Mode() != ModeMsync && r.Mode() != ModeVolatile && r.Mode() != ModeDAX {
				t.Fatalf("Mode() = %v", r.Mode())
			}
			if name == "shm" && r.Mode() != ModeVolatile {
				t.Errorf("tmpfs file: Mode() = %v, want %v", r.Mode(), ModeVolatile)
			}
			if r.Size() != size || len(r.Bytes()) != size {
				t.Fatalf("Size() = %d, len(Bytes()) = %d, want %d", r.Size(), len(r.Bytes()), size)
			}
			want := bytes.Repeat([]byte("basalt!"), 1000)
			copy(r.Bytes()[100:], want)
			if err := r.Persist(100, len(want)); err != nil {
				t.Fatal(err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			r, err = OpenFile(path, size)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got := r.Bytes()[100 : 100+len(want)]; !bytes.Equal(got, want) {
				t.Fatal("data did not survive close and reopen")
			}
		})
	}
}

func TestOpenFileExtendsButNeverShrinks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	page := os.Getpagesize()
	r, err := OpenFile(path, 2*page)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if info, _ := os.Stat(path); info.Size() != int64(2*page) {
		t.Fatalf("file is %d bytes, want %d", info.Size(), 2*page)
	}
	r, err = OpenFile(path, page)
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != page {
		t.Errorf("Size() = %d, want %d", r.Size(), page)
	}
	r.Close()
	if info, _ := os.Stat(path); info.Size() != int64(2*page) {
		t.Fatalf("file shrank to %d bytes", info.Size())
	}
}

func TestOpenFileRejectsBadSizes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	for _, size := range []int{0, -4096, 1, os.Getpagesize() + 1} {
		if _, err := OpenFile(path, size); !errors.Is(err, ErrSize) {
			t.Errorf("OpenFile(size %d) = %v, want ErrSize", size, err)
		}
	}
	if _, err := OpenFile(filepath.Join(t.TempDir(), "missing", "region"), os.Getpagesize()); err == nil {
		t.Error("OpenFile in a missing directory succeeded")
	}
}

func TestFileRegionPersistChecksRangeAndClose(t *testing.T) {
	r, err := OpenFile(filepath.Join(t.TempDir(), "region"), os.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Persist(0, r.Size()+1); !errors.Is(err, ErrRange) {
		t.Errorf("Persist past the end = %v, want ErrRange", err)
	}
	if err := r.Persist(5, 0); err != nil {
		t.Errorf("Persist of nothing = %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Persist(0, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Persist after Close = %v, want ErrClosed", err)
	}
	if err := r.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}

// TestFileRegionDAXPersistPathOnOrdinaryMapping runs the ModeDAX Persist path
// (cache-line write-back, no system call) over a plain shared mapping, where
// the instructions are legal too: it must not fault, and the page cache must
// still hold the data for the next mapping.
func TestFileRegionDAXPersistPathOnOrdinaryMapping(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("cache-line write-back is implemented for amd64 only")
	}
	path := filepath.Join(t.TempDir(), "region")
	r, err := OpenFile(path, 2*os.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	r.mode, r.writeBack = ModeDAX, writeBackMethod
	copy(r.Bytes()[1000:], "written back")
	if err := r.Persist(1000, len("written back")); err != nil {
		t.Fatal(err)
	}
	if err := r.Persist(r.Size()-1, 1); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r, err = OpenFile(path, 2*os.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := string(r.Bytes()[1000 : 1000+len("written back")]); got != "written back" {
		t.Fatalf("read back %q", got)
	}
}
