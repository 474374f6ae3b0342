package volume

import (
	"basalt/pkg/backend"
	"basalt/replication"
)

// Join adds group id on h as a new member of a running group (a replica
// being added: Host.JoinGroup), with peers, the group's voters, as the
// nodes it takes messages from until the leader's snapshot arrives. local
// is the new, empty replica.
func Join(h *replication.Host, id replication.GroupID, peers []replication.NodeID, local backend.Backend) (*Volume, error) {
	v := newVolume(local, h.Clock())
	v.SetSnapshotIdentity(defaultIdentity(id))
	g, err := h.JoinGroup(id, peers, v)
	if err != nil {
		return nil, err
	}
	v.group.Store(g)
	return v, nil
}
