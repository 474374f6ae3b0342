package qos

import (
	"math"
	"math/bits"
)

const nanosPerSecond = 1e9

// maxSpan bounds a bucket's burst in nanoseconds and a throttle's bound on
// waiting (2^61 ns, 73 years), so that a time plus both never overflows.
const maxSpan = 1 << 61

// bucket is one Limit as the generic cell rate algorithm keeps it (doc.go,
// "Buckets"); times are nanoseconds of the throttle's clock since its
// epoch. The zero bucket (rate 0) is unlimited.
type bucket struct {
	rate uint64 // tokens per second; 0: unlimited
	tau  int64  // the burst, as the nanoseconds the rate takes to refill it
	// tat is when the bucket is full again: a command may go once
	// tat - tau is not after now. Invariant: tat <= now + tau + maxWait
	// after every reserve.
	tat int64
	// rem is the remainder of the last cost's division by rate, in
	// token-nanoseconds, carried so that the rate is exact.
	rem uint64
}

// duration returns tokens/rate in nanoseconds and the remainder of the
// division (in token-nanoseconds, below rate), adding carry to the
// dividend first; it saturates at math.MaxInt64 (a cost no bucket can
// refill, which MaxWait then bounds).
func duration(tokens, rate, carry uint64) (ns int64, rem uint64) {
	hi, lo := bits.Mul64(tokens, nanosPerSecond)
	var c uint64
	lo, c = bits.Add64(lo, carry, 0)
	hi += c
	if hi >= rate {
		return math.MaxInt64, 0
	}
	q, r := bits.Div64(hi, lo, rate)
	if q > math.MaxInt64 {
		return math.MaxInt64, 0
	}
	return int64(q), r
}

// set gives the bucket a new limit at time now. A bucket that was unlimited
// starts full; one whose limit changes keeps its debt in tokens (what it
// lent beyond being full), converted to the new rate and capped so that a
// command reserving next waits at most maxWait for it.
func (b *bucket) set(lim Limit, now, maxWait int64) {
	if lim.Unlimited() {
		*b = bucket{}
		return
	}
	tau, _ := duration(lim.EffectiveBurst(), lim.Rate, 0)
	nb := bucket{rate: lim.Rate, tau: min(tau, maxSpan), tat: now}
	if b.rate != 0 && b.tat > now {
		tokens := mulDiv(uint64(b.tat-now), b.rate, nanosPerSecond)
		d, _ := duration(tokens, lim.Rate, 0)
		nb.tat = now + min(d, nb.tau+maxWait)
	}
	*b = nb
}

// mulDiv returns a*b/c, saturating at math.MaxUint64.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// reserve takes cost tokens at time now and returns when the command may
// go (at or before now: at once). An unlimited bucket returns now, and so
// does a command that costs nothing (a trim against a bandwidth limit).
func (b *bucket) reserve(now int64, cost uint64) int64 {
	if b.rate == 0 || cost == 0 {
		return now
	}
	inc, rem := duration(cost, b.rate, b.rem)
	b.rem = rem
	b.tat = satAdd(max(b.tat, now), inc)
	return b.tat - b.tau
}

// forgive caps the bucket's debt so that it is paid back by release: the
// command that reserved it goes then (the throttle's MaxWait bound).
func (b *bucket) forgive(release int64) {
	if b.rate != 0 {
		b.tat = min(b.tat, release+b.tau)
	}
}

// satAdd returns a+d, saturating at math.MaxInt64 (d ≥ 0).
func satAdd(a, d int64) int64 {
	if a > math.MaxInt64-d {
		return math.MaxInt64
	}
	return a + d
}
