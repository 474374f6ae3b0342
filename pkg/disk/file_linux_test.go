package disk

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// refuseDirect is an openFunc that behaves like a filesystem without
// O_DIRECT support (tmpfs before Linux 6.6): EINVAL at open.
func refuseDirect(name string, flag int, perm os.FileMode) (*os.File, error) {
	if flag&syscall.O_DIRECT != 0 {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EINVAL}
	}
	return os.OpenFile(name, flag, perm)
}

func fileDriveMakers() []driveMaker {
	return append(engineDriveMakers(), []driveMaker{ // uring_linux_test.go
		{"file", func(t *testing.T, size int64) Drive {
			d, err := OpenFile(filepath.Join(t.TempDir(), "drive"), size)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}},
		{"file-buffered-fallback", func(t *testing.T, size int64) Drive {
			d, err := openFile(filepath.Join(t.TempDir(), "drive"), size, refuseDirect)
			if err != nil {
				t.Fatal(err)
			}
			if d.Direct() {
				t.Fatal("drive claims O_DIRECT although open refused it")
			}
			return d
		}},
	}...)
}

// directCapable reports whether dir is on a filesystem known to support
// O_DIRECT, where OpenFile must not fall back.
func directCapable(t *testing.T, dir string) bool {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	switch fs.Type {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC:
		return true
	}
	return false
}

func TestOpenFileUsesDirectIOWhereSupported(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenFile(filepath.Join(dir, "drive"), 16*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t.Logf("direct I/O: %v", d.Direct())
	if directCapable(t, dir) && !d.Direct() {
		t.Fatal("O_DIRECT-capable filesystem but the drive runs buffered")
	}
}

func TestOpenFileSizeRules(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "drive")
	fileSize := func() int64 {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return info.Size()
	}
	open := func(size int64) (*FileDrive, error) {
		d, err := OpenFile(path, size)
		if err == nil {
			t.Cleanup(func() { d.Close() })
		}
		return d, err
	}
	if _, err := open(0); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("size 0 on a new empty file: %v, want ErrOutOfRange", err)
	}
	if _, err := open(BlockSize + 1); !errors.Is(err, ErrMisaligned) {
		t.Fatalf("unaligned size: %v, want ErrMisaligned", err)
	}
	if d, err := open(8 * BlockSize); err != nil || d.Size() != 8*BlockSize || fileSize() != 8*BlockSize {
		t.Fatalf("create: %v, file size %d", err, fileSize())
	}
	if d, err := open(4 * BlockSize); err != nil || d.Size() != 4*BlockSize || fileSize() != 8*BlockSize {
		t.Fatalf("smaller size must not truncate: %v, file size %d", err, fileSize())
	}
	if d, err := open(0); err != nil || d.Size() != 8*BlockSize {
		t.Fatalf("size 0 uses the whole file: %v", err)
	}
	if d, err := open(16 * BlockSize); err != nil || d.Size() != 16*BlockSize || fileSize() != 16*BlockSize {
		t.Fatalf("extend: %v, file size %d", err, fileSize())
	}
	if _, err := OpenFile(dir, BlockSize); err == nil {
		t.Fatal("opening a directory succeeded")
	}
}

func TestFileDriveDataSurvivesReopen(t *testing.T) {
	for _, direct := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "drive")
		open := os.OpenFile
		if !direct {
			open = refuseDirect
		}
		d, err := openFile(path, 32*BlockSize, open)
		if err != nil {
			t.Fatal(err)
		}
		data := pattern(4*BlockSize, 11)
		mustWrite(t, d, data, 8*BlockSize)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d, err = OpenFile(path, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, d, len(data), 8*BlockSize); !bytes.Equal(got, data) {
			t.Fatalf("direct=%v: data changed across reopen", direct)
		}
		d.Close()
	}
}

// allocatedBytes returns the bytes the filesystem has allocated to path.
func allocatedBytes(t *testing.T, path string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func TestFileDriveDiscardPunchesHoleOrWritesZeros(t *testing.T) {
	for _, punch := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "drive")
		d, err := OpenFile(path, 64*BlockSize)
		if err != nil {
			t.Fatal(err)
		}
		d.noPunchHole.Store(!punch)
		mustWrite(t, d, pattern(64*BlockSize, 5), 0)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		before := allocatedBytes(t, path)
		if err := d.Discard(16*BlockSize, 32*BlockSize); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, d, 32*BlockSize, 16*BlockSize); !bytes.Equal(got, make([]byte, 32*BlockSize)) {
			t.Fatalf("punch=%v: discarded range does not read as zeros", punch)
		}
		after := allocatedBytes(t, path)
		if punch && directCapable(t, filepath.Dir(path)) && after >= before {
			t.Fatalf("punching a hole freed nothing: %d -> %d bytes allocated", before, after)
		}
		d.Close()
	}
}

// TestFileDriveOnLoopBlockDevice exercises the block-device path (size from
// BLKGETSIZE64, BLKDISCARD) on a loop device. It needs root and losetup and is
// skipped elsewhere.
func TestFileDriveOnLoopBlockDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for losetup")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("no losetup")
	}
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.WriteFile(backing, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", backing).Output()
	if err != nil {
		t.Skipf("losetup: %v", err)
	}
	device := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", device).Run() })

	if _, err := OpenFile(device, 8<<20); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("device larger than requested: %v, want ErrOutOfRange", err)
	}
	d, err := OpenFile(device, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Size() != 4<<20 || !d.device {
		t.Fatalf("size %d, device %v", d.Size(), d.device)
	}
	data := pattern(8*BlockSize, 9)
	mustWrite(t, d, data, 0)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, d, len(data), 0); !bytes.Equal(got, data) {
		t.Fatal("device read back differs")
	}
	if err := d.Discard(0, 8*BlockSize); err != nil {
		t.Fatal(err)
	}
}

// TestFileDrivePunchedHoleReadsZerosAndFreesBlocks discards a range of a
// written file: it must read back as zeros, and, wherever the filesystem
// punches holes (the drive did not fall back to writing zeros), the file's
// allocated blocks must shrink by about the range.
func TestFileDrivePunchedHoleReadsZerosAndFreesBlocks(t *testing.T) {
	const size, off, n = 4 << 20, 1 << 20, 2 << 20
	path := filepath.Join(t.TempDir(), "drive")
	d, err := OpenFile(path, size)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	mustWrite(t, d, pattern(size, 3), 0)
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	before := allocatedBytes(t, path)
	if err := d.Discard(off, n); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, d, n, off); !bytes.Equal(got, make([]byte, n)) {
		t.Fatal("punched range does not read as zeros")
	}
	if got, want := mustRead(t, d, off, 0), pattern(size, 3)[:off]; !bytes.Equal(got, want) {
		t.Fatal("the bytes before the hole changed")
	}
	if d.noPunchHole.Load() {
		t.Skip("this filesystem cannot punch holes; Discard wrote zeros")
	}
	after := allocatedBytes(t, path)
	if before-after < n/2 {
		t.Fatalf("allocated %d bytes before the punch, %d after: want about %d fewer", before, after, n)
	}
}
