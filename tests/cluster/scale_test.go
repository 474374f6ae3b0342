package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
)

// TestScaleVolumes creates many volumes (rf 3, 1 MiB, file replicas) on a
// three-node cluster, checks that every node's API lists them all healthy,
// each with its own ANA group and with a leader, and prints what an idle
// volume costs: each node's CPU (utime+stime from /proc/<pid>/stat) over an
// idle window and its RSS (VmRSS, and of it RssAnon and RssShmem), before
// any volume and after, and the difference per volume. It prints figures and asserts nothing about them.
//
//	BASALT_SCALE_VOLUMES  volumes to create (default 200)
//	BASALT_SCALE_IDLE     each idle window (default 10s)
//	BASALT_SCALE_PERF     a directory: perf record node1 during the loaded
//	                      idle window into perf.data there
//
// scripts/scale.sh runs it with 1,000 volumes and 20 s windows. -short
// skips it.
func TestScaleVolumes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the scale test creates hundreds of volumes")
	}
	n := envInt(t, "BASALT_SCALE_VOLUMES", 200)
	idle := envDuration(t, "BASALT_SCALE_IDLE", 10*time.Second)
	tc := startCluster(t, opts{nodes: 3, raftLog: "256MiB"})
	time.Sleep(2 * time.Second) // let the metadata group settle
	before := tc.idleCost(idle, "")

	start := time.Now()
	tc.createMany(n)
	created := time.Since(start)
	tc.eventually(time.Duration(n)*200*time.Millisecond+60*time.Second, "every volume is healthy", func() bool {
		return tc.countHealthy(n) == n
	})
	t.Logf("created %d volumes in %v, all healthy after %v", n, created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	for _, nd := range tc.nodes {
		tc.checkListing(nd, n)
	}
	time.Sleep(3 * time.Second) // elections and ANA changes settle
	after := tc.idleCost(idle, os.Getenv("BASALT_SCALE_PERF"))
	for _, nd := range tc.nodes {
		if nd.cmd == nil || nd.cmd.ProcessState != nil {
			t.Fatalf("node%d is not running", nd.id)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "idle cost, %d volumes (rf 3) on 3 nodes, %v windows:\n", n, idle)
	fmt.Fprintf(&b, "%-6s %10s %10s %13s %9s %9s %12s %13s %12s\n", "node", "cpu0 %core", "cpuN %core", "per vol %core",
		"rss0 MiB", "rssN MiB", "per vol KiB", "anon/vol KiB", "shm/vol KiB")
	for i, nd := range tc.nodes {
		b0, bN := before[i], after[i]
		perVol := func(x0, xN int64) float64 { return float64(xN-x0) / 1024 / float64(n) }
		fmt.Fprintf(&b, "node%-2d %10.2f %10.2f %13.4f %9.1f %9.1f %12.1f %13.1f %12.1f\n", nd.id, 100*b0.cpu, 100*bN.cpu,
			100*(bN.cpu-b0.cpu)/float64(n), float64(b0.rss)/(1<<20), float64(bN.rss)/(1<<20),
			perVol(b0.rss, bN.rss), perVol(b0.anon, bN.anon), perVol(b0.shm, bN.shm))
	}
	t.Log(b.String())
}

// nodeCost is one node's CPU (cores used on average) over a window and its
// RSS (bytes) at the end of it.
type nodeCost struct {
	cpu            float64
	rss, anon, shm int64
}

// idleCost measures every node over one window of length d; with perfDir
// set it records node1's profile meanwhile.
func (tc *testCluster) idleCost(d time.Duration, perfDir string) []nodeCost {
	tc.t.Helper()
	var perf *exec.Cmd
	if perfDir != "" {
		perf = exec.Command("perf", "record", "-F", "499", "-g", "-o", filepath.Join(perfDir, "perf.data"),
			"-p", strconv.Itoa(tc.nodes[0].cmd.Process.Pid), "--", "sleep", strconv.Itoa(int(d.Seconds())))
		perf.Stdout, perf.Stderr = os.Stderr, os.Stderr
		if err := perf.Start(); err != nil {
			tc.t.Logf("perf: %v", err)
			perf = nil
		}
	}
	t0 := make([]int64, len(tc.nodes))
	for i, nd := range tc.nodes {
		t0[i] = cpuTicks(tc.t, nd.cmd.Process.Pid)
	}
	start := time.Now()
	time.Sleep(d)
	el := time.Since(start).Seconds()
	out := make([]nodeCost, len(tc.nodes))
	for i, nd := range tc.nodes {
		pid := nd.cmd.Process.Pid
		m := memStatus(tc.t, pid)
		out[i] = nodeCost{cpu: float64(cpuTicks(tc.t, pid)-t0[i]) / clockTicks / el,
			rss: m["VmRSS"], anon: m["RssAnon"], shm: m["RssShmem"]}
	}
	if perf != nil {
		_ = perf.Wait()
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// cpuTicks returns utime+stime of process pid.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14, stime 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return u + s
}

// memStatus returns fields of /proc/<pid>/status given in kB, in bytes:
// VmRSS, RssAnon (heap, stacks), RssShmem (the Raft log region on tmpfs).
func memStatus(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if rest, kb := strings.CutSuffix(strings.TrimSpace(v), " kB"); ok && kb {
			if n, err := strconv.ParseInt(rest, 10, 64); err == nil {
				out[k] = n << 10
			}
		}
	}
	if _, ok := out["VmRSS"]; !ok {
		t.Fatalf("/proc/%d/status has no VmRSS", pid)
	}
	return out
}

// createMany creates volumes s0000.. through the nodes' APIs, eight at a
// time, without waiting for each to be healthy. A create answered "already
// exists" is counted and logged, not failed: the names are this test's
// own, so the cluster applied an earlier attempt of that create.
func (tc *testCluster) createMany(n int) {
	tc.t.Helper()
	var next, exists atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := tc.client(tc.nodes[w%len(tc.nodes)])
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: scaleName(i), Size: 1 << 20, RF: 3})
				cancel()
				if errors.Is(err, cluster.ErrExists) {
					// Only this test creates these names: a create the
					// cluster retried after applying it (checkListing
					// checks the volume).
					exists.Add(1)
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("creating %s: %w", scaleName(i), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if k := exists.Load(); k > 0 {
		tc.t.Logf("%d creates answered \"already exists\" for a name only this test used", k)
	}
	for err := range errs {
		tc.t.Fatal(err)
	}
}

func scaleName(i int) string { return fmt.Sprintf("s%04d", i) }

// countHealthy returns how many volumes node1's API lists as healthy.
func (tc *testCluster) countHealthy(n int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vs, err := tc.client(tc.up()).Volumes(ctx)
	if err != nil {
		return 0
	}
	healthy := 0
	for _, v := range vs {
		if v.Health == "healthy" {
			healthy++
		}
	}
	return healthy
}

// checkListing checks that nd's API lists exactly the n volumes, healthy,
// rf 3 on three distinct nodes, a leader each, and ANA group IDs unique
// and within MaxANAGroups.
func (tc *testCluster) checkListing(nd *node, n int) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vs, err := tc.client(nd).Volumes(ctx)
	if err != nil {
		tc.t.Fatalf("node%d: listing volumes: %v", nd.id, err)
	}
	if len(vs) != n {
		tc.t.Fatalf("node%d lists %d volumes, want %d", nd.id, len(vs), n)
	}
	groups := map[uint32]string{}
	for _, v := range vs {
		if other, dup := groups[v.ANAGroup]; dup || v.ANAGroup == 0 || v.ANAGroup > cluster.MaxANAGroups {
			tc.t.Fatalf("node%d: %s has ANA group %d (also %q)", nd.id, v.Name, v.ANAGroup, other)
		}
		groups[v.ANAGroup] = v.Name
		if v.Health != "healthy" || v.RF != 3 || len(v.Replicas) != 3 || v.Leader == 0 {
			tc.t.Fatalf("node%d: %s: health %s rf %d replicas %v leader %d", nd.id, v.Name, v.Health, v.RF, v.Replicas, v.Leader)
		}
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		t.Fatalf("%s=%q: want a duration like 20s", name, s)
	}
	return v
}
