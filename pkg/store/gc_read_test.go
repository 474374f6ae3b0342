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
