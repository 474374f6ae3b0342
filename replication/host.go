package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"basalt/cache"
	"basalt/pkg/clock"
)

// Host runs this node's side of every Raft group it belongs to: one Ready
// loop per group, the shared log in the write buffer, the transport, and the
// releaser that frees the write buffer behind the slowest group.
//
// A Host is safe for concurrent use. NewHost recovers the logs; Start starts
// the transport (and, unless Manual, the goroutines); AddGroup joins groups.
type Host struct {
	cfg       Config
	log       *slog.Logger
	clock     clock.Clock
	buf       *cache.Buffer
	transport Transport
	// incarnation distinguishes this run's proposal IDs from those of
	// earlier runs that may still sit in the log: the buffer's epoch, which
	// grows on every Open.
	incarnation uint64
	ctx         context.Context // cancelled by Close; the context of loop I/O
	cancel      context.CancelFunc

	mu struct {
		sync.Mutex
		groups  map[GroupID]*Group
		dormant map[GroupID]*logStorage // recovered, not (yet) added again
		// removing holds the logs of groups being removed until their
		// removal record is durable.
		removing map[GroupID]*logStorage
		started  bool
		closed   bool
	}
	// routes is a copy-on-write snapshot of mu.groups for the transport's
	// receive path, which must not take mu.
	routes atomic.Pointer[map[GroupID]*Group]

	releaser releaser
	space    space
	ident    logIdentity // the log's identity stamp (identity.go)
	tombs    tombstones  // of the groups fenced here (tombstone.go)
	live     liveness    // node heartbeats, for quiesced groups (quiesce_live.go)
	wg       sync.WaitGroup

	rejections rejections // what peers sent that was refused (inbound.go)
}

// NewHost opens the log region, recovers every group's log from it and
// prepares the transport (binding the TCP listener when Config.Transport is
// nil, so that Addr is known before Start). Recovered groups stay dormant
// until AddGroup names them again; RecoveredGroups lists them.
func NewHost(cfg Config) (*Host, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	buf, err := cache.Open(cfg.LogRegion, cache.Options{})
	if err != nil {
		return nil, fmt.Errorf("replication: while opening the log region: %w", err)
	}
	rec, err := recoverLog(buf)
	if err != nil {
		return nil, errors.Join(err, buf.Close())
	}
	logs := rec.logs
	stats := buf.Stats()
	if limit := stats.MaxPayload / 4; cfg.MaxProposalSize > limit {
		cfg.MaxProposalSize = limit
	}
	h := &Host{cfg: cfg, clock: cfg.Clock, buf: buf, incarnation: stats.Epoch}
	h.log = cfg.Logger.With("node", cfg.NodeID)
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.mu.groups = make(map[GroupID]*Group)
	h.mu.dormant = logs
	h.ident.init(rec)
	h.tombs.init(rec.tombs, logs)
	h.mu.removing = make(map[GroupID]*logStorage)
	h.routes.Store(&map[GroupID]*Group{})
	h.releaser.init(h)
	h.space.init(buf)
	h.live.init(h)
	for _, s := range logs {
		s.recent.limit = cfg.EntryCacheSize
		s.noWait = cfg.Manual
	}
	h.transport = cfg.Transport
	if h.transport == nil {
		t, err := NewTCPTransport(TCPConfig{NodeID: cfg.NodeID, Listen: cfg.Listen, Peers: cfg.Peers,
			Clock: cfg.Clock, Logger: h.log, TLS: cfg.TLS})
		if err != nil {
			return nil, errors.Join(err, buf.Close())
		}
		h.transport = t
	}
	h.log.Info("replication host opened", "log_mode", stats.Mode, "log_size", stats.Size,
		"log_used", stats.Used, "groups_recovered", len(logs))
	return h, nil
}

// Start starts the transport and, unless the Host is Manual, the loops of the
// groups added so far and the releaser.
func (h *Host) Start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.closed {
		return ErrClosed
	}
	if h.mu.started {
		return nil
	}
	if err := h.transport.Start(hostHandler{h}); err != nil {
		return fmt.Errorf("replication: while starting the transport: %w", err)
	}
	h.mu.started = true
	if h.cfg.Manual {
		return nil
	}
	h.wg.Add(2)
	go h.releaser.run()
	go h.live.run()
	for _, g := range h.mu.groups {
		g.startLocked()
	}
	return nil
}

// Addr returns the address the transport listens on (nil for a transport
// without one).
func (h *Host) Addr() net.Addr { return h.transport.Addr() }

// SetPeer sets or changes the Raft address of node id.
func (h *Host) SetPeer(id NodeID, addr string) { h.transport.SetPeer(id, addr) }

// NodeID returns this node's ID.
func (h *Host) NodeID() NodeID { return h.cfg.NodeID }

// RecoveredGroups lists the groups whose logs were recovered and that have
// not been added again. They keep their records in the write buffer (the
// releaser rewrites them compactly under pressure) until AddGroup or
// RemoveGroup names them.
func (h *Host) RecoveredGroups() []GroupID {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]GroupID, 0, len(h.mu.dormant))
	for id := range h.mu.dormant {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Group returns the running group id, or nil.
func (h *Host) Group(id GroupID) *Group {
	return (*h.routes.Load())[id]
}

// AddGroup joins group id with state machine sm. A group recovered from the
// log rejoins with its log and configuration (members is then ignored); a new
// group is bootstrapped with members as its voters, which must include this
// node and be the same on every member. A nil sm creates the group stopped:
// it starts when a state machine is attached (Group.Attach).
func (h *Host) AddGroup(id GroupID, members []NodeID, sm StateMachine) (*Group, error) {
	return h.addGroup(id, members, sm, false)
}

// addGroup is AddGroup; with join, a new group is not bootstrapped: it
// starts with no configuration and takes messages from members, the group's
// current voters, until the leader's snapshot brings the configuration
// (JoinGroup).
func (h *Host) addGroup(id GroupID, members []NodeID, sm StateMachine, join bool) (*Group, error) {
	if id == 0 {
		return nil, fmt.Errorf("%w: group 0", ErrConfig)
	}
	tomb := h.tombs.get(id) // a group fenced here starts from its tombstone
	h.mu.Lock()
	if h.mu.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	if h.mu.groups[id] != nil || h.mu.removing[id] != nil {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrGroupExists, id)
	}
	s := h.mu.dormant[id]
	delete(h.mu.dormant, id)
	bootstrap := s == nil && !join
	joined := s == nil && join
	if joined {
		s = h.newStorage(id)
		if tomb != nil {
			s.attachTombstone(tomb)
		}
	}
	if bootstrap {
		if !slices.Contains(members, h.cfg.NodeID) {
			h.mu.Unlock()
			return nil, fmt.Errorf("%w: members %v of new %v do not include this node %v", ErrConfig, members, id, h.cfg.NodeID)
		}
		s = h.newStorage(id)
		if tomb != nil {
			s.attachTombstone(tomb)
		}
	}
	g := newGroup(h, id, s)
	for _, m := range members {
		if m != h.cfg.NodeID {
			g.joinPeers = append(g.joinPeers, uint64(m))
		}
	}
	h.mu.groups[id] = g // registers s.pin before the group's first record
	h.mu.Unlock()

	if bootstrap {
		if err := s.bootstrap(h.ctx, members); err != nil {
			h.unregister(id)
			return nil, err
		}
	}
	if joined {
		if err := s.initJoined(h.ctx); err != nil {
			h.unregister(id)
			return nil, err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.closed {
		return nil, ErrClosed
	}
	h.publishRoutesLocked()
	// Log before the loop starts: from then on s belongs to it.
	h.log.Info("group added", "group", id, "bootstrap", bootstrap, "first", s.snapIndex+1, "last", s.lastIndex(),
		"term", s.hard.Term, "commit", s.hard.Commit)
	if sm != nil {
		if err := g.attachLocked(sm); err != nil {
			delete(h.mu.groups, id)
			h.publishRoutesLocked()
			return nil, err
		}
	}
	return g, nil
}

// newStorage returns an empty log for a new group, pinned at the next seq so
// that the releaser cannot free its first record before the pin moves.
func (h *Host) newStorage(id GroupID) *logStorage {
	s := &logStorage{group: id, buf: h.buf, noWait: h.cfg.Manual}
	s.recent.limit = h.cfg.EntryCacheSize
	s.pin.Store(uint64(h.buf.Stats().Last + 1))
	return s
}

func (h *Host) unregister(id GroupID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.mu.groups, id)
	h.publishRoutesLocked()
}

func (h *Host) publishRoutesLocked() {
	routes := make(map[GroupID]*Group, len(h.mu.groups))
	for id, g := range h.mu.groups {
		if g.ready() {
			routes[id] = g
		}
	}
	h.routes.Store(&routes)
	h.live.confChanged()
}

// RemoveGroup stops group id on this node and deletes its log: it persists a
// removal record, so that recovery forgets the group, and lets the releaser
// free its records. A dormant (recovered) group is removed the same way, and
// so is the tombstone a fenced group left (tombstone.go), alone or beside a
// log.
func (h *Host) RemoveGroup(id GroupID) error {
	tomb := h.tombs.get(id) != nil
	h.mu.Lock()
	g := h.mu.groups[id]
	s := h.mu.dormant[id]
	if g != nil {
		s = g.storage
	}
	if s == nil && tomb {
		s = &logStorage{group: id} // a tombstone alone: no log to pin
	}
	if s == nil || h.mu.removing[id] != nil {
		h.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrUnknownGroup, id)
	}
	// The group's pin keeps counting, from removing, until the removal record
	// is durable: a crash before it must find the whole log.
	h.mu.removing[id] = s
	delete(h.mu.groups, id)
	delete(h.mu.dormant, id)
	h.publishRoutesLocked()
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.mu.removing, id)
		h.mu.Unlock()
		h.releaser.wake()
	}()
	if g != nil {
		g.stop()
		if !g.fenced.Load() { // a fenced group released its log when it failed
			g.releaseLog()
		}
	}
	finish := h.tombs.startRemoval(id)
	var b recordBuilder
	_, err := h.buf.Append(h.ctx, kindRemove, b.removeRecord(id)...)
	finish(err == nil)
	if err != nil {
		return fmt.Errorf("replication: while persisting the removal of %v: %w", id, err)
	}
	h.log.Info("group removed", "group", id)
	return nil
}

// Close stops every group (their pending requests fail with ErrStopped), the
// releaser and the transport, and closes the write buffer cleanly. It does not
// close the LogRegion.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.mu.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	h.mu.closed = true
	groups := make([]*Group, 0, len(h.mu.groups))
	for _, g := range h.mu.groups {
		groups = append(groups, g)
	}
	h.mu.groups = map[GroupID]*Group{}
	h.publishRoutesLocked()
	h.mu.Unlock()
	// Signal every loop, then cut what a loop may be blocked on (an Append
	// waiting for space, a snapshot stream), then wait for them.
	for _, g := range groups {
		g.signalStop()
	}
	h.cancel()
	err := h.transport.Close()
	for _, g := range groups {
		g.waitStopped()
	}
	h.wg.Wait()
	return errors.Join(err, h.buf.Close())
}

// Poll runs, on the calling goroutine, everything a Manual Host's goroutines
// would run: for each group in ID order, its pending ticks, messages,
// requests and Ready; then the releaser. It reports whether anything was
// done. It must not be called concurrently with itself.
func (h *Host) Poll() bool {
	h.mu.Lock()
	groups := make([]*Group, 0, len(h.mu.groups))
	for _, g := range h.mu.groups {
		groups = append(groups, g)
	}
	h.mu.Unlock()
	slices.SortFunc(groups, func(a, b *Group) int { return cmpID(a.id, b.id) })
	h.live.poll()
	busy := false
	for _, g := range groups {
		busy = g.poll() || busy
	}
	h.releaser.releaseOnce()
	return busy
}

func cmpID[T ~uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// HostStats are the write buffer's statistics, the Host's admission
// waits (how often a loop held entries back for lack of buffer space), and
// the frames and messages from peers it refused, by reason (inbound.go).
type HostStats struct {
	cache.Stats
	AdmissionWaits uint64
	Rejected       [NumRejectReasons]uint64
}

// Stats returns the write buffer's statistics and the Host's counters.
func (h *Host) Stats() HostStats {
	return HostStats{Stats: h.buf.Stats(), AdmissionWaits: h.space.waits.Load(), Rejected: h.rejected()}
}

// hostHandler is the Host as the transport sees it (inbound.go).
type hostHandler struct{ h *Host }
