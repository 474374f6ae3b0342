package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketBoundsCoverEveryValue(t *testing.T) {
	prevHi := uint64(0)
	for i := range bucketCount {
		lo, hi := bucketBounds(i)
		if i > 0 && lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if hi < lo {
			t.Fatalf("bucket %d: hi %d < lo %d", i, hi, lo)
		}
		for _, v := range []uint64{lo, hi, lo + (hi-lo)/2} {
			if got := bucketOf(v); got != i {
				t.Fatalf("bucketOf(%d) = %d, want %d", v, got, i)
			}
		}
		if lo >= subBuckets && float64(hi-lo+1)/float64(lo) > 1.0/64+1e-12 {
			t.Fatalf("bucket %d [%d, %d] is wider than 1/64 of its value", i, lo, hi)
		}
		prevHi = hi
	}
	if got := bucketOf(math.MaxUint64); got != bucketCount-1 {
		t.Fatalf("huge values go to bucket %d", got)
	}
}

func TestHistogramQuantilesMatchSortedValues(t *testing.T) {
	cases := []struct {
		name string
		gen  func(r *rand.Rand) time.Duration
	}{
		{"uniform 0-10ms", func(r *rand.Rand) time.Duration { return time.Duration(r.Int64N(int64(10 * time.Millisecond))) }},
		{"exponential 100us", func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * 100e3) }},
		{"bimodal", func(r *rand.Rand) time.Duration {
			if r.IntN(100) < 2 {
				return 50*time.Millisecond + time.Duration(r.Int64N(1e6))
			}
			return 80*time.Microsecond + time.Duration(r.Int64N(2e4))
		}},
		{"tiny exact", func(r *rand.Rand) time.Duration { return time.Duration(r.IntN(100)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var h Histogram
			vals := make([]time.Duration, 100000)
			var sum float64
			for i := range vals {
				vals[i] = c.gen(r)
				h.Record(vals[i])
				sum += float64(vals[i])
			}
			slices.Sort(vals)
			if h.Count() != uint64(len(vals)) || h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
				t.Fatalf("count/min/max %d/%v/%v, want %d/%v/%v", h.Count(), h.Min(), h.Max(), len(vals), vals[0], vals[len(vals)-1])
			}
			if want := time.Duration(math.Round(sum / float64(len(vals)))); h.Mean() != want {
				t.Fatalf("mean %v, want %v", h.Mean(), want)
			}
			for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
				rank := max(int(math.Ceil(q*float64(len(vals)))), 1)
				exact := vals[rank-1]
				got := h.Quantile(q)
				if got < exact || float64(got-exact) > float64(exact)/64+1 {
					t.Errorf("q%.3f = %v, exact %v (must be >= and within 1/64)", q, got, exact)
				}
			}
		})
	}
}

func TestHistogramMergeEqualsCombinedRecording(t *testing.T) {
	var a, b, all Histogram
	for i := range 5000 {
		d := time.Duration(i*i) * time.Nanosecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	var empty Histogram
	a.Merge(&empty)
	if a != all {
		t.Fatalf("merged histogram differs: %v vs %v", a.Summary(), all.Summary())
	}
	empty.Merge(&all)
	if empty != all {
		t.Fatal("merging into an empty histogram differs")
	}
}

func TestHistogramEdgeCases(t *testing.T) {
	var h Histogram
	if h.Quantile(0.99) != 0 || h.Mean() != 0 || h.Max() != 0 {
		t.Fatal("empty histogram reports values")
	}
	h.Record(-5)
	if h.Min() != 0 || h.Count() != 1 {
		t.Fatal("negative values must count as zero")
	}
	h.Record(time.Hour) // beyond the last bucket
	if h.Max() != time.Hour || h.Quantile(1) != time.Hour {
		t.Fatalf("max %v, q1 %v", h.Max(), h.Quantile(1))
	}
	h.Reset()
	if h.Count() != 0 {
		t.Fatal("reset left values")
	}
}

func TestHistogramRecordDoesNotAllocate(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(1000, func() { h.Record(1234567) }); n != 0 {
		t.Fatalf("Record allocates %v times", n)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Record(time.Duration(i&0xFFFFF) * 37)
	}
}
