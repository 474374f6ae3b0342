package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"basalt/pkg/nvme/host"
)

// The test's knobs: how long each follower stays away (BASALT_RESYNC_AWAY,
// "60s"; default 12 s) and the clients' write rate in writes per second
// (BASALT_RESYNC_RATE; 0: as fast as queue depth 12 goes; default 1500).
const (
	resyncAwayEnv, resyncRateEnv = "BASALT_RESYNC_AWAY", "BASALT_RESYNC_RATE"
	resyncAwayDefault            = 12 * time.Second
	resyncRateDefault            = 1500
	// resyncMaxRatio bounds the bytes sent to a follower coming back
	// relative to the bytes written while it was away and caught up.
	resyncMaxRatio = 1.5
	// resyncQD is the clients' queue depth.
	resyncQD = 12
)

// resyncKnobs returns the away time and the write rate, from the
// environment or the defaults.
func resyncKnobs(t *testing.T) (time.Duration, int) {
	t.Helper()
	away, rate := resyncAwayDefault, resyncRateDefault
	if s := os.Getenv(resyncAwayEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 60s", resyncAwayEnv, s)
		}
		away = d
	}
	if s := os.Getenv(resyncRateEnv); s != "" {
		r, err := strconv.Atoi(s)
		if err != nil || r < 0 {
			t.Fatalf("%s=%q: want writes per second (0: unpaced)", resyncRateEnv, s)
		}
		rate = r
	}
	return away, rate
}

// TestFollowerStoppedUnderLoadResyncsWhatChanged: three store nodes, an
// rf 3 volume (256 MiB per 12 s away, so that what is written while a
// follower is away stays well under what a whole snapshot would carry),
// half of it prefilled, under 4 KiB random writes over the whole volume at
// queue depth 12, paced to BASALT_RESYNC_RATE writes per second. A
// follower is stopped (SIGTERM in the first round, kill -9 in the second,
// the other follower) for BASALT_RESYNC_AWAY, started again, and waited for
// until it has applied what the leader committed. The Raft bytes the
// proxies carried to it from its restart until then must be at most 1.5
// times the bytes the clients wrote from its stop until then: it gets what
// changed (the retained log or a delta snapshot), not the whole volume.
// The test reports which path the leader took (its "snapshot stream" log
// lines) and the clients' p99 write latency before the stop and during the
// catch-up. Every block is read back at the end and the history checked
// for linearizability.
//
// A Volume's change log keeps 65,536 records (pkg/volume changes.go), one
// per random 4 KiB write: a follower further behind gets a whole snapshot,
// and the bound fails. At 1500 writes/s that is a follower away longer
// than about 40 s, so BASALT_RESYNC_AWAY=60s fails until that limit is
// raised or the log made coarser.
func TestFollowerStoppedUnderLoadResyncsWhatChanged(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	away, rate := resyncKnobs(t)
	volBytes := int64(256<<20) * int64((away+resyncAwayDefault-1)/resyncAwayDefault)
	volBlocks := uint64(volBytes / 4096)
	t.Logf("each follower away %v; clients write at %d writes/s (0: unpaced) at queue depth %d; volume %d MiB (%s, %s)",
		away, rate, resyncQD, volBytes>>20, resyncAwayEnv, resyncRateEnv)
	tc := startCluster(t, opts{nodes: 3, store: true, driveSize: fmt.Sprintf("%dMiB", volBytes>>20)})
	v := tc.createVolume("resync", volBytes, 3)
	mp, closePaths := tc.connectReplicas(v)
	defer closePaths()
	w := newWorkload(mp)
	start := time.Now()
	prefill(t, w, volBlocks/2)
	t.Logf("prefilled %d MiB in %v", volBytes/2>>20, time.Since(start).Round(time.Millisecond))

	ctx, stop := context.WithCancel(context.Background())
	wg := runPaced(ctx, w, resyncQD, volBlocks, rate)
	var last *node
	for round, how := range []string{"kill -9", "SIGTERM"} {
		r := tc.resyncRound(w, "resync", round, how, away, last)
		last = tc.nodes[r.follower-1]
		tc.redial(mp, last, v.NQN) // the host reconnects the path it lost, as Linux does
		if r.ratio() > resyncMaxRatio {
			t.Errorf("round %d (%s): %d bytes sent to node%d from its restart until it caught up, %.2fx the %d bytes "+
				"written while it was away and catching up, want at most %.1fx; the leader's snapshots: %q",
				round+1, how, r.sent, r.follower, r.ratio(), r.written, resyncMaxRatio, r.snapshots)
		}
	}
	stop()
	wg.Wait()
	writes, _, failed := w.counts()
	t.Logf("%d writes completed, %d failed", writes, failed)
	if failed > 0 {
		t.Errorf("%d writes failed while a follower was away; the first: %q", failed, w.firstErrors())
	}
	// The final check reads through new paths to every replica: on a
	// loaded machine a path may have missed its keep-alive meanwhile.
	fresh, closeFresh := tc.connectReplicas(v)
	defer closeFresh()
	w.mp = fresh
	readAll(t, w, volBlocks)
	w.checkLinearizable(t)
}

// redial connects a new controller to n's path of nqn and adds it to mp.
func (tc *testCluster) redial(mp *host.MultiPath, n *node, nqn string) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dial(ctx, n, nqn)
	if err != nil {
		tc.t.Fatalf("reconnecting to node%d: %v", n.id, err)
	}
	tc.t.Cleanup(func() { c.Close() })
	mp.AddPath(c)
}

// runPaced starts clients that, until ctx ends, write a new version of a
// random block in [0, blocks) through w, each waiting for its previous
// write; with rate > 0 they start at most rate writes per second between
// them (a write that finds no token waits for one; tokens not taken within
// 10 ms are dropped, so that a slow spell is not made up with a burst).
func runPaced(ctx context.Context, w *workload, clients int, blocks uint64, rate int) *sync.WaitGroup {
	var wg sync.WaitGroup
	var tokens chan struct{}
	if rate > 0 {
		tokens = make(chan struct{}, clients)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			owed := 0.0
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				for owed += float64(rate) / 100; owed >= 1; owed-- {
					select {
					case tokens <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	for range clients {
		client := w.clientID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(client), uint64(time.Now().UnixNano())))
			for seq := uint64(1); ; seq++ {
				if tokens != nil {
					select {
					case <-ctx.Done():
						return
					case <-tokens:
					}
				} else if ctx.Err() != nil {
					return
				}
				octx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_ = w.write(octx, client, rng.Uint64N(blocks), uint64(client+1)<<40|seq)
				cancel()
			}
		}()
	}
	return &wg
}

// resync is what one round of the test measured.
type resync struct {
	follower      int
	sent, written int64 // bytes to the follower; bytes the clients wrote
	snapshots     []string
}

func (r resync) ratio() float64 { return float64(r.sent) / float64(max(r.written, 1)) }

// resyncRound stops a follower of volume name (how: "SIGTERM" or
// "kill -9"; not last, the previous round's, if it can) under w's load for
// away, starts it again, waits until it has caught up, and reports the
// bytes and latencies.
func (tc *testCluster) resyncRound(w *workload, name string, round int, how string, away time.Duration, last *node) resync {
	tc.t.Helper()
	t := tc.t
	tc.waitHealthy(name, 30*time.Second)
	leader := tc.leaderOf(name)
	var follower *node
	for _, n := range tc.nodes {
		if n != leader && (follower == nil || follower == last) {
			follower = n
		}
	}
	steadyFrom := time.Now()
	time.Sleep(2 * time.Second)
	stopAt := time.Now()
	if how == "SIGTERM" {
		tc.stop(follower)
	} else {
		tc.kill(follower)
	}
	time.Sleep(away - time.Since(stopAt))
	sentBefore, logMarks := tc.bytesTo(follower), tc.logMarks()
	restartAt := time.Now()
	tc.start(follower)
	tc.eventually(60*time.Second, fmt.Sprintf("node%d catches up", follower.id), func() bool {
		commit := tc.groupIndex(leader, name, true)
		return commit > 0 && tc.groupIndex(follower, name, false) >= commit
	})
	caughtAt := time.Now()
	r := resync{follower: follower.id, sent: tc.bytesTo(follower) - sentBefore, written: w.bytesWritten(stopAt, caughtAt),
		snapshots: tc.logLinesSince(logMarks, follower, `msg="snapshot streamed"`, `msg="snapshot stream ended early"`,
			`msg="snapshot stream failed"`)}
	tc.waitHealthy(name, 30*time.Second)
	p99Before, nBefore := w.percentile(0.99, steadyFrom, stopAt)
	p99During, nDuring := w.percentile(0.99, restartAt, caughtAt)
	t.Logf("FIGURE round %d: node%d (%s) away %v, caught up %v after its restart; %.1f MiB sent to it, %.1f MiB written "+
		"while it was away and catching up: %.2fx", round+1, follower.id, how, restartAt.Sub(stopAt).Round(time.Millisecond),
		caughtAt.Sub(restartAt).Round(time.Millisecond), float64(r.sent)/(1<<20), float64(r.written)/(1<<20), r.ratio())
	t.Logf("FIGURE round %d: client p99 write latency %v before the stop (%d writes), %v during the catch-up (%d writes)",
		round+1, p99Before.Round(time.Microsecond), nBefore, p99During.Round(time.Microsecond), nDuring)
	path := "the retained log (no snapshot)"
	if len(r.snapshots) > 0 {
		path = strings.Join(r.snapshots, "; ")
	}
	t.Logf("round %d: node%d was resynced by %s", round+1, follower.id, path)
	return r
}

// bytesTo returns the Raft bytes the proxies have carried to n so far: on
// the connections the other nodes dialed to n, and back to n on those n
// dialed.
func (tc *testCluster) bytesTo(n *node) int64 {
	var b int64
	for _, o := range tc.nodes {
		if o != n {
			b += o.proxiesTo[n.id].toTarget.Load() + n.proxiesTo[o.id].fromTarget.Load()
		}
	}
	return b
}

// bytesWritten returns the bytes of the successful writes completed in
// [from, to).
func (w *workload) bytesWritten(from, to time.Time) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, l := range w.lat {
		if l.write && !l.at.Before(from) && l.at.Before(to) {
			n += 4096
		}
	}
	return n
}

// logMarks returns the size of every node's log file, the marks for
// logLinesSince.
func (tc *testCluster) logMarks() []int64 {
	tc.t.Helper()
	marks := make([]int64, len(tc.nodes))
	for i, n := range tc.nodes {
		fi, err := os.Stat(n.log)
		if err != nil {
			tc.t.Fatal(err)
		}
		marks[i] = fi.Size()
	}
	return marks
}

// logLinesSince returns the lines containing one of msgs that the nodes
// but skip logged after marks, from the first of msgs on, each prefixed
// with its node.
func (tc *testCluster) logLinesSince(marks []int64, skip *node, msgs ...string) []string {
	tc.t.Helper()
	var out []string
	for i, n := range tc.nodes {
		if n == skip {
			continue
		}
		b, err := os.ReadFile(n.log)
		if err != nil {
			tc.t.Fatal(err)
		}
		for _, line := range strings.Split(string(b[min(marks[i], int64(len(b))):]), "\n") {
			for _, m := range msgs {
				if i := strings.Index(line, m); i >= 0 {
					out = append(out, fmt.Sprintf("node%d: %s", n.id, line[i:]))
					break
				}
			}
		}
	}
	return out
}

// bigIO is the size of the prefill's and the final check's I/Os, in
// blocks (128 KiB).
const bigIO = 32

// prefill writes version 1 of every block in [0, blocks) through w's
// MultiPath, in 128 KiB writes at queue depth 8, and records each block's
// write in w's history.
func prefill(t *testing.T, w *workload, blocks uint64) {
	t.Helper()
	bigBlocks(t, w, blocks, func(ctx context.Context, client int, lba uint64) error {
		buf := make([]byte, 0, bigIO*4096)
		for i := range uint64(bigIO) {
			buf = append(buf, block(lba+i, 1)...)
		}
		call := w.now()
		if err := w.mp.Write(ctx, 1, lba, buf, false); err != nil {
			return fmt.Errorf("prefill write at lba %d: %w", lba, err)
		}
		ret := w.now()
		w.mu.Lock()
		defer w.mu.Unlock()
		for i := range uint64(bigIO) {
			w.ops = append(w.ops, porcupine.Operation{ClientId: client, Input: regInput{lba: lba + i, write: true, version: 1},
				Call: call, Output: regOutput{version: 1}, Return: ret})
		}
		return nil
	})
}

// readAll reads every block in [0, blocks) through w's MultiPath, in
// 128 KiB reads at queue depth 8, and records each block's read in w's
// history (a block that is not one written by block() is recorded as
// corrupt).
func readAll(t *testing.T, w *workload, blocks uint64) {
	t.Helper()
	bigBlocks(t, w, blocks, func(ctx context.Context, client int, lba uint64) error {
		buf := make([]byte, bigIO*4096)
		call := w.now()
		if err := w.mp.Read(ctx, 1, lba, buf); err != nil {
			return fmt.Errorf("final read at lba %d: %w", lba, err)
		}
		ret := w.now()
		w.mu.Lock()
		defer w.mu.Unlock()
		for i := range uint64(bigIO) {
			v, err := versionOf(buf[i*4096:(i+1)*4096], lba+i)
			if err != nil {
				w.corrupt = append(w.corrupt, fmt.Sprintf("lba %d: %v", lba+i, err))
				continue
			}
			w.ops = append(w.ops, porcupine.Operation{ClientId: client, Input: regInput{lba: lba + i}, Call: call,
				Output: regOutput{version: v}, Return: ret})
		}
		return nil
	})
}

// bigBlocks runs io for every bigIO-block run in [0, blocks) on 8
// goroutines, each a client of w; the first error fails the test.
func bigBlocks(t *testing.T, w *workload, blocks uint64, io func(ctx context.Context, client int, lba uint64) error) {
	t.Helper()
	next := make(chan uint64)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		client := w.clientID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lba := range next {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := io(ctx, client, lba)
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for lba := uint64(0); lba < blocks; lba += bigIO {
		select {
		case next <- lba:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = <-errs
	}
	if err != nil {
		t.Fatal(err)
	}
}
