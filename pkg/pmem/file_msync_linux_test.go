package pmem

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// pretendDAX replaces mmap for the test with one that accepts MAP_SYNC, as
// a DAX filesystem does, by mapping plain MAP_SHARED underneath, and records
// whether each call asked for MAP_SYNC.
func pretendDAX(t *testing.T) *[]bool {
	t.Helper()
	var asked []bool
	old := mmap
	mmap = func(fd int, offset int64, length int, prot int, flags int) ([]byte, error) {
		sync := flags&unix.MAP_SYNC != 0
		asked = append(asked, sync)
		if sync {
			flags = flags&^(unix.MAP_SYNC|unix.MAP_SHARED_VALIDATE) | unix.MAP_SHARED
		}
		return old(fd, offset, length, prot, flags)
	}
	t.Cleanup(func() { mmap = old })
	return &asked
}

// TestOpenFileWithMsyncNeverAsksForMapSync: where the filesystem would give
// a MAP_SYNC mapping, OpenFile takes it (ModeDAX) and OpenFileWith with
// Msync does not ask for one: one plain MAP_SHARED mapping, ModeMsync
// (ModeVolatile if the test's directory is on tmpfs), and Persist works and
// the data is kept across the two.
func TestOpenFileWithMsyncNeverAsksForMapSync(t *testing.T) {
	asked := pretendDAX(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "region")
	size := 4 * 4096

	r, err := OpenFile(path, size)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode() != ModeDAX || len(*asked) != 1 || !(*asked)[0] {
		t.Fatalf("OpenFile: mode %v, MAP_SYNC asked %v; want %v after one MAP_SYNC call", r.Mode(), *asked, ModeDAX)
	}
	copy(r.Bytes()[64:], "written through the DAX path")
	if err := r.Persist(64, 28); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	*asked = nil
	r, err = OpenFileWith(path, size, FileOptions{Msync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := ModeMsync
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) == nil && (fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC) {
		want = ModeVolatile
	}
	if r.Mode() != want || len(*asked) != 1 || (*asked)[0] {
		t.Fatalf("OpenFileWith(Msync): mode %v, MAP_SYNC asked %v; want %v after one plain mapping", r.Mode(), *asked, want)
	}
	if got := string(r.Bytes()[64 : 64+28]); got != "written through the DAX path" {
		t.Fatalf("reopened with msync: read %q", got)
	}
	copy(r.Bytes()[4096+8:], "and through msync")
	if err := r.Persist(4096+8, 17); err != nil {
		t.Fatal(err)
	}
}
