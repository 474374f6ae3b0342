package bench

// The socket engine stores nothing: every I/O is one request and one
// response over TCP with ServeSocket's echo server. It measures the floor
// under every networked storage system on a machine: what one round trip
// of a block-sized message costs with this load generator, this kernel and
// this network (on loopback, two processes and the scheduler between them).
// A replicated write takes at least two such round trips (host to leader,
// leader to followers and back, back to the host).
//
// Wire format: every message starts with a 16-byte header, little-endian.
// The response header is the request header echoed. A write's data follows
// its request; a read's data (zeros) follows its response, so writes move
// their data host to server and reads server to host, like a block device.
//
//	header (socketHeaderSize = 16 bytes), request and response alike
//	offset  size  field
//	+------+-----+---------------------------------------------------------+
//	|    0 |   1 | op: 1 read, 2 write                                     |
//	|    1 |   1 | zero (reserved)                                         |
//	|    2 |   2 | slot: the host queue's slot, 0..depth-1                 |
//	|    4 |   4 | length in bytes: a multiple of 512 in 512..1 MiB        |
//	|    8 |   8 | offset in bytes: a multiple of 512, below 2^63 (echoed) |
//	+------+-----+---------------------------------------------------------+
//
//	write   host -> server: header, length bytes     server -> host: header
//	read    host -> server: header                   server -> host: header, length bytes
//
// Requests are pipelined: a queue has up to depth of them on its own
// connection. The server answers in the order it received them; the host
// matches responses to slots and accepts any order. A header that breaks
// these rules ends the connection on either side.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// SocketMaxTransfer is the largest I/O of the socket engine, both sides.
	SocketMaxTransfer = 1 << 20
	// SocketLBASize is the socket device's logical block size.
	SocketLBASize = 4096

	socketHeaderSize = 16
	socketSector     = 512      // lengths and offsets are multiples of it
	socketBufSize    = 64 << 10 // bufio buffers, both sides
)

// ErrSocketProtocol: a socket engine header breaks the wire format, or a
// response names a slot that is not in flight.
var ErrSocketProtocol = errors.New("bench: malformed socket message")

// socketHeader is one decoded header.
type socketHeader struct {
	op       Op
	reserved uint8
	slot     uint16
	length   uint32
	offset   uint64
}

func (h *socketHeader) put(b []byte) {
	b[0], b[1] = byte(h.op), h.reserved
	binary.LittleEndian.PutUint16(b[2:], h.slot)
	binary.LittleEndian.PutUint32(b[4:], h.length)
	binary.LittleEndian.PutUint64(b[8:], h.offset)
}

func parseSocketHeader(b []byte) socketHeader {
	return socketHeader{op: Op(b[0]), reserved: b[1], slot: binary.LittleEndian.Uint16(b[2:]),
		length: binary.LittleEndian.Uint32(b[4:]), offset: binary.LittleEndian.Uint64(b[8:])}
}

// check returns an ErrSocketProtocol error if h breaks the wire format.
func (h *socketHeader) check() error {
	switch {
	case h.op != OpRead && h.op != OpWrite:
		return fmt.Errorf("%w: op %d", ErrSocketProtocol, h.op)
	case h.reserved != 0:
		return fmt.Errorf("%w: reserved byte %#x", ErrSocketProtocol, h.reserved)
	case h.length == 0 || h.length > SocketMaxTransfer || h.length%socketSector != 0:
		return fmt.Errorf("%w: length %d is not a multiple of %d in %d..%d", ErrSocketProtocol,
			h.length, socketSector, socketSector, SocketMaxTransfer)
	case h.offset%socketSector != 0 || h.offset >= 1<<63:
		return fmt.Errorf("%w: offset %d", ErrSocketProtocol, h.offset)
	}
	return nil
}

// SocketDevice is a Device without storage: each I/O is a round trip with
// ServeSocket's echo server, over one TCP connection per queue.
type SocketDevice struct {
	addr   string
	size   int64
	dialer net.Dialer
}

// DialSocket checks that an echo server answers at addr (one connection,
// closed again) and returns a device that claims size bytes, a positive
// multiple of SocketLBASize.
func DialSocket(ctx context.Context, addr string, size int64) (*SocketDevice, error) {
	if size <= 0 || size%SocketLBASize != 0 {
		return nil, fmt.Errorf("%w: socket device size %d is not a positive multiple of %d", ErrInvalidSpec, size, SocketLBASize)
	}
	d := &SocketDevice{addr: addr, size: size, dialer: net.Dialer{Timeout: 10 * time.Second}}
	c, err := d.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: dialling the echo server: %w", err)
	}
	c.Close()
	return d, nil
}

// Describe implements Device.
func (d *SocketDevice) Describe() string { return "socket tcp " + d.addr }

// LBASize implements Device.
func (d *SocketDevice) LBASize() int { return SocketLBASize }

// Size implements Device.
func (d *SocketDevice) Size() int64 { return d.size }

// MaxTransfer implements Device.
func (d *SocketDevice) MaxTransfer() int { return SocketMaxTransfer }

// Close implements Device; the queues own the connections.
func (d *SocketDevice) Close() error { return nil }

// OpenQueue implements Device: it dials the queue's own connection (at most
// 10 s) and starts its receiver.
func (d *SocketDevice) OpenQueue(depth int) (Queue, error) {
	if depth < 1 || depth > 1<<16 {
		return nil, fmt.Errorf("%w: socket queue depth %d is not in 1..65536", ErrInvalidSpec, depth)
	}
	c, err := d.dialer.Dial("tcp", d.addr)
	if err != nil {
		return nil, fmt.Errorf("bench: dialling the echo server: %w", err)
	}
	q := &socketQueue{conn: c, addr: d.addr, op: make([]Op, depth), off: make([]int64, depth), buf: make([][]byte, depth),
		hdrs: make([]byte, depth*socketHeaderSize), state: make([]slotState, depth), batch: make([]int, 0, depth),
		iov: make([][]byte, 0, 2*depth), sent: make([]atomic.Bool, depth), done: make(chan int, depth),
		dead: make(chan struct{}), received: make(chan struct{}),
		br: bufio.NewReaderSize(c, socketBufSize), rhdr: make([]byte, socketHeaderSize)}
	go q.receive()
	return q, nil
}

// slotState is where a slot is, as the queue's user sees it.
type slotState uint8

const (
	slotFree   slotState = iota
	slotQueued           // by Queue, not flushed
	slotOnWire           // flushed, not returned by Wait
)

// socketQueue is one job's queue on a SocketDevice. Queue encodes the
// header into the slot's place in hdrs; Flush sends the batch with one
// writev (headers and write data straight from the caller's buffers). The
// receiver goroutine reads responses (a read's data straight into its
// buffer) and hands the slots to Wait through done.
//
// Ownership: everything above sent belongs to the user's goroutine, except
// that the receiver reads a slot's op, off and buf between sent[slot]
// becoming true (Flush, after writing them) and the receiver clearing it.
type socketQueue struct {
	conn   net.Conn
	addr   string
	op     []Op
	off    []int64
	buf    [][]byte
	hdrs   []byte
	state  []slotState
	batch  []int       // queued slots, in order
	iov    [][]byte    // backing array of vec
	vec    net.Buffers // what Flush writes; WriteTo consumes it
	onWire int

	sent []atomic.Bool // slot sent and not answered: the receiver may use it
	done chan int      // answered slots; capacity depth, so never full

	failOnce sync.Once
	err      error         // why the connection failed; set once, before dead closes
	dead     chan struct{} // closed when the connection failed or Close began
	received chan struct{} // closed when the receiver has returned

	// The receiver's own.
	br   *bufio.Reader
	rhdr []byte
}

// Queue implements Queue. It rejects a busy or unknown slot and an I/O the
// wire format cannot carry.
func (q *socketQueue) Queue(slot int, op Op, off int64, buf []byte) error {
	if slot < 0 || slot >= len(q.state) || q.state[slot] != slotFree {
		return fmt.Errorf("bench: socket queue: slot %d is busy or not in 0..%d", slot, len(q.state)-1)
	}
	if len(buf) > SocketMaxTransfer || off < 0 {
		return fmt.Errorf("%w: %s of %d bytes at %d", ErrSocketProtocol, op, len(buf), off)
	}
	h := socketHeader{op: op, slot: uint16(slot), length: uint32(len(buf)), offset: uint64(off)}
	if err := h.check(); err != nil {
		return err
	}
	h.put(q.hdrs[slot*socketHeaderSize:])
	q.op[slot], q.off[slot], q.buf[slot] = op, off, buf
	q.state[slot] = slotQueued
	q.batch = append(q.batch, slot)
	return nil
}

// Flush implements Queue: one writev for the batch. If the connection has
// failed, the batch's slots come back from Wait with the error.
func (q *socketQueue) Flush() error {
	if len(q.batch) == 0 {
		return nil
	}
	iov := q.iov[:0]
	for _, s := range q.batch {
		iov = append(iov, q.hdrs[s*socketHeaderSize:(s+1)*socketHeaderSize])
		if q.op[s] == OpWrite {
			iov = append(iov, q.buf[s])
		}
		q.state[s] = slotOnWire
		q.sent[s].Store(true)
	}
	q.onWire += len(q.batch)
	q.batch = q.batch[:0]
	if q.failed() {
		return q.err
	}
	q.vec = iov
	if _, err := q.vec.WriteTo(q.conn); err != nil {
		q.fail(fmt.Errorf("bench: %s: sending: %w", q.describe(), err))
		return q.err
	}
	return nil
}

// describe names the queue's connection in errors.
func (q *socketQueue) describe() string { return "socket tcp " + q.addr }

// Wait implements Queue. Once the connection has failed, it returns the
// slots answered before that as completed and every other one on the wire
// with the failure. With nothing on the wire it returns ok false at once.
func (q *socketQueue) Wait(block bool) (int, error, bool) {
	if q.onWire == 0 {
		return 0, nil, false
	}
	select {
	case s := <-q.done:
		return q.finish(s, nil)
	default:
	}
	if block {
		select {
		case s := <-q.done:
			return q.finish(s, nil)
		case <-q.dead:
		}
	} else if !q.failed() {
		return 0, nil, false
	}
	select { // the receiver sent everything it answered before dead closed
	case s := <-q.done:
		return q.finish(s, nil)
	default:
	}
	for s, st := range q.state {
		if st == slotOnWire {
			return q.finish(s, q.err)
		}
	}
	return 0, nil, false // not reached: onWire counts the slots on the wire
}

func (q *socketQueue) finish(slot int, err error) (int, error, bool) {
	q.state[slot] = slotFree
	q.onWire--
	return slot, err, true
}

// Close implements Queue: it closes the connection, which ends the
// receiver, and waits for it; it does not wait for the server.
func (q *socketQueue) Close() error {
	q.fail(fmt.Errorf("bench: %s: queue closed", q.describe()))
	<-q.received
	return nil
}

// fail records the first failure, closes dead and the connection.
func (q *socketQueue) fail(err error) {
	q.failOnce.Do(func() {
		q.err = err
		close(q.dead)
		q.conn.Close()
	})
}

func (q *socketQueue) failed() bool {
	select {
	case <-q.dead:
		return true
	default:
		return false
	}
}

// receive is the receiver goroutine: it delivers responses until the
// connection fails or closes.
func (q *socketQueue) receive() {
	defer close(q.received)
	for {
		if err := q.receiveOne(); err != nil {
			q.fail(fmt.Errorf("bench: %s: %w", q.describe(), err))
			return
		}
	}
}

// receiveOne reads one response and delivers its slot.
func (q *socketQueue) receiveOne() error {
	if _, err := io.ReadFull(q.br, q.rhdr); err != nil {
		return fmt.Errorf("reading a response: %w", err)
	}
	h := parseSocketHeader(q.rhdr)
	s := int(h.slot)
	if s >= len(q.sent) || !q.sent[s].Load() {
		return fmt.Errorf("%w: a response for slot %d, which is not in flight", ErrSocketProtocol, s)
	}
	if h.op != q.op[s] || h.reserved != 0 || int(h.length) != len(q.buf[s]) || h.offset != uint64(q.off[s]) {
		return fmt.Errorf("%w: response (%s, %d bytes at %d, reserved %#x) for slot %d's %s of %d bytes at %d",
			ErrSocketProtocol, h.op, h.length, h.offset, h.reserved, s, q.op[s], len(q.buf[s]), q.off[s])
	}
	if h.op == OpRead {
		if _, err := io.ReadFull(q.br, q.buf[s]); err != nil {
			return fmt.Errorf("reading slot %d's data: %w", s, err)
		}
	}
	q.sent[s].Store(false)
	q.done <- s
	return nil
}
