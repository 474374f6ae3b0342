package replication

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/invariant"
)

// Queue bounds of a group (every queue is bounded).
const (
	inboxSize      = 1024 // raft messages; beyond, messages are dropped (queue.go)
	proposalsSize  = 1024 // proposals; beyond, Propose waits
	readsSize      = 1024 // read barriers; beyond, ReadBarrier waits
	controlSize    = 16
	proposalIDSize = 8
)

// Group is this node's member of one Raft group. Its state belongs to one
// goroutine, the group's loop (or the caller of Host.Poll in manual mode);
// the methods below hand requests to it through bounded queues and are safe
// for concurrent use.
type Group struct {
	id      GroupID
	host    *Host
	storage *logStorage
	// joinPeers are the members named when the group was added: the peers
	// a joining node takes messages from before it has a configuration.
	joinPeers []uint64

	inbox     queue[inbound]
	proposals queue[*proposal]
	reads     queue[*readRequest]
	control   chan func(*core)
	wakeCh    chan struct{}
	// checkpoint asks the loop to compact and rewrite its log (releaser).
	checkpoint atomic.Bool
	// starved: the loop held entries back for lack of write-buffer space;
	// the releaser wakes it when it frees some.
	starved atomic.Bool
	q       groupQuiesce // what the Host's liveness knows (quiesce_live.go)
	reports struct {
		sync.Mutex
		unreachable []NodeID
		snapshots   []snapshotReport
	}

	// Published by the loop for readers on other goroutines.
	leader   atomic.Uint64
	isLeader atomic.Bool
	// lease, applied and lastRead let a read barrier pass without the
	// loop while this node holds a read lease (reads.go, leaseRead).
	lease    atomic.Pointer[leaseGrant]
	applied  atomic.Uint64
	lastRead atomic.Int64 // host clock, Unix ns: the last read served by lease
	status   struct {
		sync.Mutex
		s GroupStatus
	}
	watch struct {
		sync.Mutex
		chans []chan NodeID
	}

	// Lifecycle, under host.mu except stopped/err.
	c        *core              // set by attach; owned by the loop afterwards
	cancel   context.CancelFunc // cancels the loop's I/O (an Append waiting for space)
	started  bool
	stopOnce sync.Once
	doneOnce sync.Once     // finish
	stopping chan struct{} // closed by stop
	// queueWaits counts asynchronous proposals that waited for room.
	queueWaits atomic.Uint64
	done       chan struct{} // closed when the loop goroutine exits
	stopped    atomic.Bool
	finished   atomic.Bool           // the loop is gone: nothing drains the queues
	fenced     atomic.Bool           // failed and let go of the shared log (fence.go)
	err        atomic.Pointer[error] // why the group stopped
}

// proposal is one Propose on its way through the loop.
type proposal struct {
	data  []byte // the entry: an 8-byte proposal ID, then the payload
	done  func(error)
	start time.Time
	// term and index are where Raft put the entry when this node stepped
	// it (core.propose): only the entry found there completes the
	// proposal. The ID alone does not identify it: another node's entry,
	// or one from another incarnation of this node, may carry the same.
	term, index uint64
}

// readRequest is one ReadBarrier on its way through the loop.
type readRequest struct {
	done func(error)
}

type snapshotReport struct {
	to  NodeID
	err error
}

func newGroup(h *Host, id GroupID, s *logStorage) *Group {
	g := &Group{
		id: id, host: h, storage: s,
		control:  make(chan func(*core), controlSize),
		wakeCh:   make(chan struct{}, 1),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
	g.inbox.init(inboxSize)
	g.proposals.init(proposalsSize)
	g.reads.init(readsSize)
	return g
}

// ID returns the group's ID.
func (g *Group) ID() GroupID { return g.id }

// Leader returns the leader this node knows of, or 0 during an election.
func (g *Group) Leader() NodeID { return NodeID(g.leader.Load()) }

// IsLeader reports whether this node leads the group.
func (g *Group) IsLeader() bool { return g.isLeader.Load() }

// Status returns the group's state as last published by its loop (after
// every iteration; peer progress on every tick).
func (g *Group) Status() GroupStatus {
	g.status.Lock()
	defer g.status.Unlock()
	s := g.status.s
	s.Peers = append([]PeerStatus(nil), s.Peers...)
	if errp := g.err.Load(); errp != nil {
		s.Err = *errp
	}
	return s
}

// Watch returns a channel that receives the new leader (0: none) whenever it
// changes. It holds one value: a reader that falls behind sees only the
// latest, and the loop never blocks on it. It is closed when the group stops.
func (g *Group) Watch() <-chan NodeID {
	ch := make(chan NodeID, 1)
	g.watch.Lock()
	defer g.watch.Unlock()
	if g.stopped.Load() {
		close(ch)
		return ch
	}
	g.watch.chans = append(g.watch.chans, ch)
	return ch
}

func (g *Group) notifyWatchers(leader NodeID) {
	g.watch.Lock()
	defer g.watch.Unlock()
	for _, ch := range g.watch.chans {
		select {
		case <-ch:
		default:
		}
		select {
		case ch <- leader:
		default:
		}
	}
}

// TransferLeadership asks the leader (this node) to hand leadership to node
// to. It returns at once; Watch tells when it happened. While a transfer is
// pending this node serves no lease reads and accepts no proposals.
func (g *Group) TransferLeadership(to NodeID) {
	g.exec(func(c *core) { c.transferLeadership(to) })
}

// Propose replicates data and returns once it is committed on a majority and
// applied on this node. It fails with ErrNotLeader on a follower, ErrNoLeader
// during an election or when leadership was lost while the proposal was in
// flight (its outcome is then unknown), ErrStopped, ErrTooLarge, or
// ctx.Err().
func (g *Group) Propose(ctx context.Context, data []byte) error {
	entry := make([]byte, proposalIDSize+len(data))
	copy(entry[proposalIDSize:], data)
	return g.proposeEntry(ctx, entry)
}

// ProposeAsync is Propose without waiting for the result: done is called
// once, on the group's loop (it must not block), with Propose's result, or
// on the caller's goroutine when the proposal is refused before it is
// queued. While the queue is full (proposalsSize proposals waiting for the
// loop) ProposeAsync itself waits for room, or until the group stops: the
// NVMe queue that proposes stops reading its next commands, which is the
// back-pressure a host sees, instead of a failed write or a goroutine per
// waiting proposal. It must not be called on the group's loop.
func (g *Group) ProposeAsync(data []byte, done func(error)) {
	entry := make([]byte, proposalIDSize+len(data))
	copy(entry[proposalIDSize:], data)
	g.proposeEntryAsync(entry, done)
}

// proposeEntry proposes entry, whose first proposalIDSize bytes are reserved
// for the proposal ID; the group owns entry afterwards.
func (g *Group) proposeEntry(ctx context.Context, entry []byte) error {
	if err := g.admit(len(entry)); err != nil {
		return err
	}
	result := make(chan error, 1)
	p := &proposal{data: entry, done: func(err error) { result <- err }, start: g.host.clock.Now()}
	return submitAndWait(ctx, g, &g.proposals, p, result)
}

func (g *Group) proposeEntryAsync(entry []byte, done func(error)) {
	if err := g.admit(len(entry)); err != nil {
		done(err)
		return
	}
	p := &proposal{data: entry, done: done, start: g.host.clock.Now()}
	if !g.proposals.put(p) {
		g.queueWaits.Add(1)
		if !g.proposals.putWait(p, g.stopping, nil) {
			done(g.stopErr())
			return
		}
	}
	g.failQueuedIfFinished()
}

// failQueuedIfFinished fails what is queued if the loop has finished: a
// proposal queued after finish drained the queue would otherwise wait for
// ever (finish sets finished before it drains, so one of the two sees it).
func (g *Group) failQueuedIfFinished() {
	if g.finished.Load() {
		g.failQueued()
	}
}

// admit fails fast what the loop would refuse anyway.
func (g *Group) admit(size int) error {
	switch {
	case g.stopped.Load():
		return g.stopErr()
	case size-proposalIDSize > g.host.cfg.MaxProposalSize:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, size-proposalIDSize, g.host.cfg.MaxProposalSize)
	case !g.isLeader.Load():
		return g.notLeaderErr()
	}
	return nil
}

func (g *Group) notLeaderErr() error {
	if g.leader.Load() == 0 {
		return ErrNoLeader
	}
	return ErrNotLeader
}

func (g *Group) stopErr() error {
	if errp := g.err.Load(); errp != nil {
		return fmt.Errorf("%w: %w", ErrStopped, *errp)
	}
	return ErrStopped
}

// ReadBarrier returns once this node may serve a linearizable read from its
// state machine: it has confirmed it leads the group (under its lease, or by
// a quorum round trip), and it has applied every entry committed before the
// call. Errors are those of Propose.
func (g *Group) ReadBarrier(ctx context.Context) error {
	if err := g.admit(proposalIDSize); err != nil {
		return err
	}
	if g.leaseRead() {
		return nil
	}
	result := make(chan error, 1)
	r := &readRequest{done: func(err error) { result <- err }}
	return submitAndWait(ctx, g, &g.reads, r, result)
}

// submitAndWait hands item to the group loop through q and waits for its
// result, giving up when ctx ends or the group stops before the hand-over.
func submitAndWait[T any](ctx context.Context, g *Group, q *queue[T], item T, result <-chan error) error {
	if !q.putWait(item, ctx.Done(), g.stopping) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return g.stopErr()
	}
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ReadBarrierAsync is ReadBarrier without waiting; done is called once, on
// the group's loop.
func (g *Group) ReadBarrierAsync(done func(error)) {
	if err := g.admit(proposalIDSize); err != nil {
		done(err)
		return
	}
	if g.leaseRead() {
		done(nil)
		return
	}
	if !g.reads.put(&readRequest{done: done}) {
		done(ErrProposalDropped)
	}
}

// exec runs f on the loop, waiting for room in the control queue.
func (g *Group) exec(f func(*core)) {
	select {
	case g.control <- f:
	case <-g.stopping:
	}
}

// deliver queues an inbound message; a full inbox, or a stopped group,
// drops it.
func (g *Group) deliver(in inbound) {
	if g.stopped.Load() {
		return
	}
	g.inbox.put(in)
}

func (g *Group) reportUnreachable(to NodeID) {
	g.reports.Lock()
	g.reports.unreachable = append(g.reports.unreachable, to)
	g.reports.Unlock()
	g.wake()
}

func (g *Group) reportSnapshot(to NodeID, err error) {
	g.reports.Lock()
	g.reports.snapshots = append(g.reports.snapshots, snapshotReport{to: to, err: err})
	g.reports.Unlock()
	g.wake()
}

func (g *Group) requestCheckpoint() {
	g.checkpoint.Store(true)
	g.wake()
}

func (g *Group) wake() {
	select {
	case g.wakeCh <- struct{}{}:
	default:
	}
}

// receiveSnapshot restores a streamed snapshot on the loop: inline in manual
// mode, else through the control queue, waiting for the result.
func (g *Group) receiveSnapshot(m raftpb.Message, body io.Reader) error {
	if g.host.cfg.Manual {
		if g.stopped.Load() {
			return g.stopErr()
		}
		return g.restoreInline(m, body)
	}
	result := make(chan error, 1)
	select {
	case g.control <- func(c *core) { result <- c.restore(m, body) }:
	case <-g.stopping:
		return g.stopErr()
	}
	select {
	case err := <-result:
		return err
	case <-g.stopping:
		return g.stopErr()
	}
}

// restoreInline is restore on the caller's goroutine (manual mode), with
// the loop's containment of panics.
func (g *Group) restoreInline(m raftpb.Message, body io.Reader) (err error) {
	defer func() {
		if g.contain(recover()) {
			err = g.stopErr()
		}
	}()
	return g.c.restore(m, body)
}

// ready reports whether the group has a state machine (and so a Raft node).
func (g *Group) ready() bool { return g.c != nil }

// attachLocked creates the Raft node over sm. host.mu is held.
func (g *Group) attachLocked(sm StateMachine) error {
	if g.c != nil {
		return fmt.Errorf("%w: %v already has a state machine", ErrConfig, g.id)
	}
	if err := g.checkOrphanReplica(sm); err != nil {
		return err
	}
	c, err := newCoreContained(g, sm)
	if err != nil {
		return err
	}
	g.c = c
	g.host.publishRoutesLocked()
	if g.host.mu.started && !g.host.cfg.Manual {
		g.startLocked()
	}
	return nil
}

// checkOrphanReplica refuses a state machine that has applied entries
// beyond the end of its log when this node is the group's only voter: a
// group fenced here (fence.go) whose log was dropped, added again with an
// empty log. No peer can send those entries back, and the log's next
// indexes would be at or below the applied index, whose entries Apply
// skips: new writes would be acknowledged and never applied. (With other
// voters the leader sends the entries or a snapshot, and skipping what was
// applied is right: the indexes are the group's.)
func (g *Group) checkOrphanReplica(sm StateMachine) error {
	s := g.storage
	if len(s.conf.Voters) != 1 || s.conf.Voters[0] != uint64(g.host.cfg.NodeID) || len(s.conf.Learners) != 0 {
		return nil
	}
	if applied, last := sm.AppliedIndex(), s.lastIndex(); applied > last {
		return fmt.Errorf("%w: %v: its only replica has applied up to index %d but its Raft log here ends at %d "+
			"(dropped when the group failed): a group with one replica has no peer to catch up from; "+
			"remove the volume and create it again", ErrOrphanReplica, g.id, applied, last)
	}
	return nil
}

// newCoreContained is newCore, with a panic in Raft (which checks the
// recovered log's state as it starts) returned as an invariant violation.
func newCoreContained(g *Group, sm StateMachine) (c *core, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, invariant.Failf("replication: %v: starting Raft panicked: %v", g.id, r)
		}
	}()
	return newCore(g, sm)
}

// attach is attachLocked for callers that do not hold host.mu.
func (g *Group) attach(sm StateMachine) error {
	g.host.mu.Lock()
	defer g.host.mu.Unlock()
	if g.stopped.Load() {
		return g.stopErr()
	}
	return g.attachLocked(sm)
}

// startLocked starts the loop goroutine. host.mu is held.
func (g *Group) startLocked() {
	if g.c == nil || g.started {
		return
	}
	g.started = true
	g.host.wg.Add(1)
	go g.run()
}

// run is the group's loop (goroutine mode).
func (g *Group) run() {
	defer g.host.wg.Done()
	defer close(g.done)
	defer func() { g.contain(recover()) }()
	c := g.c
	for {
		select {
		case <-g.stopping:
			return
		case <-c.ticker.C():
			c.tick()
		case <-g.inbox.ready:
			c.stepInbox()
		case <-g.proposals.ready:
			c.takeProposals()
		case <-g.reads.ready:
			c.takeReads()
		case f := <-g.control:
			c.runControl(f)
		case <-g.wakeCh:
		}
		if _, err := c.iterate(); err != nil {
			g.fail(err)
			g.finish()
			return
		}
	}
}

// poll is one iteration of the loop in manual mode.
func (g *Group) poll() (busy bool) {
	c := g.c
	if c == nil || g.stopped.Load() {
		return false
	}
	defer func() {
		if g.contain(recover()) {
			busy = true
		}
	}()
	ticked := false
	select {
	case <-c.ticker.C():
		c.tick()
		ticked = true
	default:
	}
	busy, err := c.iterate()
	if err != nil {
		g.fail(err)
		g.finish()
		return true
	}
	return busy || ticked
}

// contain handles r, what recover returned in the loop: a panic that
// escaped it (a broken invariant in Raft, which reports them by panicking,
// or in this package) fails and fences this group only, and the node goes
// on serving the others. It reports whether there was one. With the
// invariants tag, invariant.Failf panics again: tests stop at the bug.
func (g *Group) contain(r any) bool {
	if r == nil {
		return false
	}
	err := invariant.Failf("replication: %v: the group's loop panicked: %v\n%s", g.id, r, debug.Stack())
	g.fail(err)
	g.finish()
	return true
}

// fail records why the loop stopped and stops the group. It runs on the
// loop. A failure, as opposed to the end of a loop a stop or Close cut
// short, also fences the group (fence.go).
func (g *Group) fail(err error) {
	stopping := g.stopped.Load()
	if stopping {
		g.host.log.Info("group stopped", "group", g.id, "err", err)
	} else {
		g.host.log.Error("group failed: fenced on this node", "group", g.id, "err", err)
	}
	g.err.CompareAndSwap(nil, &err)
	g.stopped.Store(true)
	g.stopOnce.Do(func() { close(g.stopping) })
	if !stopping {
		g.fence()
	}
}

// stop stops the group: the loop exits, then every pending request fails
// with ErrStopped and the watch channels close.
func (g *Group) stop() {
	g.signalStop()
	g.waitStopped()
}

// signalStop tells the loop to exit and cancels its I/O.
func (g *Group) signalStop() {
	g.stopped.Store(true)
	g.stopOnce.Do(func() { close(g.stopping) })
	if g.cancel != nil {
		g.cancel()
	}
}

// waitStopped waits for the loop to exit and fails what is pending.
func (g *Group) waitStopped() {
	g.host.mu.Lock()
	started := g.started
	g.host.mu.Unlock()
	if started {
		<-g.done
	}
	g.finish()
}

// finish fails what is pending and closes the watchers, once. It runs once
// the loop no longer runs.
func (g *Group) finish() {
	g.doneOnce.Do(g.finishOnce)
}

func (g *Group) finishOnce() {
	if g.c != nil {
		g.c.shutdown(g.stopErr())
	}
	g.finished.Store(true)
	g.failQueued()
	g.watch.Lock()
	for _, ch := range g.watch.chans {
		close(ch)
	}
	g.watch.chans = nil
	g.watch.Unlock()
}

// failQueued fails every proposal and read barrier in the queues.
func (g *Group) failQueued() {
	for {
		ps, rs := g.proposals.take(), g.reads.take()
		if ps == nil && rs == nil {
			return
		}
		for _, p := range ps {
			p.done(g.stopErr())
		}
		for _, r := range rs {
			r.done(g.stopErr())
		}
		if ps != nil {
			g.proposals.done(ps)
		}
		if rs != nil {
			g.reads.done(rs)
		}
	}
}

// roleOf names a Raft state.
func roleOf(s raft.StateType) Role {
	switch s {
	case raft.StateLeader:
		return RoleLeader
	case raft.StateCandidate, raft.StatePreCandidate:
		return RoleCandidate
	default:
		return RoleFollower
	}
}
