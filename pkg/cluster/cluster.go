package cluster

import (
	"basalt/pkg/crypt"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/target"
)

// Config configures a node's cluster membership.
type Config struct {
	// Self is this node as the others reach it; Self.ID is also the NVMe
	// port ID of Port.
	Self Node
	// Peers are every node of the cluster from the configuration file,
	// Self included: the metadata group's members, and the addresses used
	// until the metadata records the nodes' own registrations.
	Peers []Node
	// Machine is the restored metadata state machine.
	Machine    *Machine
	Replicator Replicator
	Replicas   Replicas
	// Keys is the cluster's keyring of key-encryption keys (package
	// crypt); nil: none, and encrypted volumes are neither created nor
	// served here.
	Keys *crypt.Keyring
	// Target exports the local replicas; Port is this node's port on it.
	Target *target.Target
	Port   uint16
	// Wrap, if set, wraps each volume's host-facing backend (metrics);
	// Unwrap is called when the volume goes away from this node.
	Wrap   func(v *Volume, b backend.Backend) backend.Backend
	Unwrap func(v *Volume)
	// Forward sends a command to the metadata leader's API at apiAddr
	// (pkg/api's client); nil: only the leader accepts commands.
	Forward func(ctx context.Context, apiAddr string, cmd Command) (Result, error)
	// Resync is the period of the reconciler's full pass (it also runs
	// after every metadata change). Default 1s.
	Resync time.Duration
	// DownOutInterval is how long a node may be unreachable before the
	// metadata leader marks it out and re-replicates what it held
	// (heal.go). Default DefaultDownOutInterval.
	DownOutInterval time.Duration
	// LeaderApplied, if set, asks the metadata leader's API at apiAddr for
	// its applied index: a follower's metadata is fresh (and orphaned
	// replicas may be deleted) once it has applied as much (awaitFresh).
	LeaderApplied func(ctx context.Context, apiAddr string) (uint64, error)
	// JoinMetadata, for a node that joined a running cluster, are the
	// metadata group's voters when it joined: it starts the group as a new
	// member that hears from them until the leader adds it (nil: an initial
	// member, which bootstraps the group with every peer).
	JoinMetadata []NodeID
	// SetPeer, if set, tells the Raft transport a node's address when the
	// metadata learns or changes it (a node that joined).
	SetPeer func(id NodeID, raftAddr string)
	Clock   clock.Clock
	Logger  *slog.Logger
}

// Cluster is a node's view of the cluster: the metadata state machine and
// group, the forwarding of commands to the metadata leader, the
// registration of this node, and the reconciler that makes the node's
// replicas, Raft groups and NVMe subsystems match the metadata.
type Cluster struct {
	cfg   Config
	keys  atomic.Pointer[crypt.Keyring] // Config.Keys, or SetKeys's (encryption.go)
	m     *Machine
	meta  Group
	log   *slog.Logger
	clock clock.Clock
	rec   *reconciler

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stopOnce  sync.Once
	closeOnce sync.Once
}

// Start starts the metadata group, the reconciler and the registration of
// this node. The node's volumes come up from the persisted metadata at
// once, before any leader is known.
func Start(cfg Config) (*Cluster, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Resync == 0 {
		cfg.Resync = time.Second
	}
	if cfg.Machine == nil || cfg.Replicator == nil || cfg.Replicas == nil || cfg.Target == nil || cfg.Self.ID == 0 {
		return nil, fmt.Errorf("%w: cluster config needs Self, Machine, Replicator, Replicas and Target", ErrInvalid)
	}
	var members []NodeID
	for _, p := range cfg.Peers {
		members = append(members, p.ID)
	}
	slices.Sort(members)
	if len(cfg.JoinMetadata) > 0 {
		members = slices.Clone(cfg.JoinMetadata)
	}
	meta, err := cfg.Replicator.StartMetadata(members, cfg.Machine)
	if err != nil {
		return nil, fmt.Errorf("cluster: while starting the metadata group: %w", err)
	}
	c := &Cluster{cfg: cfg, m: cfg.Machine, meta: meta, log: cfg.Logger, clock: cfg.Clock}
	c.keys.Store(cfg.Keys)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.rec = newReconciler(c)
	c.wg.Add(4)
	go func() { defer c.wg.Done(); c.rec.run(c.ctx) }()
	go func() { defer c.wg.Done(); newHealer(c).run(c.ctx) }()
	go func() { defer c.wg.Done(); c.register(c.ctx) }()
	go func() { defer c.wg.Done(); c.awaitFresh(c.ctx) }()
	return c, nil
}

// Stop stops the reconciler and the background work; the volumes stay
// exported and their groups running. A node shuts down with Stop, then
// closes its Raft host, then Close.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
	})
}

// Close stops the cluster (Stop) and takes the node's volumes down: their
// subsystems go, their groups stop (keeping their logs) and the replicas
// are flushed and closed (their data stays). The metadata group is stopped
// by the Replicator's owner.
func (c *Cluster) Close() error {
	c.Stop()
	c.closeOnce.Do(c.rec.teardownAll)
	return nil
}

// State returns the metadata as this node has applied it.
func (c *Cluster) State() *State { return c.m.State() }

// Self returns this node.
func (c *Cluster) Self() Node { return c.cfg.Self }

// Machine returns the metadata state machine.
func (c *Cluster) Machine() *Machine { return c.m }

// MetadataGroup returns the metadata Raft group.
func (c *Cluster) MetadataGroup() Group { return c.meta }

// ReadBarrier waits until this node's metadata reflects every command
// committed before the call.
func (c *Cluster) ReadBarrier(ctx context.Context) error { return c.meta.ReadBarrier(ctx) }

// Nodes returns every known node: the configured peers, with the
// addresses the metadata records where it has them, in ID order.
func (c *Cluster) Nodes() []Node {
	byID := map[NodeID]Node{}
	for _, p := range c.cfg.Peers {
		byID[p.ID] = p
	}
	for id, n := range c.m.State().Nodes {
		byID[id] = *n
	}
	out := make([]Node, 0, len(byID))
	for _, n := range byID {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Node) int { return int(a.ID) - int(b.ID) })
	return out
}

// Node returns node id from Nodes.
func (c *Cluster) Node(id NodeID) (Node, bool) {
	for _, n := range c.Nodes() {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// Propose proposes cmd to the metadata group on this node, which must be
// its leader, and returns the outcome of applying it.
func (c *Cluster) Propose(ctx context.Context, cmd Command) (Result, error) {
	if err := cmd.Validate(); err != nil {
		return Result{}, err
	}
	if !c.meta.IsLeader() {
		return Result{}, ErrNotLeader
	}
	cmd.Request = rand.Uint64() | 1
	data, err := cmd.Encode()
	if err != nil {
		return Result{}, fmt.Errorf("cluster: while encoding a command: %w", err)
	}
	ch := c.m.expect(cmd.Request)
	if err := c.meta.Propose(ctx, data); err != nil {
		c.m.forget(cmd.Request)
		return Result{}, err
	}
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		c.m.forget(cmd.Request)
		return Result{}, context.Cause(ctx)
	}
}

// Submit runs cmd on the metadata leader: here if this node leads,
// otherwise through Forward to the leader's API. While there is no leader,
// or leadership moves, it retries until ctx ends.
func (c *Cluster) Submit(ctx context.Context, cmd Command) (Result, error) {
	if err := cmd.Validate(); err != nil {
		return Result{}, err
	}
	ambiguous := false // an attempt may have been applied
	for {
		res, err := c.submitOnce(ctx, cmd)
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNoLeader) {
			if ambiguous && err != nil {
				return c.resolve(ctx, cmd, res, err)
			}
			return res, err
		}
		// A proposal that lost its leader in flight may still commit.
		ambiguous = ambiguous || !errors.Is(err, errNoLeaderKnown)
		t := c.clock.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return Result{}, fmt.Errorf("%w (%w)", ErrNoLeader, context.Cause(ctx))
		case <-t.C():
		}
	}
}

func (c *Cluster) submitOnce(ctx context.Context, cmd Command) (Result, error) {
	leader := c.meta.Leader()
	switch {
	case leader == 0:
		return Result{}, errNoLeaderKnown
	case leader == c.cfg.Self.ID:
		return c.Propose(ctx, cmd)
	case c.cfg.Forward == nil:
		return Result{}, ErrNotLeader
	}
	n, ok := c.Node(leader)
	if !ok || n.APIAddr == "" {
		return Result{}, fmt.Errorf("%w: leader %v has no known API address", ErrNoLeader, leader)
	}
	return c.cfg.Forward(ctx, n.APIAddr, cmd)
}

// errNoLeaderKnown: Submit found no leader to send the command to (so it
// was certainly not applied).
var errNoLeaderKnown = fmt.Errorf("%w: none known", ErrNoLeader)

// resolve interprets the refusal of a retried command whose earlier
// attempt may have been applied: a create refused because the volume
// exists with the UUID this command chose, or a delete or host removal
// refused because the thing is gone, succeeded the first time.
func (c *Cluster) resolve(ctx context.Context, cmd Command, res Result, err error) (Result, error) {
	switch {
	case cmd.Op == OpCreateVolume && errors.Is(err, ErrExists):
		if c.meta.ReadBarrier(ctx) == nil {
			if v := c.m.State().Volumes[cmd.Create.Name]; v != nil && v.UUID == cmd.Create.UUID {
				return Result{Volume: v.Public()}, nil
			}
		}
	case (cmd.Op == OpDeleteVolume || cmd.Op == OpRemoveHost) && errors.Is(err, ErrNotFound):
		if c.meta.ReadBarrier(ctx) == nil {
			v := c.m.State().Volumes[cmd.Volume]
			if cmd.Op == OpDeleteVolume && v == nil {
				return Result{}, nil
			}
			if v != nil {
				return Result{Volume: v.Public()}, nil
			}
		}
	}
	return res, err
}

// register records this node's addresses in the metadata, once a leader
// accepts it, unless the metadata already has them; and again whenever the
// metadata says this running node is out (it was down longer than the
// down-out interval: a node marked out while it was away learns it only
// once it has caught up, so registration watches for as long as it runs).
func (c *Cluster) register(ctx context.Context) {
	self := c.cfg.Self
	changed := c.m.Changed()
	tick := c.clock.NewTicker(c.cfg.Resync)
	defer tick.Stop()
	for ctx.Err() == nil {
		if n := c.m.State().Nodes[self.ID]; n == nil || !sameAddresses(n, &self) || n.State == NodeOut {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := c.Submit(sctx, Command{Op: OpRegisterNode, Node: &self})
			cancel()
			if err == nil {
				c.log.Info("node registered in the cluster metadata", "node", self.ID)
			} else {
				c.log.Debug("registration not accepted yet", "err", err)
				c.sleep(ctx, 500*time.Millisecond)
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-tick.C():
		}
	}
}

// awaitFresh waits until this node's metadata has caught up with the
// leader's once, then lets the reconciler delete orphaned replicas.
func (c *Cluster) awaitFresh(ctx context.Context) {
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.meta.ReadBarrier(sctx)
		if errors.Is(err, ErrNotLeader) {
			err = c.caughtUpWithLeader(sctx)
		}
		cancel()
		if err == nil {
			c.rec.markFresh()
			return
		}
		c.sleep(ctx, 200*time.Millisecond)
	}
}

// caughtUpWithLeader returns nil once this follower has applied what the
// metadata leader had applied when asked (a read barrier works on the leader
// only).
func (c *Cluster) caughtUpWithLeader(ctx context.Context) error {
	if c.cfg.LeaderApplied == nil {
		return ErrNotLeader
	}
	n, ok := c.Node(c.meta.Leader())
	if !ok || n.APIAddr == "" || n.ID == c.cfg.Self.ID {
		return ErrNoLeader
	}
	want, err := c.cfg.LeaderApplied(ctx, n.APIAddr)
	if err != nil {
		return err
	}
	for c.m.AppliedIndex() < want {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.sleep(ctx, 50*time.Millisecond)
	}
	return nil
}

func (c *Cluster) sleep(ctx context.Context, d time.Duration) {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

// sameAddresses reports whether a and b agree on everything a node
// registers (its administrative state aside).
func sameAddresses(a, b *Node) bool {
	x, y := *a, *b
	x.State, y.State = "", ""
	if y.Capacity == 0 {
		x.Capacity = 0
	}
	return x == y
}
