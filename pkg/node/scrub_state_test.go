package node

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"basalt/pkg/store"
)

func newScrubStateFile(t *testing.T) (scrubStateFile, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	return scrubStateFile{path: filepath.Join(t.TempDir(), scrubStateName), log: slog.New(slog.NewTextHandler(&logs, nil))}, &logs
}

func TestScrubStateFileRoundTrips(t *testing.T) {
	f, logs := newScrubStateFile(t)
	if _, ok, err := f.LoadScrub(); ok || err != nil {
		t.Fatalf("missing file: ok %v err %v, want no state and no error", ok, err)
	}
	since := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	states := []store.ScrubState{
		{Since: since},
		{Since: since, LastCompleted: since.Add(168 * time.Hour), Last: store.ScrubCounts{Stripes: 9, Blocks: 288, Bad: 2, Repaired: 1, Unrecoverable: 1},
			PassStarted: since.Add(336 * time.Hour), Cursor: 17, Pass: store.ScrubCounts{Stripes: 4, Blocks: 128}},
	}
	for i, st := range states {
		if err := f.SaveScrub(st); err != nil {
			t.Fatal(err)
		}
		got, ok, err := f.LoadScrub()
		if err != nil || !ok || !reflect.DeepEqual(got, st) {
			t.Errorf("state %d: loaded %+v ok %v err %v, want %+v", i, got, ok, err, st)
		}
	}
	if _, err := os.Stat(f.path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
	if fi, err := os.Stat(f.path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file: %v %v", fi, err)
	}
	if logs.Len() != 0 {
		t.Errorf("logged on good files: %s", logs)
	}
}

func TestScrubStateFileIgnoresACorruptFile(t *testing.T) {
	tests := []struct{ name, content, why string }{
		{"empty", "", "unexpected end of JSON input"},
		{"garbage", "\x00\xffnot json", "invalid character"},
		{"truncated", `{"version":1,"state":{"since":"2026-02-01T00:00:00Z","cur`, "unexpected end of JSON input"},
		{"wrong type", `{"version":1,"state":{"cursor":"seven"}}`, "cannot unmarshal"},
		{"bad time", `{"version":1,"state":{"since":"yesterday"}}`, "parsing time"},
		{"other version", `{"version":2,"state":{}}`, "version 2, want 1"},
		{"no version", `{"state":{}}`, "version 0, want 1"},
		{"negative cursor", `{"version":1,"state":{"cursor":-3}}`, "cursor -3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, logs := newScrubStateFile(t)
			if err := os.WriteFile(f.path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			st, ok, err := f.LoadScrub()
			if ok || err != nil || !reflect.DeepEqual(st, store.ScrubState{}) {
				t.Fatalf("corrupt file: state %+v ok %v err %v, want none and no error", st, ok, err)
			}
			if !strings.Contains(logs.String(), "scrub state file is corrupt") || !strings.Contains(logs.String(), tt.why) {
				t.Errorf("log lacks the corruption (%q): %s", tt.why, logs)
			}
			// The next save replaces the corrupt file.
			want := store.ScrubState{Since: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), Cursor: 2}
			if err := f.SaveScrub(want); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := f.LoadScrub(); !ok || err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("after save: %+v %v %v", got, ok, err)
			}
		})
	}
}

func TestScrubStateFileReportsUnreadableFiles(t *testing.T) {
	f, _ := newScrubStateFile(t)
	if err := os.Mkdir(f.path, 0o700); err != nil { // a directory where the file should be
		t.Fatal(err)
	}
	if _, ok, err := f.LoadScrub(); ok || err == nil || !strings.Contains(err.Error(), "node: scrub state") {
		t.Errorf("unreadable: ok %v err %v, want an error", ok, err)
	}
	if err := f.SaveScrub(store.ScrubState{}); err == nil {
		t.Error("save over a directory succeeded")
	}
}
