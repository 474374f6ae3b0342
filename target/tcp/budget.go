package tcp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Defaults for Limits.
const (
	// DefaultMaxConnections bounds the connections open on a node. With
	// at most ReadBufferSize + about 40 KiB per connection (slots, CID
	// set, send arena), 4096 connections hold at most about 1.2 GiB
	// besides the data buffers, which MaxWriteBytes and MaxReadBytes
	// bound.
	DefaultMaxConnections = 4096
	// DefaultMaxConnectionsPerHost bounds the connections from one remote
	// IP address. Every volume is a subsystem of its own, and a host opens
	// 1 + (I/O queues, up to 32) connections per volume and path, so a
	// host with 30 volumes through this node needs about 1000.
	DefaultMaxConnectionsPerHost = 1024
	// DefaultMaxWriteBytes bounds the data buffers of writes moved by R2T
	// on a node (waiting for their data, executing, or answered).
	DefaultMaxWriteBytes = 256 << 20
	// DefaultMaxControllerWriteBytes bounds them per controller: one host
	// at queue depth 128 on 2 queues of 128 KiB writes.
	DefaultMaxControllerWriteBytes = 32 << 20
	// DefaultMaxReadBytes bounds every other data buffer on a node: reads,
	// in-capsule data and admin commands.
	DefaultMaxReadBytes = 256 << 20
)

// Limits bound what the clients of one node can make it hold. The zero
// value takes the defaults; a negative field is invalid.
type Limits struct {
	// MaxConnections is the most connections open at once; one more is
	// closed as soon as it is accepted (nothing is read from it).
	MaxConnections int
	// MaxConnectionsPerHost is the most connections open at once from one
	// remote IP address (the host NQN is unknown until Connect); one more
	// is closed as soon as it is accepted.
	MaxConnectionsPerHost int
	// MaxWriteBytes bounds the data buffers of host-to-controller
	// transfers that the target asks for with an R2T. The target sends
	// the R2T only when the buffer fits: until then the command waits,
	// holding no buffer.
	MaxWriteBytes int64
	// MaxControllerWriteBytes bounds the same per controller, so that one
	// host cannot take the node's whole write budget.
	MaxControllerWriteBytes int64
	// MaxReadBytes bounds every other data buffer: reads (until their
	// data is written to the host), in-capsule data, admin commands. A
	// command that needs one waits for it before it executes, and its
	// connection reads nothing meanwhile.
	MaxReadBytes int64
}

// EnsureDefaults fills zero fields with their defaults.
func (l *Limits) EnsureDefaults() {
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.MaxConnectionsPerHost == 0 {
		l.MaxConnectionsPerHost = DefaultMaxConnectionsPerHost
	}
	if l.MaxWriteBytes == 0 {
		l.MaxWriteBytes = DefaultMaxWriteBytes
	}
	if l.MaxControllerWriteBytes == 0 {
		l.MaxControllerWriteBytes = DefaultMaxControllerWriteBytes
	}
	if l.MaxReadBytes == 0 {
		l.MaxReadBytes = DefaultMaxReadBytes
	}
}

// Validate reports every invalid field (call EnsureDefaults first).
func (l *Limits) Validate() error {
	var errs []error
	if l.MaxConnections < 1 || l.MaxConnectionsPerHost < 1 {
		errs = append(errs, fmt.Errorf("MaxConnections %d, MaxConnectionsPerHost %d: must be positive",
			l.MaxConnections, l.MaxConnectionsPerHost))
	}
	if l.MaxWriteBytes < minBufferSize || l.MaxControllerWriteBytes < minBufferSize || l.MaxReadBytes < minBufferSize {
		errs = append(errs, fmt.Errorf("MaxWriteBytes %d, MaxControllerWriteBytes %d, MaxReadBytes %d: must be >= %d",
			l.MaxWriteBytes, l.MaxControllerWriteBytes, l.MaxReadBytes, minBufferSize))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
}

// Budget is what the listeners of one node share: the connection counts
// and the data buffers, within Limits. Its methods are safe for concurrent
// use. Pass one Budget in the Options of every Listener of a node; a
// Listener without one has its own.
type Budget struct {
	limits Limits
	conns  struct {
		sync.Mutex
		open   int
		byHost map[netip.Addr]int
	}
	pool  bufferPool
	stats budgetCounters
}

// NewBudget returns a Budget for limits (zero fields take the defaults).
func NewBudget(limits Limits) (*Budget, error) {
	limits.EnsureDefaults()
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	b := &Budget{limits: limits}
	b.conns.byHost = make(map[netip.Addr]int)
	b.pool.init(b)
	return b, nil
}

// Limits returns the limits in effect.
func (b *Budget) Limits() Limits { return b.limits }

// rejectReason is why a connection was refused at accept.
type rejectReason uint8

const (
	admitted rejectReason = iota
	rejectedNodeLimit
	rejectedHostLimit
)

// hostOf returns the remote IP address of conn (the zero Addr when it has
// none, as for in-memory test connections: those share one count).
func hostOf(conn net.Conn) netip.Addr {
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// admit counts a new connection from host, or says which limit refuses it.
func (b *Budget) admit(host netip.Addr) rejectReason {
	b.conns.Lock()
	defer b.conns.Unlock()
	switch {
	case b.conns.open >= b.limits.MaxConnections:
		b.stats.rejectedNode.Add(1)
		return rejectedNodeLimit
	case b.conns.byHost[host] >= b.limits.MaxConnectionsPerHost:
		b.stats.rejectedHost.Add(1)
		return rejectedHostLimit
	}
	b.conns.open++
	b.conns.byHost[host]++
	b.stats.accepted.Add(1)
	return admitted
}

// leave uncounts a connection admit counted.
func (b *Budget) leave(host netip.Addr) {
	b.conns.Lock()
	defer b.conns.Unlock()
	b.conns.open--
	if n := b.conns.byHost[host] - 1; n > 0 {
		b.conns.byHost[host] = n
	} else {
		delete(b.conns.byHost, host)
	}
}

// budgetCounters are the monotonic counters of Stats.
type budgetCounters struct {
	accepted, rejectedNode, rejectedHost            atomic.Uint64
	icreqTimeouts, connectTimeouts, h2cDataTimeouts atomic.Uint64
	writeWaits, readWaits, buffersAllocated         atomic.Uint64
	// readBufferBytes are the connections' read buffers (Stats).
	readBufferBytes atomic.Int64
}

// Stats are a Budget's counters and gauges, for metrics (pkg/metrics
// exports them as basalt_nvme_tcp_*).
type Stats struct {
	// Connections is the number of connections open now.
	Connections int
	// Accepted counts connections admitted; RejectedNodeLimit and
	// RejectedHostLimit those closed at accept by MaxConnections and
	// MaxConnectionsPerHost.
	Accepted, RejectedNodeLimit, RejectedHostLimit uint64
	// ICReqTimeouts, ConnectTimeouts and H2CDataTimeouts count the
	// connections closed by Options.ICReqTimeout, ConnectTimeout and
	// H2CDataTimeout.
	ICReqTimeouts, ConnectTimeouts, H2CDataTimeouts uint64
	// WriteBytes and ReadBytes are the data buffers held now under
	// MaxWriteBytes and MaxReadBytes; CachedBytes the free buffers kept
	// for reuse (never more than the two limits together, with them).
	WriteBytes, ReadBytes, CachedBytes int64
	// WriteWaits counts the commands whose R2T waited for the write
	// budget; ReadWaits those that waited for a read buffer. WritesWaiting
	// is how many wait now.
	WriteWaits, ReadWaits uint64
	WritesWaiting         int
	// BuffersAllocated counts the data buffers ever allocated (the rest
	// were reused).
	BuffersAllocated uint64
	// ReadBufferBytes are the connections' socket read buffers: none
	// before a valid ICReq, 16 KiB after it, Options.ReadBufferSize on an
	// I/O queue.
	ReadBufferBytes int64
}

// Stats returns the current counters.
func (b *Budget) Stats() Stats {
	s := Stats{
		Accepted: b.stats.accepted.Load(), RejectedNodeLimit: b.stats.rejectedNode.Load(),
		RejectedHostLimit: b.stats.rejectedHost.Load(), ICReqTimeouts: b.stats.icreqTimeouts.Load(),
		ConnectTimeouts: b.stats.connectTimeouts.Load(), H2CDataTimeouts: b.stats.h2cDataTimeouts.Load(),
		WriteWaits: b.stats.writeWaits.Load(), ReadWaits: b.stats.readWaits.Load(),
		BuffersAllocated: b.stats.buffersAllocated.Load(), ReadBufferBytes: b.stats.readBufferBytes.Load(),
	}
	b.conns.Lock()
	s.Connections = b.conns.open
	b.conns.Unlock()
	b.pool.mu.Lock()
	s.WriteBytes, s.ReadBytes, s.CachedBytes = b.pool.mu.write.used, b.pool.mu.read.used, b.pool.mu.cached
	s.WritesWaiting = b.pool.mu.writesWaiting
	b.pool.mu.Unlock()
	return s
}
