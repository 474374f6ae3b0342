package volume

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/qos"
	"basalt/replication"
)

// Op is a kind of I/O a volume counts.
type Op uint8

// The ops counted.
const (
	OpRead Op = iota
	OpWrite
	OpFlush
	OpTrim
	OpWriteZeroes
	NumOps // how many ops there are
)

var opNames = [NumOps]string{"read", "write", "flush", "trim", "write_zeroes"}

// String returns the op's name as the metrics label it ("write_zeroes").
func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "op?"
}

// Latency buckets: bucket i holds the ops that took at most
// BucketBound(i), 25 µs × 2^i (25 µs to about 3.3 s), and none of the
// bounds below it; bucket LatencyBuckets holds the slower ones.
const (
	LatencyBuckets = 18
	firstBound     = 25 * time.Microsecond
)

// BucketBound returns the upper bound of latency bucket i, for i below
// LatencyBuckets.
func BucketBound(i int) time.Duration { return firstBound << i }

// bucketOf returns the latency bucket of an op that took d.
func bucketOf(d time.Duration) int {
	if d <= firstBound {
		return 0
	}
	q := (uint64(d) + uint64(firstBound) - 1) / uint64(firstBound) // ceil(d / firstBound) ≥ 2
	return min(bits.Len64(q-1), LatencyBuckets)                    // the least i with 2^i ≥ q
}

// Counters are a volume's I/O counts per op, all atomics: counting an op
// allocates nothing and takes no lock. Their zero value is ready.
type Counters struct {
	op          [NumOps]opCounters
	peerRepairs atomic.Uint64 // reads served from another replica (peer.go)
	qos         qos.Counters  // commands the volume's limits held back (qos.go)
}

type opCounters struct {
	ops, errors, bytes atomic.Uint64
	latencySum         atomic.Int64 // ns, over ops and errors
	buckets            [LatencyBuckets + 1]atomic.Uint64
}

// OpStats are one op's counts, as Counters.Stats reads them.
type OpStats struct {
	Ops    uint64 // completed without error
	Errors uint64 // failed (ANA errors included)
	Bytes  uint64 // read or written by the ops that completed
	// Latency of every op, completed or failed: their total, and how many
	// fell in each bucket (not cumulative; see LatencyBuckets).
	LatencySum time.Duration
	Buckets    [LatencyBuckets + 1]uint64
}

// Count returns how many latencies the buckets hold.
func (s *OpStats) Count() uint64 {
	var n uint64
	for _, b := range s.Buckets {
		n += b
	}
	return n
}

// Stats returns op's counts. Each value is read atomically, not all of
// them at one instant: an op completing meanwhile may show in some only.
func (c *Counters) Stats(op Op) OpStats {
	m := &c.op[op]
	s := OpStats{Ops: m.ops.Load(), Errors: m.errors.Load(), Bytes: m.bytes.Load(),
		LatencySum: time.Duration(m.latencySum.Load())}
	for i := range s.Buckets {
		s.Buckets[i] = m.buckets[i].Load()
	}
	return s
}

// record counts one op of n bytes that took d and returned err.
func (c *Counters) record(op Op, n int, d time.Duration, err error) {
	m := &c.op[op]
	m.latencySum.Add(int64(d))
	m.buckets[bucketOf(d)].Add(1)
	if err != nil {
		m.errors.Add(1)
		return
	}
	m.ops.Add(1)
	if n > 0 {
		m.bytes.Add(uint64(n))
	}
}

// Instrumented is a backend that counts its own I/O: a Volume, or a plain
// backend under Instrument.
type Instrumented interface {
	backend.Backend
	Counters() *Counters
}

// Instrument returns b counting its I/O: b itself if it already counts
// (a Volume), else b in a Counted.
func Instrument(b backend.Backend, clk clock.Clock) Instrumented {
	if ib, ok := b.(Instrumented); ok {
		return ib
	}
	return &Counted{Backend: b, clock: clk}
}

// completion is one asynchronous op in flight: it counts the op, and maps
// the group's errors for a Volume, before it calls the caller's done. fn
// and readFn are its methods, bound once when the pool makes it, so that
// an op allocates no closure; it goes back to the pool when done is called
// (exactly once, as backend.AsyncWriter and replication promise).
type completion struct {
	counters *Counters
	clock    clock.Clock
	op       Op
	mapErrs  bool
	n        int
	start    time.Time
	done     func(error)
	fn       func(error) // complete
	// ReadAtAsync's read, once its barrier passes (readFn: readLocal).
	vol    *Volume
	read   []byte
	off    int64
	readFn func(error)
	// A command the volume's limits hold back (qos.go): the group, and a
	// write's proposal; resumeFn (resume) proposes it or starts the read.
	g        *replication.Group
	entry    []byte
	resumeFn func()
}

// completions holds the idle completions (its New is set in init: New's
// methods return completions to it).
var completions sync.Pool

func init() {
	completions.New = func() any {
		c := &completion{}
		c.fn, c.readFn, c.resumeFn = c.complete, c.readLocal, c.resume
		return c
	}
}

func newCompletion(counters *Counters, clk clock.Clock, op Op, n int, done func(error)) *completion {
	c := completions.Get().(*completion)
	c.counters, c.clock, c.op, c.n, c.done = counters, clk, op, n, done
	c.start = clk.Now()
	return c
}

// complete counts the op and calls done with err.
func (c *completion) complete(err error) {
	if c.mapErrs {
		err = mapErr(err)
	}
	c.counters.record(c.op, c.n, c.clock.Now().Sub(c.start), err)
	done := c.done
	*c = completion{fn: c.fn, readFn: c.readFn, resumeFn: c.resumeFn}
	completions.Put(c)
	done(err)
}
