package store

import (
	"errors"
	"testing"

	"basalt/pkg/meta"
)

// gateAt refuses metadata writes while fail is set.
type gateAt struct{ fail error }

func (g *gateAt) Enter() error { return g.fail }
func (g *gateAt) Exit()        {}

func openRowsDB(t *testing.T) *meta.DB {
	t.Helper()
	db, err := meta.Open(meta.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func segmentStates(t *testing.T, db *meta.DB) map[meta.SegmentID]meta.SegmentState {
	t.Helper()
	rows, err := db.Segments()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[meta.SegmentID]meta.SegmentState)
	for _, r := range rows {
		got[r.ID] = r.State
	}
	return got
}

// TestSegRowsCommitInOrder: a waited ticket's row and every row before it
// are committed, later rows of the same segment win, and sync commits all.
func TestSegRowsCommitInOrder(t *testing.T) {
	for _, synchronous := range []bool{false, true} {
		db := openRowsDB(t)
		r := segRows{db: db, synchronous: synchronous}
		t1, _ := r.add(meta.SegmentInfo{ID: 1, State: meta.SegmentOpen})
		t2, _ := r.add(meta.SegmentInfo{ID: 2, State: meta.SegmentOpen})
		if err := r.wait(t2); err != nil {
			t.Fatal(err)
		}
		if got := segmentStates(t, db); got[1] != meta.SegmentOpen || got[2] != meta.SegmentOpen || t1 >= t2 {
			t.Fatalf("synchronous %v: after wait(%d): %v", synchronous, t2, got)
		}
		if _, err := r.add(meta.SegmentInfo{ID: 1, State: meta.SegmentSealed}); err != nil {
			t.Fatal(err)
		}
		if synchronous {
			if got := segmentStates(t, db); got[1] != meta.SegmentOpen {
				t.Fatalf("synchronous mode committed a row nobody waited for: %v", got)
			}
		}
		if err := r.sync(); err != nil {
			t.Fatal(err)
		}
		if got := segmentStates(t, db); got[1] != meta.SegmentSealed {
			t.Fatalf("synchronous %v: after sync: %v", synchronous, got)
		}
	}
}

// TestSegRowsReportAFailedCommit: a commit the metadata refuses fails the
// wait with the cause; nothing is reported durable.
func TestSegRowsReportAFailedCommit(t *testing.T) {
	for _, synchronous := range []bool{false, true} {
		db := openRowsDB(t)
		cause := errors.New("injected")
		db.SetGate(&gateAt{fail: cause})
		r := segRows{db: db, synchronous: synchronous}
		ticket, _ := r.add(meta.SegmentInfo{ID: 3, State: meta.SegmentOpen})
		if err := r.wait(ticket); !errors.Is(err, cause) {
			t.Fatalf("synchronous %v: wait = %v, want the gate's error", synchronous, err)
		}
		if r.durable >= ticket {
			t.Fatalf("synchronous %v: a failed row counts as durable", synchronous)
		}
	}
}
