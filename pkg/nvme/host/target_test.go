package host_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/nvme"
	"basalt/pkg/nvme/host"
	"basalt/target"
	"basalt/target/tcp"
)

// These tests run the host against the real target (target/ and
// target/tcp) on a memory backend over loopback TCP.

const testNQN = "nqn.2026-01.io.basalt:host-test"

type realTarget struct {
	tgt  *target.Target
	addr string
	port *target.Port
}

func startRealTarget(t testing.TB, cfg target.Config, opts tcp.Options, blockSize int) *realTarget {
	t.Helper()
	tgt, err := target.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	be, err := backend.NewMemory(64<<20, blockSize)
	if err != nil {
		t.Fatal(err)
	}
	nguid := [16]byte{'b', 'a', 's', 'a', 'l', 't'}
	if _, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: testNQN, AllowAnyHost: true,
		Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: be, NGUID: nguid}}}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, portNum, _ := net.SplitHostPort(addr)
	port, err := tgt.AddPort(target.PortConfig{ID: 1, TRADDR: "127.0.0.1", TRSVCID: portNum})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tcp.Listen(tgt, port, addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		l.Serve() //nolint:errcheck // ends with Close
	}()
	t.Cleanup(func() {
		l.Close()
		<-served
		tgt.Close()
	})
	return &realTarget{tgt: tgt, addr: addr, port: port}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dialReal(t *testing.T, rt *realTarget, opts host.Options) *host.Controller {
	t.Helper()
	opts.SubNQN = testNQN
	c, err := host.Dial(ctxFor(t), rt.addr, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// The whole connect sequence, Identify checks, and I/O across the
// in-capsule/R2T boundary, with and without digests, on both block sizes.
func TestRealTargetReadWrite(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		for _, digests := range []bool{false, true} {
			t.Run(map[bool]string{false: "plain", true: "digests"}[digests]+"/bs="+strconv.Itoa(bs), func(t *testing.T) {
				rt := startRealTarget(t, target.Config{}, tcp.Options{}, bs)
				c := dialReal(t, rt, host.Options{IOQueues: 2, HeaderDigest: digests, DataDigest: digests})
				ns, ok := c.Namespace(1)
				if !ok || ns.BlockSize != bs || ns.Size() != 64<<20 {
					t.Fatalf("namespace 1: %+v %v", ns, ok)
				}
				ctx := ctxFor(t)
				icd := c.InlineDataSize()
				sizes := []int{bs, icd, icd + bs, 128 << 10, c.MaxTransferSize()}
				for i, size := range sizes {
					if size <= 0 || size%bs != 0 {
						continue
					}
					data := randomBytes(size, uint64(i))
					slba := uint64(i) * 1024
					if err := c.Write(ctx, 1, slba, data, i%2 == 0); err != nil {
						t.Fatalf("Write %d bytes: %v", size, err)
					}
					got := make([]byte, size)
					if err := c.Read(ctx, 1, slba, got); err != nil {
						t.Fatalf("Read %d bytes: %v", size, err)
					}
					if !bytes.Equal(got, data) {
						t.Fatalf("%d bytes read back differ", size)
					}
				}
				if err := c.Flush(ctx, 1); err != nil {
					t.Fatalf("Flush: %v", err)
				}
				if err := c.Shutdown(ctx); err != nil {
					t.Fatalf("Shutdown: %v", err)
				}
			})
		}
	}
}

func TestRealTargetZeroesAndDeallocate(t *testing.T) {
	rt := startRealTarget(t, target.Config{}, tcp.Options{}, 4096)
	c := dialReal(t, rt, host.Options{})
	ctx := ctxFor(t)
	data := randomBytes(16*4096, 5)
	if err := c.Write(ctx, 1, 0, data, false); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteZeroes(ctx, 1, 0, 4); err != nil {
		t.Fatalf("WriteZeroes: %v", err)
	}
	if err := c.Deallocate(ctx, 1, []host.Range{{SLBA: 8, Blocks: 4}}); err != nil {
		t.Fatalf("Deallocate: %v", err)
	}
	got := make([]byte, len(data))
	if err := c.Read(ctx, 1, 0, got); err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, 4*4096)
	if !bytes.Equal(got[:4*4096], zero) || !bytes.Equal(got[8*4096:12*4096], zero) || !bytes.Equal(got[4*4096:8*4096], data[4*4096:8*4096]) {
		t.Error("Write Zeroes / Deallocate did not zero exactly their ranges")
	}
}

// Out-of-range I/O gets LBA Out of Range with DNR, not a path error.
func TestRealTargetStatusErrors(t *testing.T) {
	rt := startRealTarget(t, target.Config{}, tcp.Options{}, 4096)
	c := dialReal(t, rt, host.Options{})
	ns, _ := c.Namespace(1)
	err := c.Read(ctxFor(t), 1, ns.Blocks, make([]byte, 4096))
	var s nvme.Status
	if !errors.As(err, &s) || s.Code() != nvme.StatusLBAOutOfRange.Code() || !s.DNR() || host.IsPathError(err) {
		t.Fatalf("read past the end = %v, want LBA Out of Range with DNR", err)
	}
	if c.Err() != nil {
		t.Fatalf("association ended: %v", c.Err())
	}
}

// Many goroutines and async IOs at full queue depth over several queues.
func TestRealTargetPipelined(t *testing.T) {
	rt := startRealTarget(t, target.Config{}, tcp.Options{}, 4096)
	c := dialReal(t, rt, host.Options{IOQueues: 4, QueueDepth: 32})
	ctx := ctxFor(t)
	const n = 256
	done := make(chan *host.IO, n)
	ios := make([]host.IO, n)
	for i := range ios {
		ios[i] = host.IO{Op: host.OpWrite, NSID: 1, SLBA: uint64(i), Data: bytes.Repeat([]byte{byte(i)}, 4096),
			Done: func(io *host.IO) { done <- io }, Tag: i}
		if err := c.Submit(ctx, &ios[i]); err != nil {
			t.Fatal(err)
		}
	}
	for range ios {
		if io := <-done; io.Err != nil {
			t.Fatalf("write %d: %v", io.Tag, io.Err)
		}
	}
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := g; i < n; i += 64 {
				if err := c.Read(ctx, 1, uint64(i), buf); err != nil || buf[0] != byte(i) || buf[4095] != byte(i) {
					t.Errorf("read %d: %v, got %d", i, err, buf[0])
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestRealTargetDiscovery(t *testing.T) {
	rt := startRealTarget(t, target.Config{}, tcp.Options{}, 4096)
	c, err := host.DialDiscovery(ctxFor(t), rt.addr, "nqn.2026-01.io.basalt:a-host")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	entries, err := c.DiscoveryLog(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	_, portNum, _ := net.SplitHostPort(rt.addr)
	found := false
	for _, e := range entries {
		if e.SUBNQN == testNQN && e.TRADDR == "127.0.0.1" && e.TRSVCID == portNum && e.TRTYPE == nvme.TransportTypeTCP && e.SUBTYPE == nvme.SubtypeNVM {
			found = true
		}
	}
	if !found {
		t.Fatalf("no entry for %s at %s in %+v", testNQN, rt.addr, entries)
	}
}

// ANA: the host reads the state at connect and follows an ANA change event.
func TestRealTargetANAChange(t *testing.T) {
	rt := startRealTarget(t, target.Config{}, tcp.Options{}, 4096)
	c := dialReal(t, rt, host.Options{})
	if c.Identify().CMIC&(1<<3) == 0 {
		t.Skip("target does not report ANA")
	}
	if st, ok := c.ANAState(1); !ok || (st != nvme.ANAOptimized && st != nvme.ANANonOptimized) {
		t.Fatalf("ANAState(1) = %v %v", st, ok)
	}
	ns, _ := c.Namespace(1)
	grp := ns.Identify.ANAGRPID
	rt.tgt.SetANAState(grp, rt.port.ID(), nvme.ANAInaccessible)
	ev, err := c.WaitAsyncEvent(ctxFor(t))
	if err != nil || ev.DW0 != nvme.AENANAChange {
		t.Fatalf("WaitAsyncEvent = %+v, %v", ev, err)
	}
	if st, _ := c.ANAState(1); st != nvme.ANAInaccessible {
		t.Errorf("ANAState(1) after the event = %v", st)
	}
	err = c.Read(ctxFor(t), 1, 0, make([]byte, 4096))
	if !host.IsPathError(err) || !host.IsANAError(err) {
		t.Errorf("read on an inaccessible path = %v, want an ANA path error", err)
	}
}
