package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"

	"basalt/cache"
	"basalt/pkg/pmem"
)

// step is one operation of a scripted workload.
type step struct {
	op   string // "append", "release", "truncate", "reopen"
	size int    // append: payload bytes
	kind cache.Kind
	seq  cache.Seq // release: up to; truncate: from
}

func (s step) String() string {
	switch s.op {
	case "append":
		return fmt.Sprintf("append(%d bytes)", s.size)
	case "release", "truncate":
		return fmt.Sprintf("%s(%v)", s.op, s.seq)
	}
	return s.op
}

// model is what the Buffer must hold: the live records and the next seq.
type model struct {
	live []record
	next cache.Seq
}

func (m model) apply(s step, index int) model {
	live := slices.Clone(m.live)
	switch s.op {
	case "append":
		live = append(live, record{m.next, s.kind, payloadFor(cache.Seq(index), s.size)})
		return model{live, m.next + 1}
	case "release":
		for len(live) > 0 && live[0].Seq <= s.seq {
			live = live[1:]
		}
	case "truncate":
		for len(live) > 0 && live[len(live)-1].Seq >= s.seq {
			live = live[:len(live)-1]
		}
		first := m.next - cache.Seq(len(m.live))
		return model{live, min(m.next, max(s.seq, first))}
	}
	return model{live, m.next}
}

// crashWorkload is a fixed script on a 2 KiB log: appends of many sizes (so
// the log wraps with padding), releases, truncations (of the newest records,
// of everything, past the end) and clean reopens. Releases and truncations
// name seqs relative to the model at that point, so the script stays valid.
func crashWorkload() []step {
	random := rand.New(rand.NewPCG(7, 7))
	var steps []step
	for i := range 100 {
		switch r := random.IntN(20); {
		case i == 25:
			steps = append(steps, step{op: "truncate", seq: 0}) // everything
		case r < 12:
			steps = append(steps, step{op: "append", size: random.IntN(985), kind: cache.Kind(i)})
		case r < 16:
			steps = append(steps, step{op: "release", seq: cache.Seq(random.IntN(3))}) // keep this many
		case r < 18:
			steps = append(steps, step{op: "truncate", seq: cache.Seq(random.IntN(3))}) // drop this many
		default:
			steps = append(steps, step{op: "reopen"})
		}
	}
	return steps
}

// resolve turns a relative release or truncate into absolute seqs.
func (m model) resolve(s step) step {
	switch s.op {
	case "release": // keep the newest s.seq records
		s.seq = m.next - 1 - s.seq
	case "truncate": // drop the newest s.seq records; 0 means drop all
		if s.seq == 0 {
			s.seq = 1
		} else {
			s.seq = m.next - s.seq
		}
	}
	return s
}

// runCrashWorkload runs steps on f until one fails. It returns the model
// before the failed step and after it (equal if none failed), and whether the
// initial format was cut short.
func runCrashWorkload(t *testing.T, f *pmem.Fake, steps []step) (before, after model, formatCut bool) {
	b, err := cache.Open(f, cache.Options{UUID: testUUID})
	if err != nil {
		return model{next: 1}, model{next: 1}, true
	}
	m := model{next: 1}
	for i, s := range steps {
		s = m.resolve(s)
		// Appends that would block are released first, as the destager would.
		if s.op == "append" {
			if st := b.Stats(); st.Used+2*int64(s.size+104) > st.Size && len(m.live) > 0 {
				s = step{op: "release", seq: m.live[len(m.live)-1].Seq}
			}
		}
		var err error
		switch s.op {
		case "append":
			var seq cache.Seq
			seq, err = b.Append(context.Background(), s.kind, payloadFor(cache.Seq(i), s.size))
			if err == nil && seq != m.next {
				t.Fatalf("step %d %v: seq %v, model expects %v", i, s, seq, m.next)
			}
		case "release":
			err = b.Release(s.seq)
		case "truncate":
			err = b.Truncate(s.seq)
		case "reopen":
			if err = b.Close(); err == nil {
				b, err = cache.Open(f, cache.Options{})
			}
		}
		next := m.apply(s, i)
		if err != nil {
			return m, next, false
		}
		m = next
	}
	return m, m, false
}

// TestCrashAtEveryPersistencePoint runs the scripted workload once for every
// k, with power lost after the k-th Persist, and opens the crash image under
// three different draws of unpersisted fragments. Recovery must give exactly
// the records before the interrupted step, or after it: never a torn record,
// a released or truncated one, or a gap. The recovered Buffer must then
// recover the same after a second crash, and keep a new record after a third.
func TestCrashAtEveryPersistencePoint(t *testing.T) {
	steps := crashWorkload()
	for k := 0; ; k++ {
		finished := false
		for seed := range int64(3) {
			f := pmem.NewFake(headerBlock+2048, seed)
			f.FailAfter(k, errPowerLost)
			before, after, formatCut := runCrashWorkload(t, f, steps)
			finished = f.PersistCalls() <= k
			crashed := f.CrashRegion()
			b, err := cache.Open(crashed, cache.Options{})
			if formatCut && errors.Is(err, cache.ErrCorrupt) {
				continue // a torn first header: refused, as documented
			}
			if err != nil {
				t.Fatalf("k=%d seed=%d: Open after crash: %v", k, seed, err)
			}
			got := replayAll(t, b)
			if diffRecords(got, before.live) != "" && diffRecords(got, after.live) != "" {
				t.Fatalf("k=%d seed=%d: recovered %v\nwant %v\n  or %v", k, seed, got, before.live, after.live)
			}
			// A second crash, with nothing new, recovers the same; a record
			// appended after releasing them survives a third.
			b, crashed = crashAndOpen(t, crashed)
			checkRecords(t, b, got)
			if len(got) > 0 {
				if err := b.Release(got[len(got)-1].Seq); err != nil {
					t.Fatal(err)
				}
			}
			p := payloadFor(999, 333)
			seq := mustAppend(t, b, 42, p)
			b, _ = crashAndOpen(t, crashed)
			checkRecords(t, b, []record{{seq, 42, p}})
		}
		if finished {
			if k < 50 {
				t.Fatalf("the workload made only %d Persist calls", k)
			}
			t.Logf("crashed at each of %d persistence points", k)
			return
		}
	}
}

// TestCrashWithConcurrentAppendsOverManySeeds: appenders and releases run at
// once on a small log until power is lost after a random number of Persist
// calls; the crash image keeps random fragments of what was not persisted.
// Recovery must keep every acknowledged record not released, drop every record
// whose release was acknowledged, and return only whole records of the
// workload, in a gap-free run of seqs.
func TestCrashWithConcurrentAppendsOverManySeeds(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	first, n := freshSeeds(t, "BASALT_CACHE", seeds)
	for seed := first; seed < first+n; seed++ {
		crashConcurrently(t, seed)
	}
}

// freshSeeds returns the first of n seeds and n: n is def unless
// PREFIX_SEEDS says otherwise, and the first is drawn fresh for every run
// unless PREFIX_FIRST fixes it (to replay a run, which the log names).
func freshSeeds(t *testing.T, prefix string, def int) (first, n int64) {
	n = int64(def)
	if v, err := strconv.ParseInt(os.Getenv(prefix+"_SEEDS"), 10, 64); err == nil && v > 0 {
		n = v
	}
	first, err := strconv.ParseInt(os.Getenv(prefix+"_FIRST"), 10, 64)
	if err != nil || first <= 0 {
		first = 1 + rand.Int64N(1<<40)
	}
	t.Logf("seeds %d..%d (%s_FIRST=%d replays them)", first, first+n-1, prefix, first)
	return first, n
}

// concurrentRun is what the appenders of crashConcurrently observed.
type concurrentRun struct {
	mu          sync.Mutex
	acked       map[cache.Seq][]byte
	attempted   map[string]bool // payloads of every Append started
	releaseDone cache.Seq       // highest upTo of a Release that returned nil
	releaseTry  cache.Seq       // highest upTo of any Release called
}

func crashConcurrently(t *testing.T, seed int64) {
	random := rand.New(rand.NewPCG(uint64(seed), 1))
	f := pmem.NewFake(headerBlock+8192, seed)
	b, err := cache.Open(f, cache.Options{UUID: testUUID})
	if err != nil {
		t.Fatal(err)
	}
	f.FailAfter(f.PersistCalls()+random.IntN(120), errPowerLost)
	run := &concurrentRun{acked: map[cache.Seq][]byte{}, attempted: map[string]bool{}}
	var wg sync.WaitGroup
	for w := range 4 {
		sizes := rand.New(rand.NewPCG(uint64(seed), uint64(w)+2))
		wg.Go(func() { appendUntilFailure(b, run, w, sizes) })
	}
	wg.Wait()

	b, err = cache.Open(f.CrashRegion(), cache.Options{})
	if err != nil {
		t.Fatalf("seed %d: Open after crash: %v", seed, err)
	}
	got := replayAll(t, b)
	for i, r := range got {
		if !run.attempted[string(r.Payload)] || (i > 0 && r.Seq != got[i-1].Seq+1) {
			t.Fatalf("seed %d: recovered record %v is not a record of the workload, or follows a gap", seed, r)
		}
		if p, ok := run.acked[r.Seq]; ok && !bytes.Equal(p, r.Payload) {
			t.Fatalf("seed %d: record %v recovered with another payload than acknowledged", seed, r.Seq)
		}
		if r.Seq <= run.releaseDone {
			t.Fatalf("seed %d: record %v recovered after Release(%v) returned", seed, r.Seq, run.releaseDone)
		}
	}
	for seq := range run.acked {
		if seq <= run.releaseTry {
			continue
		}
		if len(got) == 0 || seq < got[0].Seq || seq > got[len(got)-1].Seq {
			t.Fatalf("seed %d: acknowledged record %v lost (recovered %v)", seed, seq, got)
		}
	}
}

// appendUntilFailure appends records that name their appender until an Append
// fails, releasing all but the newest few records after each.
func appendUntilFailure(b *cache.Buffer, run *concurrentRun, w int, sizes *rand.Rand) {
	for i := 0; ; i++ {
		p := payloadFor(cache.Seq(w<<20|i), 1+sizes.IntN(900))
		run.mu.Lock()
		run.attempted[string(p)] = true
		run.mu.Unlock()
		seq, err := b.Append(context.Background(), cache.Kind(w), p)
		if err != nil {
			return
		}
		run.mu.Lock()
		run.acked[seq] = p
		upTo := seq - min(seq, 4)
		run.releaseTry = max(run.releaseTry, upTo)
		run.mu.Unlock()
		if err := b.Release(upTo); err != nil {
			return
		}
		run.mu.Lock()
		run.releaseDone = max(run.releaseDone, upTo)
		run.mu.Unlock()
	}
}
