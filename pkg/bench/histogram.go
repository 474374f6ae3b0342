package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram geometry: values are nanoseconds. Values below subBuckets are
// counted exactly; above, each power of two [2^k, 2^(k+1)) is split into
// subBuckets/2 equal buckets, so a bucket is at most 1/64 of its value wide
// (HdrHistogram with ~2 significant digits). Values from 2^maxBits ns (about
// 18 minutes) up share the last bucket; Max stays exact.
const (
	subBucketBits = 7
	subBuckets    = 1 << subBucketBits
	halfBuckets   = subBuckets / 2
	maxBits       = 40
	bucketCount   = subBuckets + (maxBits-subBucketBits)*halfBuckets
)

// Histogram records latencies in log-linear buckets. Record does not
// allocate and is not safe for concurrent use: each job owns one, and the
// results are merged with Merge. The zero value is empty and ready to use.
type Histogram struct {
	counts [bucketCount]uint64
	n      uint64
	sum    float64 // ns; float so that long runs cannot overflow
	min    int64
	max    int64
}

// bucketOf returns the bucket index of v (v >= 0).
func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - subBucketBits
	if shift > maxBits-subBucketBits {
		return bucketCount - 1
	}
	m := v >> uint(shift) // in [halfBuckets, subBuckets)
	return subBuckets + (shift-1)*halfBuckets + int(m-halfBuckets)
}

// bucketBounds returns the smallest and largest value of bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < subBuckets {
		return uint64(i), uint64(i)
	}
	j := i - subBuckets
	shift := uint(j/halfBuckets + 1)
	m := uint64(j%halfBuckets + halfBuckets)
	return m << shift, (m+1)<<shift - 1
}

// Record adds one latency. Negative values count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(uint64(v))]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Mean returns the exact mean, 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.n)))
}

// Min and Max return the exact extremes, 0 when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max returns the largest recorded value.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the value at quantile q in [0, 1]: the highest value
// equivalent to the bucket holding the ceil(q*n)-th smallest value, clamped
// to [Min, Max] (as HdrHistogram's getValueAtPercentile). 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i]
		if seen >= rank {
			_, hi := bucketBounds(i)
			v := min(int64(hi), h.max)
			if i == bucketCount-1 {
				v = h.max // the last bucket is open-ended
			}
			return time.Duration(max(v, h.min))
		}
	}
	return time.Duration(h.max)
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Reset empties the histogram.
func (h *Histogram) Reset() { *h = Histogram{} }

// LatencySummary is what the reports show of a histogram, in microseconds.
type LatencySummary struct {
	MeanUS float64 `json:"mean_us"`
	MinUS  float64 `json:"min_us"`
	P50US  float64 `json:"p50_us"`
	P90US  float64 `json:"p90_us"`
	P99US  float64 `json:"p99_us"`
	P999US float64 `json:"p99_9_us"`
	MaxUS  float64 `json:"max_us"`
}

// Summary returns the mean, min, p50, p90, p99, p99.9 and max.
func (h *Histogram) Summary() LatencySummary {
	us := func(d time.Duration) float64 { return math.Round(float64(d)/1e1) / 1e2 }
	return LatencySummary{
		MeanUS: us(h.Mean()), MinUS: us(h.Min()), P50US: us(h.Quantile(0.50)),
		P90US: us(h.Quantile(0.90)), P99US: us(h.Quantile(0.99)),
		P999US: us(h.Quantile(0.999)), MaxUS: us(h.Max()),
	}
}
