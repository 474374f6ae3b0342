package loopback

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/nvme/host"
	"basalt/target"
	"basalt/target/tcp"
)

const benchNQN = "nqn.2026-01.io.basalt:loopback"

// basaltTarget is the real target with one 64 MiB memory namespace,
// listening on loopback.
type basaltTarget struct {
	tgt  *target.Target
	l    *tcp.Listener
	addr string
	done chan struct{}
}

func startBasaltTarget(tb testing.TB) *basaltTarget {
	be, err := backend.NewMemory(volumeSize, blockSize)
	if err != nil {
		tb.Fatal(err)
	}
	return startTargetOn(tb, be)
}

// startTargetOn starts the real target with be as its one namespace,
// listening on loopback.
func startTargetOn(tb testing.TB, be backend.Backend) *basaltTarget {
	quiet := slog.New(slog.DiscardHandler)
	tgt, err := target.New(target.Config{Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: benchNQN, AllowAnyHost: true,
		Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: be}}}); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, portNum, _ := net.SplitHostPort(addr)
	port, err := tgt.AddPort(target.PortConfig{ID: 1, TRADDR: "127.0.0.1", TRSVCID: portNum})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := tcp.Listen(tgt, port, addr, tcp.Options{Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	bt := &basaltTarget{tgt: tgt, l: l, addr: addr, done: make(chan struct{})}
	go func() {
		defer close(bt.done)
		l.Serve() //nolint:errcheck // returns when closed
	}()
	return bt
}

func (bt *basaltTarget) close() {
	bt.l.Close()
	<-bt.done
	bt.tgt.Close()
}

// basaltEngine drives the host library's asynchronous API: one reused IO
// per slot, submitted in batches (SubmitBatch, one writev per queue like the
// ceiling's client), completions through a channel.
type basaltEngine struct {
	c     *host.Controller
	ctx   context.Context
	ios   []host.IO
	batch []*host.IO
	done  chan *host.IO
}

func newBasaltEngine(c *host.Controller, w workload) *basaltEngine {
	e := &basaltEngine{c: c, ctx: context.Background(), ios: make([]host.IO, w.qd),
		batch: make([]*host.IO, 0, w.qd), done: make(chan *host.IO, w.qd)}
	op := host.OpRead
	if w.write {
		op = host.OpWrite
	}
	for i := range e.ios {
		e.ios[i] = host.IO{Op: op, NSID: 1, Data: make([]byte, blockSize), Tag: i,
			Done: func(io *host.IO) { e.done <- io }}
	}
	return e
}

func (e *basaltEngine) submit(slot int, lba uint64) error {
	e.ios[slot].SLBA = lba
	e.batch = append(e.batch, &e.ios[slot])
	return nil
}

func (e *basaltEngine) flush() error {
	_, err := e.c.SubmitBatch(e.ctx, e.batch)
	clear(e.batch)
	e.batch = e.batch[:0]
	return err
}

func (e *basaltEngine) wait(block bool) (int, bool, error) {
	var io *host.IO
	if block {
		io = <-e.done
	} else {
		select {
		case io = <-e.done:
		default:
			return 0, false, nil
		}
	}
	return io.Tag, true, io.Err
}

// dialBasalt connects with the given number of I/O queues and fills the
// volume so that reads return data and writes overwrite allocated memory.
func dialBasalt(tb testing.TB, addr string, queues int) *host.Controller {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := host.Dial(ctx, addr, host.Options{SubNQN: benchNQN, IOQueues: queues})
	if err != nil {
		tb.Fatal(err)
	}
	if c.IOQueueCount() != queues {
		tb.Fatalf("got %d I/O queues, asked %d", c.IOQueueCount(), queues)
	}
	chunk := make([]byte, 128<<10)
	for off := 0; off < volumeSize; off += len(chunk) {
		chunk[0] = byte(off >> 17)
		if err := c.Write(ctx, 1, uint64(off/blockSize), chunk, false); err != nil {
			tb.Fatal(err)
		}
	}
	return c
}

// BenchmarkBasalt: the host library against the real target on a memory
// backend over loopback TCP. Compare with BenchmarkCeiling (README.md).
func BenchmarkBasalt(b *testing.B) {
	bt := startBasaltTarget(b)
	defer bt.close()
	ctrls := map[int]*host.Controller{}
	defer func() {
		for _, c := range ctrls {
			c.Close()
		}
	}()
	for _, w := range matrix() {
		b.Run(w.name(), func(b *testing.B) {
			c := ctrls[w.queues]
			if c == nil {
				c = dialBasalt(b, bt.addr, w.queues)
				ctrls[w.queues] = c
			}
			drive(b, newBasaltEngine(c, w), w.qd)
		})
	}
}

// TestBasaltEngine runs a short mixed load through the benchmark's engine,
// so that `go test ./tests/loopback` exercises the code path the benchmark
// measures.
func TestBasaltEngine(t *testing.T) {
	bt := startBasaltTarget(t)
	defer bt.close()
	c := dialBasalt(t, bt.addr, 2)
	defer c.Close()
	for _, w := range []workload{{qd: 8, queues: 2, write: true}, {qd: 8, queues: 2}} {
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
	}
}
