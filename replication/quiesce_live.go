package replication

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/clock"
)

// Node liveness (doc.go, "Quiescence"). A quiesced group's leader sends no
// heartbeats, so its followers' election timers would never notice its node
// die. Instead the Host sends every peer it shares a group with one node
// heartbeat per tick (a MsgHeartbeat on group 0: one per node pair, however
// many groups), notes when it last heard anything from each peer, and wakes
// a quiesced follower whose leader's node has been silent for an election
// timeout, and a quiesced leader that has not heard from one of its
// followers' nodes for as long (so that it steps down if it lost its
// quorum, and its status shows the member gone). In goroutine mode one goroutine does this every
// tick; a Manual Host does it on Poll, on the injected clock.

// groupQuiesce is what the Host's liveness knows of a group, published by
// its loop.
type groupQuiesce struct {
	// peers are the group's members other than this node, set with the
	// configuration (core.setConf).
	peers atomic.Pointer[[]NodeID]
	// wake asks the loop to wake from quiescence (core.onLivenessWake).
	wake atomic.Bool
}

// liveness is the Host's node heartbeats and the silence of its peers.
type liveness struct {
	h       *Host
	start   time.Time // a peer never heard from counts as heard at start
	ticker  clock.Ticker
	confGen atomic.Uint64 // bumped whenever a group's members may change
	heard   atomic.Pointer[map[NodeID]*atomic.Int64]
	mu      struct {
		sync.Mutex
		heard     map[NodeID]*atomic.Int64 // the writers' copy of heard
		followers map[NodeID]map[GroupID]*Group
		leaders   map[GroupID]*Group
	}
	// Owned by the ticking goroutine (or Poll).
	peers []NodeID
	gen   uint64
}

func (l *liveness) init(h *Host) {
	l.h = h
	l.start = h.clock.Now()
	l.mu.heard = map[NodeID]*atomic.Int64{}
	l.mu.followers = map[NodeID]map[GroupID]*Group{}
	l.mu.leaders = map[GroupID]*Group{}
	l.heard.Store(&map[NodeID]*atomic.Int64{})
	l.confGen.Store(1)
}

// noteHeard records that something arrived from node id now.
func (l *liveness) noteHeard(id NodeID) {
	now := l.h.clock.Now().UnixNano()
	if t := (*l.heard.Load())[id]; t != nil {
		t.Store(now)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.mu.heard[id]
	if t == nil {
		t = new(atomic.Int64)
		l.mu.heard[id] = t
		m := make(map[NodeID]*atomic.Int64, len(l.mu.heard))
		for k, v := range l.mu.heard {
			m[k] = v
		}
		l.heard.Store(&m)
	}
	t.Store(now)
}

// silence returns how long node id has not been heard from.
func (l *liveness) silence(id NodeID) time.Duration {
	last := l.start
	if t := (*l.heard.Load())[id]; t != nil {
		last = time.Unix(0, t.Load())
	}
	return max(l.h.clock.Since(last), 0)
}

// heardWithin reports whether node id was heard from within d.
func (l *liveness) heardWithin(id NodeID, d time.Duration) bool { return l.silence(id) < d }

// quiesced registers a group that quiesced: a leader, or a follower of
// lead.
func (l *liveness) quiesced(g *Group, leader bool, lead NodeID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if leader {
		l.mu.leaders[g.id] = g
		return
	}
	set := l.mu.followers[lead]
	if set == nil {
		set = map[GroupID]*Group{}
		l.mu.followers[lead] = set
	}
	set[g.id] = g
}

// awake forgets a group that woke up or stopped.
func (l *liveness) awake(g *Group) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.mu.leaders, g.id)
	for lead, set := range l.mu.followers {
		if _, ok := set[g.id]; ok {
			delete(set, g.id)
			if len(set) == 0 {
				delete(l.mu.followers, lead)
			}
		}
	}
}

// confChanged notes that a group's members may have changed, or a group
// came or went: the set of peers to send node heartbeats to is recomputed.
func (l *liveness) confChanged() { l.confGen.Add(1) }

// run ticks the liveness until the Host closes (goroutine mode).
func (l *liveness) run() {
	defer l.h.wg.Done()
	t := l.h.clock.NewTicker(l.h.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-l.h.ctx.Done():
			return
		case <-t.C():
			l.tick()
		}
	}
}

// poll ticks the liveness if a tick is due (manual mode).
func (l *liveness) poll() {
	if l.ticker == nil {
		l.ticker = l.h.clock.NewTicker(l.h.cfg.TickInterval)
	}
	select {
	case <-l.ticker.C():
		l.tick()
	default:
	}
}

// tick sends a node heartbeat to every peer and wakes the quiesced groups
// whose peers fell silent.
func (l *liveness) tick() {
	self := l.h.cfg.NodeID
	if gen := l.confGen.Load(); gen != l.gen {
		l.gen, l.peers = gen, l.h.groupPeers()
	}
	if len(l.peers) == 0 {
		return
	}
	msgs := make([]raftpb.Message, len(l.peers))
	for i, p := range l.peers {
		msgs[i] = raftpb.Message{Type: raftpb.MsgHeartbeat, From: uint64(self), To: uint64(p)}
	}
	l.h.transport.Send(0, msgs)
	timeout := l.h.cfg.electionTimeout()
	var silent []NodeID
	for _, p := range l.peers {
		if !l.heardWithin(p, timeout) {
			silent = append(silent, p)
		}
	}
	if len(silent) > 0 {
		l.wakeSilent(silent)
	}
}

// wakeSilent wakes the quiesced followers of the silent nodes, and the
// quiesced leaders with a member among them.
func (l *liveness) wakeSilent(silent []NodeID) {
	var wake []*Group
	l.mu.Lock()
	for _, p := range silent {
		for _, g := range l.mu.followers[p] {
			wake = append(wake, g)
		}
		delete(l.mu.followers, p)
	}
	for id, g := range l.mu.leaders {
		if peers := g.q.peers.Load(); peers != nil && slices.ContainsFunc(*peers, func(p NodeID) bool {
			return slices.Contains(silent, p)
		}) {
			wake = append(wake, g)
			delete(l.mu.leaders, id)
		}
	}
	l.mu.Unlock()
	for _, g := range wake {
		g.q.wake.Store(true)
		g.wake()
	}
}

// groupPeers returns the nodes this Host shares a group with, sorted.
func (h *Host) groupPeers() []NodeID {
	var out []NodeID
	for _, g := range *h.routes.Load() {
		if p := g.q.peers.Load(); p != nil {
			for _, id := range *p {
				if !slices.Contains(out, id) {
					out = append(out, id)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// publishQuiescePeers publishes the members of cs for the Host's liveness.
func (c *core) publishQuiescePeers() {
	var peers []NodeID
	for _, id := range c.members {
		if id != c.self {
			peers = append(peers, NodeID(id))
		}
	}
	c.g.q.peers.Store(&peers)
	c.h.live.confChanged()
}

// handleNodeHeartbeat takes a message on group 0: a node heartbeat, which
// only says its sender is alive (already noted), or a refusal.
func (hh hostHandler) handleNodeHeartbeat(m *raftpb.Message, src Source) {
	if m.Type != raftpb.MsgHeartbeat || len(m.Entries) > 0 || m.Snapshot != nil {
		hh.h.refuse(src, 0, NodeID(m.From), refused(RejectType, "%v on group 0 (node heartbeats only)", m.Type))
	}
}

// electionTimeout is ElectionTicks ticks.
func (cfg Config) electionTimeout() time.Duration {
	return time.Duration(cfg.ElectionTicks) * cfg.TickInterval
}
