package cluster

import (
	"context"
	"errors"
	"slices"
	"time"
)

// DefaultDownOutInterval is how long a node may be down before it is marked
// out and its replicas are re-created elsewhere (Ceph's
// mon_osd_down_out_interval has the same default): long enough for a reboot
// or a short network fault, which resync from the log or a delta handles,
// short enough that a second failure seldom comes first.
const DefaultDownOutInterval = 10 * time.Minute

// healer runs on every node and acts on the metadata leader only. Every
// Resync it:
//
//   - marks out an active node that has not answered the metadata group
//     for DownOutInterval (a node in maintenance is never marked out);
//   - gives every volume with a replica on a node that is out, draining or
//     gone a Want that replaces it (placement.go), unless a move that is
//     still possible is in progress;
//   - logs, once per cause, a volume that cannot be re-replicated and why;
//   - keeps the metadata group's members in step with the nodes
//     (meta_members.go) and, once no volume needs healing, moves replicas
//     one at a time from the fullest serving node to the emptiest (a node
//     that joined fills up).
//
// The time a node was last seen lives in the leader's memory only: a new
// metadata leader starts every node's clock afresh, which can only delay a
// mark-out, never hasten one.
type healer struct {
	c        *Cluster
	seen     map[NodeID]time.Time
	wasLead  bool
	stuck    map[GroupID]string // the last reason logged per volume
	interval time.Duration
}

func newHealer(c *Cluster) *healer {
	iv := c.cfg.DownOutInterval
	if iv == 0 {
		iv = DefaultDownOutInterval
	}
	return &healer{c: c, seen: map[NodeID]time.Time{}, stuck: map[GroupID]string{}, interval: iv}
}

func (h *healer) run(ctx context.Context) {
	tick := h.c.clock.NewTicker(h.c.cfg.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
		h.pass(ctx)
	}
}

// pass is one round of the healer.
func (h *healer) pass(ctx context.Context) {
	if !h.c.meta.IsLeader() {
		h.wasLead = false
		return
	}
	now := h.c.clock.Now()
	s := h.c.m.State()
	st := h.c.meta.Status()
	if !h.wasLead {
		h.wasLead = true
		clear(h.seen)
	}
	for _, n := range s.NodeList() {
		if n.ID == h.c.cfg.Self.ID || st.RecentActive[n.ID] {
			h.seen[n.ID] = now
			continue
		}
		last, ok := h.seen[n.ID]
		if !ok {
			h.seen[n.ID] = now
			continue
		}
		if n.State == NodeActive && now.Sub(last) >= h.interval {
			h.c.log.Warn("node down longer than the down-out interval: marking it out; its replicas move to other nodes",
				"node", n.ID, "down_for", now.Sub(last).Round(time.Second), "down_out_interval", h.interval)
			if err := h.submit(ctx, Command{Op: OpSetNodeState, NodeID: n.ID, State: NodeOut}); err != nil {
				return
			}
		}
	}
	s = h.c.m.State()
	h.metaMembers(ctx, s)
	if h.replace(ctx, s) {
		h.rebalance(ctx, s)
	}
}

// replace sets a Want for every volume with a replica to move, and
// reports whether every volume has a healthy home (so rebalancing may run).
func (h *healer) replace(ctx context.Context, s *State) (settled bool) {
	settled = true
	for _, v := range s.VolumeList() {
		if len(v.Want) > 0 && s.wantHealthy(v) {
			continue
		}
		want, err := s.wantFor(v)
		if err != nil {
			h.logStuck(v, err.Error())
			settled = false
			continue
		}
		if want == nil && len(v.Want) > 0 {
			// The move's target went out or draining and the replicas are
			// all fine where they are: cancel it (Want = Replicas; a learner
			// added for it is removed).
			want = v.Replicas
		}
		if want == nil || slices.Equal(want, v.Want) {
			delete(h.stuck, v.ID)
			continue
		}
		delete(h.stuck, v.ID)
		settled = false
		h.c.log.Info("re-replicating volume", "volume", v.Name, "replicas", v.Replicas, "want", want)
		if err := h.submit(ctx, Command{Op: OpMoveReplicas, Volume: v.Name, ID: v.ID, Nodes: want}); err != nil {
			return false
		}
	}
	return settled
}

func (h *healer) logStuck(v *Volume, why string) {
	if h.stuck[v.ID] == why {
		return
	}
	h.stuck[v.ID] = why
	h.c.log.Warn("volume cannot be re-replicated", "volume", v.Name, "replicas", v.Replicas, "why", why)
}

func (h *healer) submit(ctx context.Context, cmd Command) error {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := h.c.Submit(sctx, cmd)
	if err != nil && !errors.Is(err, context.Canceled) {
		h.c.log.Warn("healer command not applied", "op", cmd.Op, "err", err)
	}
	return err
}
