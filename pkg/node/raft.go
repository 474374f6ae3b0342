package node

import (
	"context"
	"errors"
	"fmt"

	"basalt/pkg/backend"
	"basalt/pkg/cluster"
	"basalt/pkg/volume"
	"basalt/replication"
)

// raftReplicator adapts a replication.Host to cluster.Replicator; the
// volumes it opens read from and serve other replicas through peers
// (peer_read.go), when set.
type raftReplicator struct {
	h     *replication.Host
	peers *peerReads
}

func toReplIDs(ids []cluster.NodeID) []replication.NodeID {
	out := make([]replication.NodeID, len(ids))
	for i, id := range ids {
		out[i] = replication.NodeID(id)
	}
	return out
}

func (r raftReplicator) StartMetadata(members []cluster.NodeID, m *cluster.Machine) (cluster.Group, error) {
	add := r.h.AddGroup
	if r.joins(members) {
		add = r.h.JoinGroup // a node that joined: members are the voters it hears from
	}
	g, err := add(replication.GroupID(cluster.MetadataGroup), toReplIDs(members), m)
	if err != nil {
		return nil, err
	}
	return newRaftGroup(g), nil
}

func (r raftReplicator) OpenVolume(id cluster.GroupID, members []cluster.NodeID, local backend.Backend) (cluster.Group, backend.Backend, error) {
	add := volume.Add
	if r.joins(members) {
		add = volume.Join // a replica being added: members are the voters it joins
	}
	v, err := add(r.h, replication.GroupID(id), toReplIDs(members), local)
	if err != nil {
		return nil, nil, err
	}
	if r.peers != nil {
		r.peers.add(v)
	}
	return newRaftGroup(v.Group()), v, nil
}

func (r raftReplicator) CloseVolume(id cluster.GroupID, deleteLog bool) error {
	if r.peers != nil {
		r.peers.remove(replication.GroupID(id))
	}
	if !deleteLog {
		return nil // the host was closed first; the log stays for the next start
	}
	err := r.h.RemoveGroup(replication.GroupID(id))
	if errors.Is(err, replication.ErrUnknownGroup) || errors.Is(err, replication.ErrClosed) {
		return nil
	}
	return err
}

// ReplicationStatus implements cluster.ReplicationReporter: the Host's
// refusals of what peers sent, by reason.
func (r raftReplicator) ReplicationStatus() cluster.ReplicationStatus {
	st := r.h.Stats()
	rs := cluster.ReplicationStatus{Rejected: make(map[string]uint64, replication.NumRejectReasons)}
	for reason := range replication.NumRejectReasons {
		rs.Rejected[reason.String()] = st.Rejected[reason]
	}
	return rs
}

func (r raftReplicator) DropDormant(keep func(cluster.GroupID) bool) error {
	var errs []error
	for _, id := range r.h.RecoveredGroups() {
		if !keep(cluster.GroupID(id)) {
			errs = append(errs, r.h.RemoveGroup(id))
		}
	}
	// The tombstones of groups fenced here (their term and vote) go too
	// when their volume is gone and the group does not run.
	for _, id := range r.h.Tombstones() {
		if !keep(cluster.GroupID(id)) && r.h.Group(id) == nil {
			errs = append(errs, r.h.RemoveGroup(id))
		}
	}
	return errors.Join(errs...)
}

// raftGroup adapts a replication.Group to cluster.Group.
type raftGroup struct{ g *replication.Group }

func newRaftGroup(g *replication.Group) raftGroup { return raftGroup{g: g} }

// mapErr marks the replication layer's leadership errors with the cluster
// sentinels, so that Submit retries on them.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, replication.ErrNotLeader):
		return fmt.Errorf("%w: %w", cluster.ErrNotLeader, err)
	case errors.Is(err, replication.ErrNoLeader), errors.Is(err, replication.ErrProposalDropped):
		return fmt.Errorf("%w: %w", cluster.ErrNoLeader, err)
	}
	return err
}

func (rg raftGroup) Propose(ctx context.Context, data []byte) error {
	return mapErr(rg.g.Propose(ctx, data))
}

func (rg raftGroup) ReadBarrier(ctx context.Context) error { return mapErr(rg.g.ReadBarrier(ctx)) }
func (rg raftGroup) Leader() cluster.NodeID                { return cluster.NodeID(rg.g.Leader()) }
func (rg raftGroup) IsLeader() bool                        { return rg.g.IsLeader() }

// Watch converts the group's leader channel (one value, latest wins).
func (rg raftGroup) Watch() <-chan cluster.NodeID {
	src := rg.g.Watch()
	out := make(chan cluster.NodeID, 1)
	go func() {
		defer close(out)
		for id := range src {
			select {
			case <-out:
			default:
			}
			out <- cluster.NodeID(id)
		}
	}()
	return out
}

// TransferLeadership asks the group, on its leader, to hand the
// leadership to node to.
func (rg raftGroup) TransferLeadership(to cluster.NodeID) {
	rg.g.TransferLeadership(replication.NodeID(to))
}

func (rg raftGroup) Status() cluster.GroupStatus {
	s := rg.g.Status()
	st := cluster.GroupStatus{
		Leader: cluster.NodeID(s.Leader), Role: string(s.Role), Term: s.Term, Commit: s.Commit, Applied: s.Applied,
		LastIndex: s.LastIndex, CommitLatency: s.CommitLatency.Seconds(),
	}
	if s.Err != nil {
		st.Err = s.Err.Error()
	}
	st.Failed = rg.g.Fenced()
	if len(s.Peers) > 0 {
		st.Progress = make(map[cluster.NodeID]uint64, len(s.Peers))
		st.RecentActive = make(map[cluster.NodeID]bool, len(s.Peers))
		for _, p := range s.Peers {
			st.Progress[cluster.NodeID(p.Node)] = p.Match
			st.RecentActive[cluster.NodeID(p.Node)] = p.RecentActive
			if p.CatchingUp {
				cu := cluster.CatchUp{Behind: p.Behind}
				if sp := p.Snapshot; sp != nil {
					cu.SnapshotSent, cu.SnapshotTotal, cu.Delta = sp.Sent, sp.Total, sp.Delta
				}
				if st.CatchingUp == nil {
					st.CatchingUp = map[cluster.NodeID]cluster.CatchUp{}
				}
				st.CatchingUp[cluster.NodeID(p.Node)] = cu
			}
		}
	}
	return st
}
