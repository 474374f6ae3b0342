package bench_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"basalt/pkg/bench"
)

// startEcho runs ServeSocket on a free loopback port until the test ends;
// stop ends it early and returns what it returned.
func startEcho(t testing.TB, logger *slog.Logger) (addr string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bench.ServeSocket(ctx, ln, logger) }()
	var once sync.Once
	var serr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case serr = <-done:
			case <-time.After(5 * time.Second):
				serr = errors.New("ServeSocket did not return within 5 s of its context ending")
			}
		})
		return serr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String(), stop
}

func dialSocket(t testing.TB, addr string) *bench.SocketDevice {
	t.Helper()
	d, err := bench.DialSocket(context.Background(), addr, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func openQueue(t testing.TB, d bench.Device, depth int) (bench.Queue, *bench.Buffers) {
	t.Helper()
	q, err := d.OpenQueue(depth)
	if err != nil {
		t.Fatal(err)
	}
	bufs, err := bench.AllocBuffers(depth, bench.SocketMaxTransfer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(); bufs.Free() })
	return q, bufs
}

// waitAll waits for n completions and returns how often each slot came back.
func waitAll(t testing.TB, q bench.Queue, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		slot, err, ok := q.Wait(true)
		if !ok || err != nil {
			t.Fatalf("Wait = %d, %v, %v", slot, err, ok)
		}
		got[slot]++
	}
	return got
}

// TestSocketRoundTrips: pipelined reads and writes of every size the wire
// carries complete once each; a read returns the server's zeros.
func TestSocketRoundTrips(t *testing.T) {
	addr, _ := startEcho(t, nil)
	d := dialSocket(t, addr)
	if d.Describe() != "socket tcp "+addr || d.LBASize() != 4096 || d.Size() != 64<<20 || d.MaxTransfer() != 1<<20 {
		t.Fatalf("device %q %d %d %d", d.Describe(), d.LBASize(), d.Size(), d.MaxTransfer())
	}
	const depth = 8
	q, bufs := openQueue(t, d, depth)
	if _, _, ok := q.Wait(true); ok {
		t.Fatal("Wait with nothing in flight returned a slot")
	}
	sizes := []int{512, 4096, 8192, 64 << 10, 1 << 20}
	for round := range 3 {
		for slot := range depth {
			op, n := bench.OpWrite, sizes[(slot+round)%len(sizes)]
			if slot%2 == 1 {
				op = bench.OpRead
				copy(bufs.Each[slot][:n], bytes.Repeat([]byte{0xff}, n))
			}
			if err := q.Queue(slot, op, int64(slot)<<20, bufs.Each[slot][:n]); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, ok := q.Wait(false); ok {
			t.Fatal("Wait returned a slot before Flush")
		}
		if err := q.Flush(); err != nil {
			t.Fatal(err)
		}
		got := waitAll(t, q, depth)
		for slot := range depth {
			if got[slot] != 1 {
				t.Fatalf("round %d: slot %d completed %d times", round, slot, got[slot])
			}
			if n := sizes[(slot+round)%len(sizes)]; slot%2 == 1 && !bytes.Equal(bufs.Each[slot][:n], make([]byte, n)) {
				t.Fatalf("slot %d: a read did not return zeros", slot)
			}
		}
	}
}

func TestSocketQueueRejectsWhatTheWireCannotCarry(t *testing.T) {
	addr, _ := startEcho(t, nil)
	q, bufs := openQueue(t, dialSocket(t, addr), 2)
	big := make([]byte, bench.SocketMaxTransfer+512)
	for name, err := range map[string]error{
		"over 1 MiB":      q.Queue(0, bench.OpWrite, 0, big),
		"not 512-aligned": q.Queue(0, bench.OpWrite, 0, bufs.Each[0][:1000]),
		"empty":           q.Queue(0, bench.OpRead, 0, nil),
		"bad offset":      q.Queue(0, bench.OpRead, 100, bufs.Each[0][:4096]),
		"bad op":          q.Queue(0, bench.Op(9), 0, bufs.Each[0][:4096]),
		"slot range":      q.Queue(2, bench.OpRead, 0, bufs.Each[0][:4096]),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := q.Queue(0, bench.OpRead, 0, bufs.Each[0][:4096]); err != nil {
		t.Fatal(err)
	}
	if err := q.Queue(0, bench.OpRead, 0, bufs.Each[0][:4096]); err == nil {
		t.Fatal("a busy slot accepted")
	}
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	waitAll(t, q, 1)
}

// TestSocketRunsPresets: the runner drives the socket device like any other.
func TestSocketRunsPresets(t *testing.T) {
	addr, _ := startEcho(t, nil)
	d := dialSocket(t, addr)
	for _, name := range []string{"QD1-write", "W1", "W3"} {
		p, err := bench.LookupPreset(name)
		if err != nil {
			t.Fatal(err)
		}
		s := spec("", 0, 0, 0, 16, 2, 200*time.Millisecond)
		p.Apply(&s)
		res, err := bench.Run(context.Background(), d, s, bench.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.All.IOs == 0 || res.All.Latency.MeanUS <= 0 || res.Device != "socket tcp "+addr {
			t.Fatalf("%s: %+v", name, res)
		}
	}
}

// TestSocketSteadyStateDoesNotAllocate counts both sides: the server runs
// in this process.
func TestSocketSteadyStateDoesNotAllocate(t *testing.T) {
	addr, _ := startEcho(t, nil)
	const depth = 16
	q, bufs := openQueue(t, dialSocket(t, addr), depth)
	batch := func() {
		for slot := range depth {
			op := bench.OpWrite
			if slot%2 == 1 {
				op = bench.OpRead
			}
			if err := q.Queue(slot, op, int64(slot)*4096, bufs.Each[slot][:4096]); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Flush(); err != nil {
			t.Fatal(err)
		}
		for range depth {
			if _, err, ok := q.Wait(true); !ok || err != nil {
				t.Fatal(err)
			}
		}
	}
	batch() // warm up: the server's write buffer, the poller's iovecs
	if a := testing.AllocsPerRun(200, batch); a != 0 {
		t.Fatalf("%.1f allocations per batch of %d I/Os", a, depth)
	}
}

// fakeServer accepts one connection and hands it to serve.
func fakeServer(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// TestSocketResponseErrors: a bad response, a lost connection or a server
// that never answers fails every I/O in flight through Wait, and Close
// returns promptly.
func TestSocketResponseErrors(t *testing.T) {
	answer := func(mangle func(h []byte)) func(net.Conn) {
		return func(c net.Conn) {
			h := make([]byte, 16)
			for {
				if _, err := io.ReadFull(c, h); err != nil {
					return
				}
				if h[0] == byte(bench.OpWrite) {
					io.CopyN(io.Discard, c, int64(binary.LittleEndian.Uint32(h[4:])))
				}
				mangle(h)
				if _, err := c.Write(h); err != nil {
					return
				}
			}
		}
	}
	cases := map[string]struct {
		serve   func(net.Conn)
		isProto bool
	}{
		"slot not in flight": {answer(func(h []byte) { binary.LittleEndian.PutUint16(h[2:], 3) }), true},
		"wrong length":       {answer(func(h []byte) { binary.LittleEndian.PutUint32(h[4:], 512) }), true},
		"wrong op":           {answer(func(h []byte) { h[0] = byte(bench.OpRead) }), true},
		"reserved byte":      {answer(func(h []byte) { h[1] = 1 }), true},
		"connection lost":    {func(c net.Conn) { io.ReadFull(c, make([]byte, 16)) }, false},
		"truncated":          {func(c net.Conn) { io.ReadFull(c, make([]byte, 16)); c.Write([]byte{2, 0, 0}) }, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := dialSocket(t, fakeServer(t, tc.serve))
			q, bufs := openQueue(t, d, 4)
			for slot := range 2 {
				if err := q.Queue(slot, bench.OpWrite, 0, bufs.Each[slot][:4096]); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Flush(); err != nil {
				t.Fatal(err)
			}
			seen := map[int]bool{}
			for range 2 {
				slot, err, ok := q.Wait(true)
				if !ok || err == nil || seen[slot] {
					t.Fatalf("Wait = %d, %v, %v (seen %v)", slot, err, ok, seen)
				}
				seen[slot] = true
				if errors.Is(err, bench.ErrSocketProtocol) != tc.isProto {
					t.Fatalf("error %v: ErrSocketProtocol %v, want %v", err, !tc.isProto, tc.isProto)
				}
			}
			if _, _, ok := q.Wait(true); ok {
				t.Fatal("a third completion")
			}
			if err := q.Queue(0, bench.OpRead, 0, bufs.Each[0][:4096]); err != nil {
				t.Fatal(err)
			}
			if err := q.Flush(); err == nil {
				t.Fatal("Flush on a failed connection succeeded")
			}
			if _, err, ok := q.Wait(false); !ok || err == nil {
				t.Fatalf("the slot of a failed Flush: %v %v", err, ok)
			}
		})
	}
	t.Run("no answer, then Close", func(t *testing.T) {
		d := dialSocket(t, fakeServer(t, func(c net.Conn) { io.Copy(io.Discard, c) }))
		q, bufs := openQueue(t, d, 1)
		if err := q.Queue(0, bench.OpRead, 0, bufs.Each[0][:4096]); err != nil {
			t.Fatal(err)
		}
		if err := q.Flush(); err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- q.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close hung")
		}
	})
}

// TestSocketServerStops: ending ServeSocket's context closes its
// connections, so the host's I/Os fail rather than hang.
func TestSocketServerStops(t *testing.T) {
	addr, stop := startEcho(t, nil)
	q, bufs := openQueue(t, dialSocket(t, addr), 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := q.Queue(0, bench.OpWrite, 0, bufs.Each[0][:4096]); err != nil {
		t.Fatal(err)
	}
	q.Flush() //nolint:errcheck // it may or may not see the closed connection yet
	if _, err, ok := q.Wait(true); !ok || err == nil {
		t.Fatalf("Wait after the server stopped: %v %v", err, ok)
	}
	if _, err := bench.DialSocket(context.Background(), addr, 64<<20); err == nil {
		t.Fatal("DialSocket to a stopped server succeeded")
	}
}

// TestSocketServerRejectsMalformedRequests: each closes its connection with
// a logged error; the server keeps serving others.
func TestSocketServerRejectsMalformedRequests(t *testing.T) {
	var logs syncBuffer
	addr, _ := startEcho(t, slog.New(slog.NewTextHandler(&logs, nil)))
	header := func(op byte, reserved byte, length uint32, off uint64) []byte {
		h := make([]byte, 16)
		h[0], h[1] = op, reserved
		binary.LittleEndian.PutUint32(h[4:], length)
		binary.LittleEndian.PutUint64(h[8:], off)
		return h
	}
	bad := map[string][]byte{
		"op":       header(7, 0, 4096, 0),
		"reserved": header(1, 1, 4096, 0),
		"empty":    header(1, 0, 0, 0),
		"over max": header(2, 0, 2<<20, 0),
		"unalign":  header(1, 0, 4097, 0),
		"offset":   header(1, 0, 4096, 77),
	}
	for name, h := range bad {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(h)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 16)); err != io.EOF {
			t.Errorf("%s: the server answered (%d bytes, %v) instead of closing", name, n, err)
		}
		c.Close()
	}
	waitFor(t, func() bool { return strings.Count(logs.String(), "malformed socket message") == len(bad) })
	q, bufs := openQueue(t, dialSocket(t, addr), 1)
	if err := q.Queue(0, bench.OpRead, 0, bufs.Each[0][:4096]); err != nil {
		t.Fatal(err)
	}
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	waitAll(t, q, 1)
}

func TestDialSocketChecksItsArguments(t *testing.T) {
	if _, err := bench.DialSocket(context.Background(), "127.0.0.1:1", 4095); !errors.Is(err, bench.ErrInvalidSpec) {
		t.Fatalf("size 4095: %v", err)
	}
	if _, err := bench.DialSocket(context.Background(), "127.0.0.1:1", 1<<30); err == nil {
		t.Fatal("nothing listens on port 1, yet DialSocket succeeded")
	}
}

// BenchmarkSocketRoundTrip: 4 KiB writes through the socket engine and the
// in-process echo server (both sides' allocations count).
func BenchmarkSocketRoundTrip(b *testing.B) {
	addr, _ := startEcho(b, nil)
	for _, depth := range []int{1, 32} {
		b.Run("qd="+itoa(depth), func(b *testing.B) {
			q, bufs := openQueue(b, dialSocket(b, addr), depth)
			b.ReportAllocs()
			b.SetBytes(4096)
			b.ResetTimer()
			for done := 0; done < b.N; done += depth {
				for slot := range depth {
					if err := q.Queue(slot, bench.OpWrite, 0, bufs.Each[slot][:4096]); err != nil {
						b.Fatal(err)
					}
				}
				if err := q.Flush(); err != nil {
					b.Fatal(err)
				}
				for range depth {
					if _, err, _ := q.Wait(true); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// syncBuffer is a bytes.Buffer for a logger on other goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met within 5 s")
}
