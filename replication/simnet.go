package replication

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/clock"
)

// SimOptions shape a SimNetwork's faults. Every message draws a delay in
// [DelayMin, DelayMax] (so messages reorder), is dropped with probability
// DropRate, and is delivered twice with probability DuplicateRate.
type SimOptions struct {
	DelayMin, DelayMax      time.Duration
	DropRate, DuplicateRate float64
}

// SimStats counts what a SimNetwork did.
type SimStats struct {
	Sent, Delivered, Dropped, Duplicated, Snapshots uint64
}

// SimNetwork is a simulated network for tests: hosts get their Transport
// from Endpoint, and nothing moves until the test calls Deliver, which hands
// over every message due by the clock's current time, in (due time, send
// order) order. All randomness comes from the seed, so a test that drives
// hosts and network from one goroutine replays exactly. Partitions, crashes
// (Crash) and the fault rates can change at any time.
type SimNetwork struct {
	mu        sync.Mutex
	rand      *rand.Rand
	clock     clock.Clock
	opts      SimOptions
	endpoints map[NodeID]*SimEndpoint
	blocked   map[[2]NodeID]bool // [from, to]
	queue     simQueue
	seq       uint64
	stats     SimStats
}

// NewSimNetwork returns a network whose draws come from seed and whose delays
// are measured on clk. The default options delay messages by 1 to 5 ms and
// neither drop nor duplicate them.
func NewSimNetwork(seed uint64, clk clock.Clock) *SimNetwork {
	return &SimNetwork{
		rand:      rand.New(rand.NewPCG(seed, seed^0x5851F42D4C957F2D)),
		clock:     clk,
		opts:      SimOptions{DelayMin: time.Millisecond, DelayMax: 5 * time.Millisecond},
		endpoints: make(map[NodeID]*SimEndpoint),
		blocked:   make(map[[2]NodeID]bool),
	}
}

// SetOptions changes the fault rates and delays for messages sent from now on.
func (n *SimNetwork) SetOptions(o SimOptions) {
	n.mu.Lock()
	defer n.mu.Unlock()
	o.DelayMax = max(o.DelayMax, o.DelayMin)
	n.opts = o
}

// Stats returns the counters.
func (n *SimNetwork) Stats() SimStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Endpoint returns node id's Transport, creating a fresh one if the node has
// none or its last one crashed.
func (n *SimNetwork) Endpoint(id NodeID) *SimEndpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e := n.endpoints[id]; e != nil {
		return e
	}
	e := &SimEndpoint{n: n, id: id}
	n.endpoints[id] = e
	return e
}

// Crash detaches node id's endpoint: messages in flight to it are lost, it
// sends nothing more, and snapshots it was streaming fail. The node's next
// Endpoint is a new one (a restarted process).
func (n *SimNetwork) Crash(id NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.endpoints, id)
}

// Partition cuts every link between nodes of different sides, both ways;
// links within a side, and of nodes in no side, are left as they are.
func (n *SimNetwork) Partition(sides ...[]NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, a := range sides {
		for j, b := range sides {
			if i == j {
				continue
			}
			for _, x := range a {
				for _, y := range b {
					n.blocked[[2]NodeID{x, y}] = true
				}
			}
		}
	}
}

// Block cuts the link from one node to another, in that direction only.
func (n *SimNetwork) Block(from, to NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.blocked[[2]NodeID{from, to}] = true
}

// Isolate cuts node id from every other node, both ways.
func (n *SimNetwork) Isolate(id NodeID, others ...NodeID) {
	n.Partition([]NodeID{id}, others)
}

// Heal restores every link.
func (n *SimNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.blocked)
}

// NextDelivery returns when the earliest message in flight is due.
func (n *SimNetwork) NextDelivery() (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.queue) == 0 {
		return time.Time{}, false
	}
	return n.queue[0].at, true
}

// Deliver hands over every message due by now, in order, and returns how
// many it delivered. Handlers run on the caller's goroutine; messages they
// send with no delay are delivered in the same call.
func (n *SimNetwork) Deliver() int {
	delivered := 0
	for {
		ev, src, dst, ok := n.pop()
		if !ok {
			return delivered
		}
		delivered++
		if ev.snapshot != nil {
			n.deliverSnapshot(ev, src, dst)
			continue
		}
		if dst == nil {
			continue
		}
		var m raftpb.Message
		if err := m.Unmarshal(ev.data); err != nil {
			panic(fmt.Sprintf("replication: sim network: %v", err)) // we encoded it
		}
		dst.HandleMessage(ev.group, m, simSource{})
	}
}

// pop takes the next due event, with the handlers it goes between: src is
// nil when its sender has crashed since, dst nil when it cannot be delivered.
func (n *SimNetwork) pop() (*simEvent, Handler, Handler, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.queue) == 0 || n.queue[0].at.After(n.clock.Now()) {
		return nil, nil, nil, false
	}
	ev := heap.Pop(&n.queue).(*simEvent)
	var src, dst Handler
	if e := n.endpoints[ev.from]; e != nil && e == ev.fromEndpoint && e.handler != nil && !e.closed {
		src = e.handler
	}
	if e := n.endpoints[ev.to]; e != nil && e == ev.toEndpoint && e.handler != nil && !e.closed &&
		!n.blocked[[2]NodeID{ev.from, ev.to}] {
		dst = e.handler
		n.stats.Delivered++
	} else {
		n.stats.Dropped++
	}
	return ev, src, dst, true
}

var errSimUnreachable = errors.New("replication: sim network: peer unreachable")

// deliverSnapshot runs a snapshot transfer: the sender's body writes into a
// pipe on a helper goroutine while the receiver restores from it here; the
// call returns only when both are done, so the run stays deterministic.
func (n *SimNetwork) deliverSnapshot(ev *simEvent, src, dst Handler) {
	s := ev.snapshot
	if src == nil || dst == nil {
		s.done(errSimUnreachable)
		return
	}
	pr, pw := io.Pipe()
	w := newSimSnapshotWriter(pw, dst, ev.group, s.m) // the receiver's base (delta.go)
	written := make(chan error, 1)
	go func() {
		err := s.body(w)
		pw.CloseWithError(err)
		written <- err
	}()
	err := dst.HandleSnapshot(ev.group, s.m, pr)
	if err == nil {
		_, err = io.Copy(io.Discard, pr)
	}
	pr.CloseWithError(errSimUnreachable)
	if werr := <-written; err == nil {
		err = werr
	}
	s.done(err)
}

// send queues msgs from e.
func (n *SimNetwork) send(e *SimEndpoint, group GroupID, msgs []raftpb.Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.endpoints[e.id] != e || e.closed {
		return
	}
	for i := range msgs {
		data, err := msgs[i].Marshal()
		if err != nil {
			panic(fmt.Sprintf("replication: sim network: %v", err))
		}
		n.stats.Sent++
		to := NodeID(msgs[i].To)
		if n.rand.Float64() < n.opts.DropRate {
			n.stats.Dropped++
			continue
		}
		copies := 1
		if n.rand.Float64() < n.opts.DuplicateRate {
			copies = 2
			n.stats.Duplicated++
		}
		for range copies {
			n.pushLocked(&simEvent{from: e.id, to: to, fromEndpoint: e, toEndpoint: n.endpoints[to], group: group, data: data})
		}
	}
}

func (n *SimNetwork) sendSnapshot(e *SimEndpoint, group GroupID, m raftpb.Message, body func(io.Writer) error, done func(error)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.endpoints[e.id] != e || e.closed {
		done(errSimUnreachable)
		return
	}
	n.stats.Snapshots++
	to := NodeID(m.To)
	n.pushLocked(&simEvent{from: e.id, to: to, fromEndpoint: e, toEndpoint: n.endpoints[to], group: group,
		snapshot: &simSnapshot{m: m, body: body, done: done}})
}

func (n *SimNetwork) pushLocked(ev *simEvent) {
	delay := n.opts.DelayMin
	if spread := n.opts.DelayMax - n.opts.DelayMin; spread > 0 {
		delay += time.Duration(n.rand.Int64N(int64(spread) + 1))
	}
	n.seq++
	ev.at, ev.seq = n.clock.Now().Add(delay), n.seq
	heap.Push(&n.queue, ev)
}

// simSource is the Source of a simulated message: there is no connection
// to close.
type simSource struct{}

func (simSource) Refuse() {}

// SimEndpoint is one host's Transport on a SimNetwork.
type SimEndpoint struct {
	n       *SimNetwork
	id      NodeID
	handler Handler
	closed  bool
}

var _ Transport = (*SimEndpoint)(nil)

// Start implements Transport.
func (e *SimEndpoint) Start(h Handler) error {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	e.handler = h
	return nil
}

// Send implements Transport.
func (e *SimEndpoint) Send(group GroupID, msgs []raftpb.Message) { e.n.send(e, group, msgs) }

// SendSnapshot implements Transport. The transfer happens when Deliver
// reaches it.
func (e *SimEndpoint) SendSnapshot(group GroupID, m raftpb.Message, body func(io.Writer) error, done func(error)) {
	e.n.sendSnapshot(e, group, m, body, done)
}

// SetPeer implements Transport (no addresses here).
func (e *SimEndpoint) SetPeer(NodeID, string) {}

// Addr implements Transport (no address).
func (e *SimEndpoint) Addr() net.Addr { return nil }

// Close implements Transport: the endpoint stops sending and receiving.
func (e *SimEndpoint) Close() error {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	e.closed = true
	return nil
}

type simEvent struct {
	at                       time.Time
	seq                      uint64
	from, to                 NodeID
	fromEndpoint, toEndpoint *SimEndpoint
	group                    GroupID
	data                     []byte
	snapshot                 *simSnapshot
}

type simSnapshot struct {
	m    raftpb.Message
	body func(io.Writer) error
	done func(error)
}

// simQueue is a min-heap of events by (at, seq).
type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	ev := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return ev
}
