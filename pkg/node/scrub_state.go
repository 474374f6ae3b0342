package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/config"
	"basalt/pkg/metrics"
	"basalt/pkg/store"
)

// scrubStateName is the scrub schedule's state file in the data directory.
const scrubStateName = "scrub.json"

// scrubStateVersion is the version of the state file's format.
const scrubStateVersion = 1

// scrubStateFile keeps a store.Scrubber's state as a small JSON file (in
// the node's data directory), replaced atomically:
//
//	{"version": 1, "state": store.ScrubState as JSON}
//
// Save writes a temporary file beside it, syncs it, renames it over the
// old one and syncs the directory, so a crash leaves the old state or the
// new one. Load treats a missing file as no saved state, and a corrupt
// one (not JSON, another version, a negative cursor) as none either,
// after logging it: the schedule then begins a new period.
type scrubStateFile struct {
	path string
	log  *slog.Logger
}

type scrubStateRecord struct {
	Version int              `json:"version"`
	State   store.ScrubState `json:"state"`
}

// LoadScrub implements store.ScrubStateStore.
func (f scrubStateFile) LoadScrub() (store.ScrubState, bool, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return store.ScrubState{}, false, nil
	}
	if err != nil {
		return store.ScrubState{}, false, fmt.Errorf("node: scrub state: %w", err)
	}
	var rec scrubStateRecord
	err = json.Unmarshal(b, &rec)
	switch {
	case err != nil:
	case rec.Version != scrubStateVersion:
		err = fmt.Errorf("version %d, want %d", rec.Version, scrubStateVersion)
	case rec.State.Cursor < 0:
		err = fmt.Errorf("cursor %d", rec.State.Cursor)
	}
	if err != nil {
		f.log.Warn("scrub state file is corrupt; ignoring it (the scrub schedule starts a new period)",
			"path", f.path, "err", err)
		return store.ScrubState{}, false, nil
	}
	return rec.State, true, nil
}

// SaveScrub implements store.ScrubStateStore.
func (f scrubStateFile) SaveScrub(st store.ScrubState) error {
	b, err := json.Marshal(scrubStateRecord{Version: scrubStateVersion, State: st})
	if err != nil {
		return fmt.Errorf("node: scrub state: %w", err)
	}
	tmp := f.path + ".tmp"
	if err := writeSynced(tmp, b); err != nil {
		return fmt.Errorf("node: scrub state: %w", err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return fmt.Errorf("node: scrub state: %w", err)
	}
	dir, err := os.Open(filepath.Dir(f.path))
	if err != nil {
		return fmt.Errorf("node: scrub state: %w", err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("node: scrub state: syncing the directory: %w", err)
	}
	return nil
}

// writeSynced writes b to a new file at path and syncs it.
func writeSynced(path string, b []byte) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := fh.Write(b); err != nil {
		_ = fh.Close()
		return err
	}
	if err := fh.Sync(); err != nil {
		_ = fh.Close()
		return err
	}
	return fh.Close()
}

// startScrubber starts the store's scrub schedule, its state kept in the
// data directory.
func (cp *clusterParts) startScrubber(cfg *config.Config, log *slog.Logger) error {
	interval, rate := cfg.Store.Scrub()
	state := scrubStateFile{path: filepath.Join(cfg.Node.DataDir, scrubStateName), log: log}
	sc, err := store.NewScrubber(cp.store, store.ScrubOptions{Interval: interval, BytesPerSecond: rate, State: state})
	if err != nil {
		return fmt.Errorf("node: scrubber: %w", err)
	}
	cp.scrub = sc
	sc.Start()
	if interval == 0 {
		log.Info("scrub schedule off (store.scrub_interval = 0)")
		return nil
	}
	st := sc.Status()
	log.Info("scrub schedule started", "interval", interval, "rate_bytes_per_s", rate,
		"in_progress", st.InProgress, "next_due", st.NextDue)
	return nil
}

// scrubSample converts the schedule's status for the metrics.
func scrubSample(sc *store.Scrubber) *metrics.ScrubSample {
	st := sc.Status()
	return &metrics.ScrubSample{Enabled: st.Enabled, InProgress: st.InProgress, Fraction: st.Fraction,
		Stripes: st.Total.Stripes, Repaired: st.Total.Repaired, Unrecoverable: st.Total.Unrecoverable,
		Passes: st.Passes, LastCompleted: st.LastCompleted, NextDue: st.NextDue}
}

// scrubView converts the schedule's status for the API.
func scrubView(sc *store.Scrubber) *api.ScrubView {
	st := sc.Status()
	counts := func(c store.ScrubCounts) api.ScrubCounts {
		return api.ScrubCounts{Stripes: c.Stripes, Blocks: c.Blocks, Bad: c.Bad, Repaired: c.Repaired,
			Unrecoverable: c.Unrecoverable}
	}
	v := &api.ScrubView{Enabled: st.Enabled, Interval: st.Interval.String(), RateBytesPerSecond: st.BytesPerSecond,
		InProgress: st.InProgress, Fraction: st.Fraction, LastCompleted: utc(st.LastCompleted),
		NextDue: utc(st.NextDue), PassStarted: utc(st.PassStarted), Last: counts(st.Last), Total: counts(st.Total)}
	if st.InProgress {
		p := counts(st.Pass)
		v.Pass = &p
	}
	return v
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}
