package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// MemberOp is one kind of Raft configuration change.
type MemberOp uint8

const (
	AddLearner   MemberOp = iota + 1 // a non-voting member that receives the log
	AddVoter                         // a voter, or a learner promoted
	RemoveMember                     // a voter or learner removed
)

// MemberChange is one change of a group's configuration.
type MemberChange struct {
	Op   MemberOp
	Node NodeID
}

// Membership is a group's configuration; Outgoing is set while a joint
// change is in progress.
type Membership struct {
	Voters, Learners, Outgoing []NodeID
}

// MemberGroup is a Group whose configuration can change (the replication
// layer's groups, adapted in pkg/node).
type MemberGroup interface {
	Group
	// Members returns the configuration as this node applied it last.
	Members() Membership
	// AddPeers adds nodes this member takes messages from beside its
	// configuration: the metadata's view of the group's members, which may
	// be newer than the configuration it has applied.
	AddPeers(peers []NodeID)
	// ChangeMembers changes the configuration, on the leader, and returns
	// once it is applied here (a joint change once it is left). It refuses
	// a change while another is in progress and one that would leave the
	// voters without a live majority.
	ChangeMembers(ctx context.Context, changes ...MemberChange) error
}

// CatchUpSlack is how far behind the leader's commit index a member may be
// and still count as caught up: replicating, not being sent a snapshot (a
// learner is promoted, a voter handed leadership, a replica counted up to
// date in a volume's health).
const CatchUpSlack = 256

// withinSlack reports whether member id is within CatchUpSlack of the
// commit index, as the leader's status st sees it.
func withinSlack(st GroupStatus, id NodeID) bool { return st.Progress[id]+CatchUpSlack >= st.Commit }

// mover drives each volume this node leads toward the metadata's Want, one
// configuration change at a time per volume, and reports each configuration
// the group reached (OpReplicasChanged). It runs from the reconcile pass;
// the changes themselves wait on goroutines of their own.
type mover struct {
	mu   sync.Mutex
	busy map[GroupID]bool // a change or report in flight
	wg   sync.WaitGroup
	// peers are the Raft addresses last handed to Config.SetPeer.
	peers map[NodeID]string
	// told is, per local volume, the members last handed to AddPeers.
	told map[GroupID][]NodeID
}

// tellPeers hands each local volume's group the members the metadata names
// for it, when they changed: a member that was down or cut off while others
// were added must hear them to catch up. Only on a change: the call wakes a
// quiesced group.
func (r *reconciler) tellPeers(s *State) {
	if r.mv.told == nil {
		r.mv.told = map[GroupID][]NodeID{}
	}
	for id, lv := range r.vols {
		v := s.VolumeByID(id)
		mg, ok := lv.group.(MemberGroup)
		if v == nil || !ok {
			continue
		}
		members := v.holders()
		slices.Sort(members)
		if slices.Equal(members, r.mv.told[id]) {
			continue
		}
		r.mv.told[id] = members
		mg.AddPeers(members)
	}
	for id := range r.mv.told {
		if r.vols[id] == nil {
			delete(r.mv.told, id)
		}
	}
}

// publishPeers hands the transport the Raft address of every node the
// metadata knows that this node's configuration does not name (nodes that
// joined later), when it is new or changed. A configured address wins: it is
// how this node reaches that peer (through a proxy, a NAT, another
// network), which the address the peer registered need not be.
func (r *reconciler) publishPeers(s *State) {
	set := r.c.cfg.SetPeer
	if set == nil {
		return
	}
	if r.mv.peers == nil {
		r.mv.peers = map[NodeID]string{}
		for _, p := range r.c.cfg.Peers {
			r.mv.peers[p.ID] = "configured"
		}
	}
	for id, n := range s.Nodes {
		if r.mv.peers[id] == "configured" {
			continue
		}
		if id != r.c.cfg.Self.ID && n.RaftAddr != "" && r.mv.peers[id] != n.RaftAddr {
			r.mv.peers[id] = n.RaftAddr
			set(id, n.RaftAddr)
		}
	}
}

// moveReplicas is the reconcile pass's step for membership: for every local
// volume this node leads, the next step toward v.Want.
func (r *reconciler) moveReplicas(ctx context.Context, s *State) {
	for id, lv := range r.vols {
		v := s.VolumeByID(id)
		mg, ok := lv.group.(MemberGroup)
		if v == nil || !ok || !lv.group.IsLeader() {
			continue
		}
		if !r.mv.claim(id) {
			continue
		}
		r.mv.wg.Add(1)
		go func() {
			defer r.mv.wg.Done()
			defer r.mv.release(id)
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := r.moveStep(cctx, v, mg); err != nil && ctx.Err() == nil {
				r.c.log.Warn("replica move step failed; retrying on a later pass", "volume", v.Name, "err", err)
			}
		}()
	}
}

func (m *mover) claim(id GroupID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.busy == nil {
		m.busy = map[GroupID]bool{}
	}
	if m.busy[id] {
		return false
	}
	m.busy[id] = true
	return true
}

func (m *mover) release(id GroupID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.busy, id)
}

// moveStep takes one step for volume v on its leader: report a
// configuration the metadata does not know yet, or change the configuration
// toward Want.
func (r *reconciler) moveStep(ctx context.Context, v *Volume, g MemberGroup) error {
	m := g.Members()
	if len(m.Outgoing) > 0 || len(m.Voters) == 0 {
		return nil // a joint change is being left; next pass
	}
	if !slices.Equal(m.Voters, v.Replicas) || !slices.Equal(m.Learners, v.Learners) {
		return r.reportMembers(ctx, v, m)
	}
	if len(v.Want) == 0 {
		return nil
	}
	changes, transfer := planMove(v, m, g.Status(), r.c.cfg.Self.ID)
	if transfer != 0 {
		r.c.log.Info("handing leadership over before leaving the group", "volume", v.Name, "to", transfer)
		g.TransferLeadership(transfer)
		return nil
	}
	if len(changes) == 0 {
		return nil
	}
	r.c.log.Info("changing replicas", "volume", v.Name, "voters", m.Voters, "learners", m.Learners,
		"want", v.Want, "changes", changes)
	if err := g.ChangeMembers(ctx, changes...); err != nil {
		return err
	}
	return r.reportMembers(ctx, v, g.Members())
}

// reportMembers records the group's configuration in the metadata.
func (r *reconciler) reportMembers(ctx context.Context, v *Volume, m Membership) error {
	if len(m.Outgoing) > 0 {
		return nil
	}
	_, err := r.c.Submit(ctx, Command{Op: OpReplicasChanged, Volume: v.Name, ID: v.ID, Nodes: m.Voters, Learners: m.Learners})
	if errors.Is(err, ErrNotFound) {
		return nil // deleted meanwhile
	}
	return err
}

// planMove returns the next configuration change toward v.Want, or a node
// to hand leadership to first (when this node, self, is to leave the group):
//
//  1. a node in Want that is no member is added as a learner;
//  2. a learner not in Want is removed;
//  3. once every learner in Want has caught up (within CatchUpSlack of the
//     commit index), all of them are promoted and every voter not in Want
//     removed, in one change (joint when it is more than one) — except that
//     a leader that is itself to leave promotes the learners alone, then
//     hands leadership to a caught-up voter in Want, which removes it.
func planMove(v *Volume, m Membership, st GroupStatus, self NodeID) (changes []MemberChange, transfer NodeID) {
	for _, id := range v.Want {
		if !slices.Contains(m.Voters, id) && !slices.Contains(m.Learners, id) {
			return []MemberChange{{AddLearner, id}}, 0
		}
	}
	for _, id := range m.Learners {
		if !slices.Contains(v.Want, id) {
			return []MemberChange{{RemoveMember, id}}, 0
		}
	}
	for _, id := range m.Learners {
		if st.Progress[id] == 0 || !withinSlack(st, id) {
			return nil, 0 // still catching up (or has acknowledged nothing yet)
		}
	}
	for _, id := range m.Learners {
		changes = append(changes, MemberChange{AddVoter, id})
	}
	if !slices.Contains(v.Want, self) {
		if len(changes) > 0 {
			return changes, 0 // promote first; hand over on a later pass
		}
		for _, id := range v.Want {
			if slices.Contains(m.Voters, id) && st.RecentActive[id] && withinSlack(st, id) {
				return nil, id
			}
		}
		return nil, 0
	}
	for _, id := range m.Voters {
		if !slices.Contains(v.Want, id) {
			changes = append(changes, MemberChange{RemoveMember, id})
		}
	}
	return changes, 0
}
