package cluster_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"basalt/pkg/nvme/host"
)

// workload runs clients that read and write 4 KiB blocks through a
// MultiPath and records a history of every operation for porcupine, the
// completion times (for the failover pause) and the latencies.
type workload struct {
	mp    *host.MultiPath
	epoch time.Time

	mu      sync.Mutex
	ops     []porcupine.Operation
	wrote   []time.Time // completion times of successful writes
	lat     []latency
	failed  int
	errs    []string // the first failures, with when they happened
	corrupt []string
	nextID  int
}

type latency struct {
	at    time.Time
	d     time.Duration
	write bool
}

// regInput and regOutput are the operations of a per-block register.
type regInput struct {
	lba     uint64
	write   bool
	version uint64
}

type regOutput struct {
	version uint64
	unknown bool // a write whose outcome is unknown (it failed)
}

// registerModel is a linearizable 4 KiB block per LBA, partitioned by LBA.
var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[uint64][]porcupine.Operation{}
		for _, op := range h {
			lba := op.Input.(regInput).lba
			by[lba] = append(by[lba], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		in, out, cur := input.(regInput), output.(regOutput), state.(uint64)
		if in.write {
			return true, in.version
		}
		return out.version == cur, cur
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if in.write {
			return fmt.Sprintf("write(lba %d, v%x) unknown=%v", in.lba, in.version, out.unknown)
		}
		return fmt.Sprintf("read(lba %d) → v%x", in.lba, out.version)
	},
}

func newWorkload(mp *host.MultiPath) *workload { return &workload{mp: mp, epoch: time.Now()} }

func (w *workload) now() int64 { return time.Since(w.epoch).Nanoseconds() }

func (w *workload) clientID() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nextID++
	return w.nextID - 1
}

// write writes a new version of lba through the MultiPath and records it.
func (w *workload) write(ctx context.Context, client int, lba, version uint64) error {
	return w.writeWith(ctx, w.mp.Write, client, lba, version)
}

// writeWith writes a new version of lba with write and records it.
func (w *workload) writeWith(ctx context.Context, write func(context.Context, uint32, uint64, []byte, bool) error,
	client int, lba, version uint64) error {
	call, start := w.now(), time.Now()
	err := write(ctx, 1, lba, block(lba, version), false)
	ret, end := w.now(), time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	op := porcupine.Operation{ClientId: client, Input: regInput{lba: lba, write: true, version: version}, Call: call,
		Output: regOutput{version: version}, Return: ret}
	if err != nil {
		// The write may or may not have happened, at any time after its call.
		op.Output, op.Return = regOutput{version: version, unknown: true}, math.MaxInt64
		w.failed++
		if len(w.errs) < 10 {
			w.errs = append(w.errs, fmt.Sprintf("%v: %v", time.Since(w.epoch).Round(time.Millisecond), err))
		}
	} else {
		w.wrote = append(w.wrote, end)
		w.lat = append(w.lat, latency{at: end, d: end.Sub(start), write: true})
	}
	w.ops = append(w.ops, op)
	return err
}

// read reads lba and records it; a failed read records nothing.
func (w *workload) read(ctx context.Context, client int, lba uint64) (uint64, error) {
	buf := make([]byte, 4096)
	call, start := w.now(), time.Now()
	err := w.mp.Read(ctx, 1, lba, buf)
	ret, end := w.now(), time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed++
		if len(w.errs) < 10 {
			w.errs = append(w.errs, fmt.Sprintf("%v: %v", time.Since(w.epoch).Round(time.Millisecond), err))
		}
		return 0, err
	}
	v, verr := versionOf(buf, lba)
	if verr != nil {
		w.corrupt = append(w.corrupt, fmt.Sprintf("lba %d: %v", lba, verr))
		return 0, verr
	}
	w.lat = append(w.lat, latency{at: end, d: end.Sub(start)})
	w.ops = append(w.ops, porcupine.Operation{ClientId: client, Input: regInput{lba: lba}, Call: call,
		Output: regOutput{version: v}, Return: ret})
	return v, nil
}

// run starts clients that, until ctx ends, pick a block among lbas and
// write a new version of it (probability writeFrac) or read it. Each
// operation may take up to opTimeout.
func (w *workload) run(ctx context.Context, clients int, lbas []uint64, writeFrac float64, opTimeout time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range clients {
		client := w.clientID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(client), uint64(time.Now().UnixNano())))
			for seq := uint64(1); ctx.Err() == nil; seq++ {
				lba := lbas[rng.IntN(len(lbas))]
				octx, cancel := context.WithTimeout(context.Background(), opTimeout)
				if rng.Float64() < writeFrac {
					_ = w.write(octx, client, lba, uint64(client+1)<<40|seq)
				} else {
					_, _ = w.read(octx, client, lba)
				}
				cancel()
			}
		}()
	}
	return &wg
}

// finalReads reads every block once more after the clients stopped.
func (w *workload) finalReads(t *testing.T, lbas []uint64) {
	t.Helper()
	client := w.clientID()
	for _, lba := range lbas {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := w.read(ctx, client, lba)
		cancel()
		if err != nil {
			t.Fatalf("final read of lba %d: %v", lba, err)
		}
	}
}

// checkLinearizable runs porcupine over the history.
func (w *workload) checkLinearizable(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	ops := slices.Clone(w.ops)
	corrupt := slices.Clone(w.corrupt)
	w.mu.Unlock()
	for _, c := range corrupt {
		t.Errorf("corrupt block read: %s", c)
	}
	res := porcupine.CheckOperationsTimeout(registerModel, ops, 2*time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("linearizable: %d operations checked", len(ops))
	case porcupine.Unknown:
		t.Logf("linearizability check timed out on %d operations (inconclusive)", len(ops))
	default:
		t.Errorf("history of %d operations is NOT linearizable", len(ops))
	}
}

// pauseAfter returns the time from at to the first successful write
// completed after it.
func (w *workload) pauseAfter(at time.Time) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.wrote {
		if c.After(at) {
			return c.Sub(at), true
		}
	}
	return 0, false
}

// maxGap returns the longest time in [from, to) without a successful
// write completing.
func (w *workload) maxGap(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, gap := from, time.Duration(0)
	for _, c := range w.wrote {
		if c.Before(from) || !c.Before(to) {
			continue
		}
		gap, prev = max(gap, c.Sub(prev)), c
	}
	return max(gap, to.Sub(prev))
}

// counts returns the successful writes and reads, and the failures.
func (w *workload) counts() (writes, reads, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lat {
		if l.write {
			writes++
		} else {
			reads++
		}
	}
	return writes, reads, w.failed
}

// percentile returns the p-th percentile (0..1) of the latencies of
// operations completed in [from, to).
func (w *workload) percentile(p float64, from, to time.Time) (time.Duration, int) {
	w.mu.Lock()
	var ds []time.Duration
	for _, l := range w.lat {
		if !l.at.Before(from) && l.at.Before(to) {
			ds = append(ds, l.d)
		}
	}
	w.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[min(len(ds)-1, int(float64(len(ds))*p))], len(ds)
}

func seqLBAs(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i)
	}
	return out
}

// firstErrors returns the first failures the clients saw.
func (w *workload) firstErrors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.errs)
}
