package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"basalt/pkg/nvme"
)

// fastLoop takes over a fake connection from its first I/O command on and
// answers reads (zeroes) and in-capsule writes without allocating, so that
// allocation counts measure the host alone.
func (fc *fakeConn) fastLoop(first *nvme.Command) {
	var hdr [nvme.CapsuleCmdHLEN]byte
	data := make([]byte, 1<<20)
	var c2h, resp [24]byte
	w := bufio.NewWriterSize(fc.c, 256<<10)
	answer := func(cmd *nvme.Command) {
		if cmd.Opcode() == nvme.IORead {
			n := cmd.SGLLength()
			nvme.CommonHeader{Type: nvme.PDUC2HData, Flags: nvme.FlagLastPDU, HLEN: 24, PDO: 24, PLEN: 24 + n}.Encode(c2h[:])
			nvme.DataHeader{CCCID: cmd.CID(), DATAL: n}.Encode(c2h[:])
			w.Write(c2h[:])
			w.Write(data[:n])
		}
		nvme.CommonHeader{Type: nvme.PDUCapsuleResp, HLEN: 24, PLEN: 24}.Encode(resp[:])
		(&nvme.Completion{SQID: fc.qid, CID: cmd.CID()}).Encode(resp[8:])
		w.Write(resp[:])
	}
	answer(first)
	for {
		if fc.r.Buffered() == 0 && w.Flush() != nil {
			return
		}
		if _, err := io.ReadFull(fc.r, hdr[:8]); err != nil {
			return
		}
		ch := nvme.DecodeCommonHeader(hdr[:])
		if _, err := io.ReadFull(fc.r, hdr[8:]); err != nil {
			return
		}
		if n := int(ch.PLEN) - nvme.CapsuleCmdHLEN; n > 0 {
			if _, err := io.ReadFull(fc.r, data[:n]); err != nil {
				return
			}
		}
		answer((*nvme.Command)(hdr[8:]))
	}
}

func fastTarget(t testing.TB) *fakeTarget {
	f := newFakeTarget(t, fakeConfig{})
	f.cfg.OnIO = func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		fc.fastLoop(cmd)
		return true
	}
	return f
}

// Submit with reused IOs and a completion channel: the load-generator
// pattern, which must not allocate in steady state.
func TestSubmitDoesNotAllocate(t *testing.T) {
	f := fastTarget(t)
	c := dialFake(t, f, Options{IOQueues: 2, QueueDepth: 32})
	ctx := testContext(t)
	const qd = 32
	done := make(chan *IO, qd)
	ios := make([]IO, qd)
	buf := make([]byte, qd*4096)
	for i := range ios {
		op := OpRead
		if i%2 == 1 {
			op = OpWrite
		}
		ios[i] = IO{Op: op, NSID: 1, SLBA: uint64(i), Data: buf[i*4096 : (i+1)*4096], Done: func(io *IO) { done <- io }, Tag: i}
	}
	round := func() {
		for i := range ios {
			if err := c.Submit(ctx, &ios[i]); err != nil {
				t.Fatal(err)
			}
		}
		for range ios {
			if io := <-done; io.Err != nil {
				t.Fatalf("IO %d: %v", io.Tag, io.Err)
			}
		}
	}
	round()
	if n := testing.AllocsPerRun(50, round); n != 0 {
		t.Errorf("%.1f allocations per round of %d IOs, want 0", n, qd)
	}
	batch := make([]*IO, qd)
	for i := range ios {
		batch[i] = &ios[i]
	}
	batchRound := func() {
		if n, err := c.SubmitBatch(ctx, batch); n != qd || err != nil {
			t.Fatalf("SubmitBatch = %d, %v", n, err)
		}
		for range ios {
			if io := <-done; io.Err != nil {
				t.Fatalf("IO %d: %v", io.Tag, io.Err)
			}
		}
	}
	if n := testing.AllocsPerRun(50, batchRound); n != 0 {
		t.Errorf("%.1f allocations per SubmitBatch of %d IOs, want 0", n, qd)
	}
	syncRead := func() {
		if err := c.Read(ctx, 1, 0, buf[:4096]); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(50, syncRead); n != 0 {
		t.Errorf("%.1f allocations per synchronous Read, want 0", n)
	}
}

// Done may resubmit the same IO; every IO gets exactly one Done, also when
// the connection dies with IOs in flight.
func TestSubmitDoneOncePerIO(t *testing.T) {
	var answered atomic.Int32
	f := newFakeTarget(t, fakeConfig{OnIO: func(fc *fakeConn, cmd *nvme.Command, _ []byte) bool {
		if answered.Add(1) > 100 {
			fc.c.Close() // the rest stay in flight until the connection dies
			return true
		}
		return false
	}})
	c := dialFake(t, f, Options{})
	ctx := testContext(t)
	var dones, failures atomic.Int32
	finished := make(chan struct{}, 8)
	var resubmit func(*IO)
	resubmit = func(io *IO) {
		dones.Add(1)
		if io.Err != nil {
			if !errors.Is(io.Err, ErrConnectionLost) {
				t.Errorf("IO error %v", io.Err)
			}
			failures.Add(1)
			finished <- struct{}{}
			return
		}
		if err := c.Submit(ctx, io); err != nil {
			failures.Add(1)
			finished <- struct{}{}
		}
	}
	ios := make([]IO, 8)
	for i := range ios {
		ios[i] = IO{Op: OpWrite, NSID: 1, SLBA: uint64(i), Data: bytes.Repeat([]byte{byte(i)}, 4096), Done: resubmit}
		if err := c.Submit(ctx, &ios[i]); err != nil {
			t.Fatal(err)
		}
	}
	for range ios {
		<-finished
	}
	if failures.Load() != 8 || dones.Load() < 100 {
		t.Errorf("%d IOs ended, %d Done calls", failures.Load(), dones.Load())
	}
}

// A batch larger than the queue depth must not deadlock: commands queued by
// the batch are sent before it waits for slots they hold.
func TestSubmitBatchLargerThanQueueDepth(t *testing.T) {
	f := newFakeTarget(t, fakeConfig{})
	c := dialFake(t, f, Options{QueueDepth: 4, DataDigest: true, HeaderDigest: true})
	ctx := testContext(t)
	const n = 50
	done := make(chan *IO, n)
	ios := make([]*IO, n)
	for i := range ios {
		ios[i] = &IO{Op: OpWrite, NSID: 1, SLBA: uint64(i), Data: bytes.Repeat([]byte{byte(i)}, 4096), Done: func(io *IO) { done <- io }, Tag: i}
	}
	if got, err := c.SubmitBatch(ctx, ios); got != n || err != nil {
		t.Fatalf("SubmitBatch = %d, %v", got, err)
	}
	for range ios {
		if io := <-done; io.Err != nil {
			t.Fatalf("IO %d: %v", io.Tag, io.Err)
		}
	}
	buf := make([]byte, 4096)
	if err := c.Read(ctx, 1, 49, buf); err != nil || buf[0] != 49 {
		t.Fatalf("Read = %v, %d", err, buf[0])
	}
	bad := []*IO{ios[0], {Op: OpRead, NSID: 9, Data: buf, Done: func(*IO) {}}}
	if got, err := c.SubmitBatch(ctx, bad); got != 1 || !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("SubmitBatch with a bad IO = %d, %v; want 1 started", got, err)
	}
	<-done
	f.checkClean(t)
}

// Resubmitting from Done with every slot of every queue in use must not
// deadlock: Submit takes a free slot on any queue rather than waiting on a
// full one (a receive goroutine waiting for its own queue never wakes).
func TestResubmitFromDoneWithAllSlotsBusy(t *testing.T) {
	f := fastTarget(t)
	c := dialFake(t, f, Options{IOQueues: 2, QueueDepth: 2})
	ctx := testContext(t)
	const rounds = 500
	var left atomic.Int32
	left.Store(rounds)
	finished := make(chan error, 4)
	ios := make([]IO, c.QueueDepth()*c.IOQueueCount())
	for i := range ios {
		ios[i] = IO{Op: OpRead, NSID: 1, Data: make([]byte, 4096), Done: func(io *IO) {
			if io.Err != nil || left.Add(-1) < 0 {
				finished <- io.Err
				return
			}
			if err := c.Submit(ctx, io); err != nil {
				finished <- err
			}
		}}
		if err := c.Submit(ctx, &ios[i]); err != nil {
			t.Fatal(err)
		}
	}
	for range ios {
		if err := <-finished; err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkHostSubmitBatch measures the host library alone: 4 KiB reads and
// writes at QD 32 against fastLoop, a minimal NVMe/TCP responder. Compare
// with tests/loopback BenchmarkCeiling to see the host's share of the cost.
func BenchmarkHostSubmitBatch(b *testing.B) {
	for _, write := range []bool{false, true} {
		for _, queues := range []int{1, 4} {
			name := fmt.Sprintf("qd=32/queues=%d/write=%v", queues, write)
			b.Run(name, func(b *testing.B) { benchmarkSubmitBatch(b, 32, queues, write) })
		}
	}
}

func benchmarkSubmitBatch(b *testing.B, qd, queues int, write bool) {
	f := fastTarget(b)
	c := dialFake(b, f, Options{IOQueues: queues})
	ctx := context.Background()
	done := make(chan *IO, qd)
	ios := make([]IO, qd)
	batch := make([]*IO, 0, qd)
	op := OpRead
	if write {
		op = OpWrite
	}
	for i := range ios {
		ios[i] = IO{Op: op, NSID: 1, SLBA: uint64(i), Data: make([]byte, 4096), Done: func(io *IO) { done <- io }}
		batch = append(batch, &ios[i])
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	submitted := min(qd, b.N)
	if _, err := c.SubmitBatch(ctx, batch[:submitted]); err != nil {
		b.Fatal(err)
	}
	for completed := 0; completed < b.N; {
		batch = batch[:0]
		for io := <-done; io != nil; {
			completed++
			if submitted < b.N {
				batch = append(batch, io)
				submitted++
			}
			select {
			case io = <-done:
			default:
				io = nil
			}
		}
		if _, err := c.SubmitBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "IOPS")
}
