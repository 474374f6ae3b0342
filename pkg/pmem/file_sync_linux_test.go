package pmem

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// recordSyncs replaces syncFile and syncDir for the test, recording what
// they were asked to sync (and the file's size when it was synced).
func recordSyncs(t *testing.T) *[]string {
	t.Helper()
	var calls []string
	oldFile, oldDir := syncFile, syncDir
	syncFile = func(f *os.File) error {
		info, err := f.Stat()
		if err != nil {
			return err
		}
		pages := info.Size() / int64(os.Getpagesize())
		calls = append(calls, "file "+filepath.Base(f.Name())+" "+strconv.FormatInt(pages, 10)+"p")
		return oldFile(f)
	}
	syncDir = func(dir string) error {
		calls = append(calls, "dir "+dir)
		return oldDir(dir)
	}
	t.Cleanup(func() { syncFile, syncDir = oldFile, oldDir })
	return &calls
}

// TestOpenFileSyncsWhatItCreates: creating the file syncs it at its full
// size, then its directory; extending an existing one syncs the file only;
// reopening one of the right size syncs nothing. This shows that OpenFile
// asks the kernel for each sync at the right moment; whether the file system
// keeps its promise across a power loss is beyond what a test can see.
func TestOpenFileSyncsWhatItCreates(t *testing.T) {
	calls := recordSyncs(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "region")
	page := os.Getpagesize()
	steps := []struct {
		name string
		size int
		want []string
	}{
		{"create", 2 * page, []string{"file region 2p", "dir " + dir}},
		{"reopen", 2 * page, nil},
		{"extend", 3 * page, []string{"file region 3p"}},
		{"smaller", page, nil},
	}
	for _, st := range steps {
		*calls = nil
		r, err := OpenFile(path, st.size)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(*calls, st.want) {
			t.Errorf("%s: synced %q, want %q", st.name, *calls, st.want)
		}
	}
}

// TestOpenFileReportsAFailedSync: a sync that fails fails OpenFile.
func TestOpenFileReportsAFailedSync(t *testing.T) {
	recordSyncs(t)
	boom := errors.New("boom")
	syncDir = func(string) error { return boom }
	if _, err := OpenFile(filepath.Join(t.TempDir(), "region"), os.Getpagesize()); !errors.Is(err, boom) {
		t.Fatalf("OpenFile with a failing directory sync: %v", err)
	}
}
