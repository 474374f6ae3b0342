package store

import "testing"

// TestDataRunsCoverDataChunksOnly checks that the cleaner's read-ahead
// reads every data chunk of the stripes it loads exactly once and no parity
// chunk, for several geometries and starting stripes.
func TestDataRunsCoverDataChunksOnly(t *testing.T) {
	for _, g := range []struct{ data, parity int }{{1, 0}, {2, 1}, {4, 2}, {3, 1}, {1, 2}} {
		sh, err := newShape(g.data, g.parity, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		for _, first := range []int{0, 1, 5} {
			const n = 16
			seen := make(map[[2]int]int)
			for _, r := range dataRuns(nil, sh, first, n) {
				if r.n <= 0 || r.first < first || r.first+r.n > first+n {
					t.Fatalf("%d+%d from %d: run %+v outside the stripes", g.data, g.parity, first, r)
				}
				for j := r.first; j < r.first+r.n; j++ {
					seen[[2]int{r.col, j}]++
				}
			}
			for j := first; j < first+n; j++ {
				for c := range sh.width() {
					col := sh.column(j, c)
					want := 0
					if c < sh.data {
						want = 1
					}
					if got := seen[[2]int{col, j}]; got != want {
						t.Fatalf("%d+%d from %d: stripe %d chunk %d (column %d) read %d times, want %d",
							g.data, g.parity, first, j, c, col, got, want)
					}
				}
			}
		}
	}
}

// TestCleanerReadsAhead churns a volume at 70% fill and checks that the
// cleaner relocated from stripes it had read ahead (the rest of a victim,
// or the next victim), and that every block still reads back, before and
// after a restart.
func TestCleanerReadsAhead(t *testing.T) {
	cfg := defaultRigConfig()
	cfg.opts.synchronous = true
	cfg.opts.GCPolicy = GCGreedy
	r := newRig(t, cfg)
	n := int(r.s.Stats().CapacityBytes/BlockSize) * 7 / 10
	v, err := r.s.CreateVolume("a", int64(n)*BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	want := overwriteTags(t, v, n, 5, r.s.w.work)
	if err := r.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.s.Stats(); st.GCRuns == 0 || r.s.w.gcRead.ahead == 0 {
		t.Fatalf("%d cleaner runs, %d relocations from stripes read ahead", st.GCRuns, r.s.w.gcRead.ahead)
	}
	checkAll(t, v, want)
	r.reopen()
	v, _ = r.s.Volume("a")
	checkAll(t, v, want)
}
