package loopback

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/disk"
	"basalt/pkg/meta"
	"basalt/pkg/nvme/host"
	"basalt/pkg/pmem"
	"basalt/pkg/store"
	"basalt/pkg/volume"
	"basalt/replication"
)

// replicatedTarget is the real target whose namespace is a pkg/volume
// Volume: a one-voter Raft group (its log in a 256 MiB memory region) over
// a real pkg/store on four 256 MiB drive files in the test's temporary
// directory (O_DIRECT where the file system allows; 3+1 parity), staging by
// reference to the Raft log as a cluster node does, or copying into a
// 256 MiB write buffer in memory as it did before. A write goes the whole
// way a cluster node's does except the network hop to the followers:
// NVMe/TCP receive, the core, the operation encoding, the Raft proposal,
// the log append, the apply, the store's staging, and, in the background,
// the destage into stripes, parity and the drive writes.
type replicatedTarget struct {
	*basaltTarget
	host  *replication.Host
	store *store.Store
	db    *meta.DB
}

func startReplicatedTarget(tb testing.TB, staged bool) *replicatedTarget {
	quiet := slog.New(slog.DiscardHandler)
	region, err := pmem.NewMemory(256 << 20)
	if err != nil {
		tb.Fatal(err)
	}
	h, err := replication.NewHost(replication.Config{NodeID: 1, Listen: "127.0.0.1:0", LogRegion: region,
		Logger: quiet, TickInterval: 10 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	if err := h.Start(); err != nil {
		tb.Fatal(err)
	}
	db, err := meta.Open(meta.Options{InMemory: true})
	if err != nil {
		tb.Fatal(err)
	}
	opts := store.Options{Meta: db, Logger: quiet, Clock: clock.Real(), StageByReference: staged}
	for i := range 4 {
		d, err := disk.OpenFile(filepath.Join(tb.TempDir(), fmt.Sprintf("drive%d", i)), 256<<20)
		if err != nil {
			tb.Fatal(err)
		}
		opts.Drives = append(opts.Drives, d)
	}
	if !staged {
		if opts.Buffer, err = pmem.NewMemory(256 << 20); err != nil {
			tb.Fatal(err)
		}
	}
	st, err := store.Open(opts)
	if err != nil {
		tb.Fatal(err)
	}
	local, err := st.CreateVolume("bench", volumeSize)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := volume.Add(h, 1, []replication.NodeID{1}, local)
	if err != nil {
		tb.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !v.Group().IsLeader(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatal("the one-voter group elected no leader")
		}
	}
	rt := &replicatedTarget{host: h, store: st, db: db}
	rt.basaltTarget = startTargetOn(tb, v)
	return rt
}

func (rt *replicatedTarget) close() {
	rt.basaltTarget.close()
	_ = rt.host.Close()
	_ = rt.store.Close()
	_ = rt.db.Close()
}

// BenchmarkReplicatedWrite: 4 KiB random writes from the host library, over
// loopback NVMe/TCP, into the real target on a replicated volume over the
// real store, the whole way to the stripes; allocs/op and cpu-ns/op count
// the whole process (host library, target, Raft, store). Side by side: the
// store staging by reference to the Raft log (a cluster node now) and
// copying into its own write buffer (before), and BenchmarkBasalt's memory
// backend for what the host library and the target cost alone.
//
//	go test -run '^$' -bench 'ReplicatedWrite|Basalt/qd=./queues=1/rw=randwrite' -benchtime 20000x ./tests/loopback/
func BenchmarkReplicatedWrite(b *testing.B) {
	for _, mode := range []struct {
		name   string
		staged bool
	}{{"replica=store-staged", true}, {"replica=store-copy", false}} {
		b.Run(mode.name, func(b *testing.B) {
			rt := startReplicatedTarget(b, mode.staged)
			defer rt.close()
			for _, qd := range []int{1, 32} {
				w := workload{qd: qd, queues: 1, write: true}
				b.Run(w.name(), func(b *testing.B) {
					c := dialBasalt(b, rt.addr, 1)
					defer c.Close()
					// The fill's destage is not the benchmark's: done first.
					if err := rt.store.Flush(b.Context()); err != nil {
						b.Fatal(err)
					}
					drive(b, newBasaltEngine(c, w), w.qd)
					st := rt.store.Stats()
					b.ReportMetric(float64(st.Stripes), "stripes")
				})
			}
		})
	}
}

// TestReplicatedEngine runs a short write load through
// BenchmarkReplicatedWrite's stack in both staging modes, so that `go test
// ./tests/loopback` exercises it, and checks the writes reached stripes.
func TestReplicatedEngine(t *testing.T) {
	for _, staged := range []bool{true, false} {
		start := time.Now()
		rt := startReplicatedTarget(t, staged)
		t.Logf("staged %v: started in %v", staged, time.Since(start))
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		c, err := host.Dial(ctx, rt.addr, host.Options{SubNQN: benchNQN, IOQueues: 1})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		w := workload{qd: 8, queues: 1, write: true}
		e := newBasaltEngine(c, w)
		for slot := range w.qd {
			if err := e.submit(slot, uint64(slot*97)); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.flush(); err != nil {
			t.Fatal(err)
		}
		for range w.qd {
			if _, _, err := e.wait(true); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		if err := rt.store.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if st := rt.store.Stats(); st.Stripes == 0 || st.DestagedBlocks == 0 {
			t.Errorf("staged %v: %d stripes, %d blocks destaged after a flush", staged, st.Stripes, st.DestagedBlocks)
		}
		t.Logf("staged %v: written and flushed at %v", staged, time.Since(start))
		rt.close()
		t.Logf("staged %v: closed at %v", staged, time.Since(start))
	}
}
