package node

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/nvme/host"
	"basalt/pkg/qos"
)

// TestQoSEndToEnd: a one-node cluster, two volumes, the whole path: the
// limits given to the API at create time reach the volume's leader through
// the metadata, and a host writing at queue depth 32 over NVMe/TCP gets
// the limit within 5%, while the unlimited volume beside it is not held;
// the limit lowered online holds on the next window; the metrics show the
// throttled commands and time.
func TestQoSEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("a 15 s load")
	}
	cfg := oneNodeConfig(t, t.TempDir(), false)
	n, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	client := adminClient(t, cfg, n.APIAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const limit = 200
	create := func(name string, l qos.Limits) api.VolumeView {
		for {
			v, err := client.CreateVolume(ctx, api.CreateVolumeRequest{Name: name, Size: 16 << 20, QoS: l, Hosts: []string{testHostNQN}})
			if err == nil {
				return v
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // until the node registered itself
		}
	}
	// A burst of 100 ms: at most 1.7% above the limit over the 6 s window.
	limited := create("db1", qos.Limits{WriteIOPS: qos.Limit{Rate: limit, Burst: limit / 10}})
	free := create("db2", qos.Limits{})
	dial := func(v api.VolumeView) *host.Controller {
		for {
			if v, err = client.Volume(ctx, v.Name); err != nil || v.Health != "healthy" {
				if ctx.Err() != nil {
					t.Fatalf("volume %s not healthy: %v %+v", v.Name, err, v)
				}
				time.Sleep(50 * time.Millisecond) // until its group leads and its path is optimized
				continue
			}
			c, err := host.Dial(ctx, cfg.NVMe.Advertise, host.Options{SubNQN: v.NQN, HostNQN: testHostNQN, QueueDepth: 32})
			if err == nil {
				return c
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // until the volume is exported and leads
		}
	}
	lc, fc := dial(limited), dial(free)
	defer lc.Close()
	defer fc.Close()
	// measure asserts the limit within 5%: above is always a failure;
	// below, or an unlimited volume held near the limit, is one unless the
	// machine could not give the volumes that much meanwhile (a machine
	// shared with other work): the process stalled longer than 100 ms (the
	// limited volume's queue of 32 and its burst cover more than that), or
	// the unlimited volume beside it did not reach 1.5 times the limit.
	// Then the window is measured again, twice at most.
	measure := func(want float64) {
		t.Helper()
		for attempt := 1; ; attempt++ {
			stalls := watchStalls()
			var wg sync.WaitGroup
			var got [2]float64
			for i, c := range []*host.Controller{lc, fc} {
				wg.Go(func() { got[i] = hostWrites(t, ctx, c, 32, time.Second, 6*time.Second) })
			}
			wg.Wait()
			worst := stalls.stop()
			t.Logf("limited to %.0f: %.0f IOPS; unlimited beside it: %.0f IOPS; longest stall %v", want, got[0], got[1], worst)
			switch {
			case got[0] > 1.05*want:
				t.Fatalf("the limited volume did %.0f write IOPS over NVMe/TCP, above %.0f + 5%%", got[0], want)
			case got[0] >= 0.95*want && got[1] >= 1.5*want:
				return
			case (worst >= 100*time.Millisecond || got[1] < 1.5*want) && attempt < 3:
				t.Logf("the machine was short (longest stall %v, the unlimited volume %.0f IOPS): again", worst, got[1])
			default:
				t.Fatalf("the limited volume did %.0f write IOPS over NVMe/TCP (want %.0f ± 5%%), the unlimited one %.0f (want above %.0f); longest stall %v",
					got[0], want, got[1], 1.5*want, worst)
			}
		}
	}
	measure(limit)
	// Online: lower the limit; the next window holds the new one. (The
	// limits are low for a loaded machine under the race detector, where
	// the whole path does about a thousand writes per second.)
	if _, err := client.SetQoS(ctx, "db1", cluster.QoSChange{WriteIOPS: &qos.Limit{Rate: limit / 2, Burst: limit / 10}}); err != nil {
		t.Fatal(err)
	}
	measure(limit / 2)
	resp, err := adminGet(t, cfg, n.APIAddr().String(), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`basalt_volume_qos_throttled_commands_total{direction="write",volume="db1"}`,
		`basalt_volume_qos_throttled_seconds_total{direction="write",volume="db1"}`,
		`basalt_volume_qos_throttled_commands_total{direction="write",volume="db2"} 0`,
		`basalt_volume_qos_overrun_commands_total{direction="write",volume="db1"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(body), `basalt_volume_qos_throttled_commands_total{direction="write",volume="db1"} 0`) {
		t.Error("/metrics shows no throttled write on the limited volume")
	}
}

// hostWrites keeps depth 4 KiB random writes outstanding on c's namespace
// 1 for warm+window and returns the completions per second in the window.
func hostWrites(t *testing.T, ctx context.Context, c *host.Controller, depth int, warm, window time.Duration) float64 {
	t.Helper()
	from := time.Now().Add(warm)
	to := from.Add(window)
	var ops, errs atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for slot := range depth {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(slot), 1))
			buf := make([]byte, 4096)
			for time.Now().Before(to) {
				err := c.Write(ctx, 1, rng.Uint64N(16<<20/4096), buf, false)
				if now := time.Now(); err == nil && !now.Before(from) && now.Before(to) {
					ops.Add(1)
				} else if err != nil {
					errs.Add(1)
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if errs.Load() != 0 {
		t.Fatalf("%d writes failed (the first: %v): a throttled command waits, never fails", errs.Load(), *first.Load())
	}
	return float64(ops.Load()) / window.Seconds()
}

// stallWatch measures the longest time the process ran none of its
// goroutines (how late a 5 ms ticker's goroutine wakes).
type stallWatch struct {
	done  chan struct{}
	worst chan time.Duration
}

func watchStalls() *stallWatch {
	w := &stallWatch{done: make(chan struct{}), worst: make(chan time.Duration, 1)}
	go func() {
		const tick = 5 * time.Millisecond
		tk := time.NewTicker(tick)
		defer tk.Stop()
		last, worst := time.Now(), time.Duration(0)
		for {
			select {
			case <-w.done:
				w.worst <- worst
				return
			case <-tk.C:
				now := time.Now()
				worst, last = max(worst, now.Sub(last)-tick), now
			}
		}
	}()
	return w
}

func (w *stallWatch) stop() time.Duration {
	close(w.done)
	return <-w.worst
}
