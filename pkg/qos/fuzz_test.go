package qos

import (
	"testing"
	"time"
)

// FuzzThrottleBound: for any limit and any arrival pattern of commands,
// every wait lies in [0, the bound], and the commands a bucket lets go in
// any interval [s, e] (by their release) cost at most Burst + Rate×(e-s)
// plus one command's cost (the debt a command larger than the rest of the
// bucket may run): the limit holds exactly, over every window. The bound is
// an hour here; a sequence that overruns even that (the limit is then
// exceeded by design) is only checked for its waits.
func FuzzThrottleBound(f *testing.F) {
	f.Add(uint8(0), uint16(100), uint16(10), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(3), uint16(4096), uint16(0), []byte{9, 200, 3, 40, 0, 0, 0, 255, 17})
	f.Add(uint8(5), uint16(1), uint16(1), []byte{1, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, which uint8, rate, burst uint16, ops []byte) {
		if rate == 0 || len(ops) > 600 {
			return
		}
		k := kind(which % uint8(numKinds))
		var l Limits
		scale := uint64(10)
		if k >= kindBytes {
			scale = 1000
		}
		*l.all()[k] = Limit{Rate: uint64(rate) * scale, Burst: uint64(burst)}
		clk := newManual()
		th := NewThrottle(clk, nil, time.Hour)
		th.Set(l)
		lim := *l.all()[k]
		type released struct {
			at   time.Duration
			cost uint64
		}
		var got []released
		var maxCost uint64
		for i := 0; i+1 < len(ops); i += 2 {
			clk.Advance(time.Duration(ops[i]) * 100 * time.Microsecond)
			d := Dir(ops[i+1] & 1)
			size := int(ops[i+1]>>1) * 512
			w := th.Reserve(d, size)
			if w < 0 || w > time.Hour {
				t.Fatalf("wait %v outside [0, 1h]", w)
			}
			if !applies(k, d) {
				continue
			}
			cost := uint64(1)
			if k >= kindBytes {
				cost = uint64(size)
			}
			if cost == 0 {
				continue // takes nothing from the bucket, and goes at once
			}
			maxCost = max(maxCost, cost)
			got = append(got, released{at: clk.Since(th.epoch) + w, cost: cost})
		}
		if th.Counters().Stats(Read).Overruns+th.Counters().Stats(Write).Overruns != 0 {
			return // past the bound the limit is exceeded by design (doc.go)
		}
		for i := range got {
			var sum uint64
			for j := i; j < len(got); j++ {
				if got[j].at < got[i].at {
					t.Fatalf("a bucket's releases out of order: %v after %v", got[j].at, got[i].at)
				}
				sum += got[j].cost
				allowed := float64(lim.EffectiveBurst()) + float64(lim.Rate)*(got[j].at-got[i].at).Seconds() + float64(maxCost)
				if float64(sum) > allowed+1e-6 {
					t.Fatalf("%s: %d tokens released in [%v, %v], at most %.0f allowed", kindNames[k], sum,
						got[i].at, got[j].at, allowed)
				}
			}
		}
	})
}

// applies reports whether a bucket of kind k takes from commands in d.
func applies(k kind, d Dir) bool {
	switch k {
	case kindReadIOPS, kindReadBytes:
		return d == Read
	case kindWriteIOPS, kindWriteBytes:
		return d == Write
	}
	return true
}
