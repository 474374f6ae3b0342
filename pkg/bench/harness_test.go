package bench_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/bench"
	"basalt/target"
	"basalt/target/tcp"
)

const testNQN = "nqn.2026-11.io.basalt:bench-test"

// testTarget is the real target over loopback TCP, one subsystem with one
// namespace on a memory backend, reachable through one port per listener.
type testTarget struct {
	tgt   *target.Target
	be    *backend.Memory
	addrs []string
	ports []*target.Port
	lns   []*tcp.Listener
	done  []chan struct{}
}

// startTarget serves be (a new memory backend of size bytes if nil)
// through nports ports.
func startTarget(t testing.TB, be *backend.Memory, size int64, nports int) *testTarget {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	tgt, err := target.New(target.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if be == nil {
		if be, err = backend.NewMemory(size, 4096); err != nil {
			t.Fatal(err)
		}
	}
	nguid := [16]byte{'b', 'e', 'n', 'c', 'h'}
	if _, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: testNQN, AllowAnyHost: true,
		Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: be, NGUID: nguid}}}); err != nil {
		t.Fatal(err)
	}
	tt := &testTarget{tgt: tgt, be: be}
	for i := range nports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, portNum, _ := net.SplitHostPort(addr)
		port, err := tgt.AddPort(target.PortConfig{ID: uint16(i + 1), TRADDR: "127.0.0.1", TRSVCID: portNum})
		if err != nil {
			t.Fatal(err)
		}
		l, err := tcp.Listen(tgt, port, addr, tcp.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); l.Serve() }() //nolint:errcheck // ends with Close
		tt.addrs, tt.ports, tt.lns, tt.done = append(tt.addrs, addr), append(tt.ports, port), append(tt.lns, l), append(tt.done, done)
	}
	t.Cleanup(tt.stop)
	return tt
}

// stop closes every connection at once, like a killed process; the backend
// keeps what was written.
func (tt *testTarget) stop() {
	for i, l := range tt.lns {
		l.Close()
		<-tt.done[i]
	}
	tt.lns = nil
	tt.tgt.Close()
}

func dial(t testing.TB, addrs []string, jobs, qd int, pathTimeout time.Duration) *bench.NVMeDevice {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := bench.DialNVMe(ctx, bench.NVMeConfig{Addrs: addrs, NQN: testNQN, Queues: jobs, QueueDepth: qd,
		PathTimeout: pathTimeout, ReconnectDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestNVMeFlushFailureCompletesUnsentIOs: when a batch fails part way with
// an error that is not a path's (here: an I/O the host library refuses),
// Flush reports it and every queued I/O still completes through Wait, the
// sent one as usual and the unsent one with the error; a Wait(true) with
// nothing on the wire used to spin for ever.
func TestNVMeFlushFailureCompletesUnsentIOs(t *testing.T) {
	tt := startTarget(t, nil, 16<<20, 1)
	d := dial(t, tt.addrs, 1, 2, time.Second)
	q, err := d.OpenQueue(2)
	if err != nil {
		t.Fatal(err)
	}
	bufs, err := bench.AllocBuffers(2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Queue(0, bench.OpWrite, 0, bufs.Each[0]); err != nil {
		t.Fatal(err)
	}
	if err := q.Queue(1, bench.OpWrite, 4096, bufs.Each[1][:100]); err != nil { // not whole blocks
		t.Fatal(err)
	}
	if err := q.Flush(); err == nil {
		t.Fatal("Flush of a batch holding an invalid I/O returned nil")
	}
	got := make(chan [2]error, 1)
	go func() {
		var errs [2]error
		for range 2 {
			slot, err, ok := q.Wait(true)
			if !ok {
				t.Error("Wait(true) returned ok false")
				return
			}
			errs[slot] = err
		}
		got <- errs
	}()
	select {
	case errs := <-got:
		if errs[0] != nil || errs[1] == nil {
			t.Errorf("completions: slot 0 %v, slot 1 %v; want nil and an error", errs[0], errs[1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return the I/O the failed batch left unsent")
	}
}
