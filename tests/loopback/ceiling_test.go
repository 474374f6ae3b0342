package loopback

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// The ceiling: the simplest fast Go program that does the same work as an
// NVMe/TCP target and host for 4 KiB random I/O — one goroutine per server
// connection with buffered reads and writes (flushed when no more requests
// are buffered), a memory volume locked per MiB like backend.Memory, and a
// client that batches its requests per connection into one writev.

const (
	ceilingRequestSize  = 64
	ceilingResponseSize = 16
	opRead, opWrite     = 1, 2
	lockChunk           = 1 << 20
)

type ceilingServer struct {
	ln    net.Listener
	mem   []byte
	locks []sync.RWMutex
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startCeilingServer(b testing.TB) *ceilingServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &ceilingServer{ln: ln, mem: make([]byte, volumeSize), locks: make([]sync.RWMutex, volumeSize/lockChunk)}
	// Fill the volume as dialBasalt fills Basalt's: reads of never-written
	// memory would all hit the kernel's one shared zero page, always in
	// cache, which real data is not.
	for off := 0; off < volumeSize; off += blockSize {
		s.mem[off] = byte(off >> 12)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	return s
}

func (s *ceilingServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *ceilingServer) serve(c net.Conn) {
	defer c.Close()
	r, w := bufio.NewReaderSize(c, 128<<10), bufio.NewWriterSize(c, 128<<10)
	var req [ceilingRequestSize]byte
	var resp [ceilingResponseSize]byte
	for {
		if r.Buffered() == 0 && w.Flush() != nil {
			return
		}
		if _, err := io.ReadFull(r, req[:]); err != nil {
			return
		}
		off := binary.LittleEndian.Uint64(req[8:]) * blockSize
		lock := &s.locks[off/lockChunk]
		copy(resp[:4], req[4:8])
		switch req[0] {
		case opWrite:
			lock.Lock()
			_, err := io.ReadFull(r, s.mem[off:off+blockSize])
			lock.Unlock()
			if err != nil {
				return
			}
			w.Write(resp[:])
		case opRead:
			w.Write(resp[:])
			lock.RLock()
			w.Write(s.mem[off : off+blockSize])
			lock.RUnlock()
		default:
			return
		}
	}
}

// ceilingClient is the host side: per connection a reader goroutine that
// delivers completions on done, and a batch of queued requests.
type ceilingClient struct {
	conns   []net.Conn
	batches []ceilingBatch
	write   bool
	bufs    [][]byte // per slot 4 KiB
	hdrs    [][ceilingRequestSize]byte
	done    chan int
	errs    chan error
	next    int
	wg      sync.WaitGroup
}

type ceilingBatch struct {
	bufs, wbufs net.Buffers
}

func newCeilingClient(b testing.TB, addr string, w workload) *ceilingClient {
	c := &ceilingClient{write: w.write, done: make(chan int, w.qd), errs: make(chan error, w.queues),
		bufs: make([][]byte, w.qd), hdrs: make([][ceilingRequestSize]byte, w.qd), batches: make([]ceilingBatch, w.queues)}
	for i := range c.bufs {
		c.bufs[i] = make([]byte, blockSize)
	}
	for i := 0; i < w.queues; i++ {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		c.conns = append(c.conns, conn)
		c.wg.Add(1)
		go c.receive(conn)
	}
	return c
}

func (c *ceilingClient) receive(conn net.Conn) {
	defer c.wg.Done()
	r := bufio.NewReaderSize(conn, 128<<10)
	var resp [ceilingResponseSize]byte
	for {
		if _, err := io.ReadFull(r, resp[:]); err != nil {
			c.errs <- err
			return
		}
		slot := int(binary.LittleEndian.Uint32(resp[:]))
		if slot >= len(c.bufs) {
			c.errs <- fmt.Errorf("bad tag %d", slot)
			return
		}
		if !c.write {
			if _, err := io.ReadFull(r, c.bufs[slot]); err != nil {
				c.errs <- err
				return
			}
		}
		c.done <- slot
	}
}

func (c *ceilingClient) submit(slot int, lba uint64) error {
	h := &c.hdrs[slot]
	h[0] = opRead
	if c.write {
		h[0] = opWrite
	}
	binary.LittleEndian.PutUint32(h[4:], uint32(slot))
	binary.LittleEndian.PutUint64(h[8:], lba)
	bt := &c.batches[c.next]
	c.next = (c.next + 1) % len(c.batches)
	bt.bufs = append(bt.bufs, h[:])
	if c.write {
		bt.bufs = append(bt.bufs, c.bufs[slot])
	}
	return nil
}

func (c *ceilingClient) flush() error {
	for i := range c.batches {
		bt := &c.batches[i]
		if len(bt.bufs) == 0 {
			continue
		}
		bt.wbufs = bt.bufs
		if _, err := bt.wbufs.WriteTo(c.conns[i]); err != nil {
			return err
		}
		clear(bt.bufs)
		bt.bufs = bt.bufs[:0]
	}
	return nil
}

func (c *ceilingClient) wait(block bool) (int, bool, error) {
	if !block {
		select {
		case slot := <-c.done:
			return slot, true, nil
		default:
			return 0, false, nil
		}
	}
	select {
	case slot := <-c.done:
		return slot, true, nil
	case err := <-c.errs:
		return 0, false, err
	}
}

func (c *ceilingClient) close() {
	for _, conn := range c.conns {
		conn.Close()
	}
	c.wg.Wait()
}

// BenchmarkCeiling is the minimal request/response program: the upper bound
// for BenchmarkBasalt with the same sub-benchmark names.
func BenchmarkCeiling(b *testing.B) {
	s := startCeilingServer(b)
	defer s.close()
	for _, w := range matrix() {
		b.Run(w.name(), func(b *testing.B) {
			c := newCeilingClient(b, s.ln.Addr().String(), w)
			defer c.close()
			drive(b, c, w.qd)
		})
	}
}

// TestCeilingMovesData checks the ceiling program itself: a write then a
// read of the same block returns the data.
func TestCeilingMovesData(t *testing.T) {
	s := startCeilingServer(t)
	defer s.close()
	w := newCeilingClient(t, s.ln.Addr().String(), workload{qd: 1, queues: 1, write: true})
	defer w.close()
	copy(w.bufs[0], "ceiling")
	if err := w.submit(0, 42); err != nil || w.flush() != nil {
		t.Fatal(err)
	}
	if _, _, err := w.wait(true); err != nil {
		t.Fatal(err)
	}
	r := newCeilingClient(t, s.ln.Addr().String(), workload{qd: 1, queues: 1})
	defer r.close()
	if err := r.submit(0, 42); err != nil || r.flush() != nil {
		t.Fatal(err)
	}
	if _, _, err := r.wait(true); err != nil || string(r.bufs[0][:7]) != "ceiling" {
		t.Fatalf("read back %q, %v", r.bufs[0][:7], err)
	}
}
