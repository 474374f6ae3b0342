package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/nvme/host"
)

// TestMeasureIOPS measures, on a 3-node process cluster with store-backed
// replicas, 4 KiB random write and read IOPS at queue depth 32 and the
// QD 1 latency, for volumes with replication factor 1, 2 and 3, through
// the user-space host. It is a measurement, not a check: it runs only with
// BASALT_CLUSTER_BENCH=1 and prints FIGURE lines.
func TestMeasureIOPS(t *testing.T) {
	if os.Getenv("BASALT_CLUSTER_BENCH") != "1" {
		t.Skip("set BASALT_CLUSTER_BENCH=1 to measure")
	}
	// A node may hold a replica of all three volumes, each written nearly
	// full: its drives must hold 3 x 256 MiB (2 data drives' worth each).
	tc := startCluster(t, opts{nodes: 3, store: true, driveSize: "512MiB"})
	const size = 256 << 20
	for rf := 1; rf <= 3; rf++ {
		v := tc.createVolume(fmt.Sprintf("bench-rf%d", rf), size, rf)
		mp, closePaths := tc.connectReplicas(v)
		blocks := uint64(size / 4096)
		wIOPS := runIOPS(t, mp, blocks, 32, 3*time.Second, true)
		rIOPS := runIOPS(t, mp, blocks, 32, 3*time.Second, false)
		wLat := qd1(t, mp, blocks, 2*time.Second, true)
		rLat := qd1(t, mp, blocks, 2*time.Second, false)
		t.Logf("FIGURE rf=%d  4KiB random write %6.0f IOPS, read %6.0f IOPS (QD32);  QD1 write p50 %v p99 %v, read p50 %v p99 %v",
			rf, wIOPS, rIOPS, wLat[0], wLat[1], rLat[0], rLat[1])
		closePaths()
	}
}

// connectReplicas returns a MultiPath over the volume's replicas' paths.
func (tc *testCluster) connectReplicas(v api.VolumeView) (*host.MultiPath, func()) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ctrls []*host.Controller
	for _, id := range v.Replicas {
		c, err := dial(ctx, tc.nodes[id-1], v.NQN)
		if err != nil {
			tc.t.Fatal(err)
		}
		ctrls = append(ctrls, c)
	}
	return host.NewMultiPath(ctrls...), func() {
		for _, c := range ctrls {
			c.Close()
		}
	}
}

func runIOPS(t *testing.T, mp *host.MultiPath, blocks uint64, qd int, d time.Duration, write bool) float64 {
	var n atomic.Int64
	// The I/O itself runs without a deadline: the host abandons (and so
	// fails the connection of) a command whose context ends.
	stop, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			buf := make([]byte, 4096)
			for stop.Err() == nil {
				lba := rng.Uint64N(blocks)
				var err error
				if write {
					err = mp.Write(ctx, 1, lba, buf, false)
				} else {
					err = mp.Read(ctx, 1, lba, buf)
				}
				if err == nil {
					n.Add(1)
				} else {
					t.Errorf("I/O: %v", err)
					return
				}
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

func qd1(t *testing.T, mp *host.MultiPath, blocks uint64, d time.Duration, write bool) [2]time.Duration {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4096)
	var lat []time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		lba := rng.Uint64N(blocks)
		start := time.Now()
		var err error
		if write {
			err = mp.Write(context.Background(), 1, lba, buf, false)
		} else {
			err = mp.Read(context.Background(), 1, lba, buf)
		}
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return [2]time.Duration{lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond)}
}
