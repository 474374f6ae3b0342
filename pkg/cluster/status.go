package cluster

import (
	"slices"

	"basalt/pkg/qos"
)

// LocalStatus is this node's view of itself, served at GET /v1/local and
// gathered from every node by the API's cluster-wide views.
type LocalStatus struct {
	Node     Node           `json:"node"`
	Metadata MetadataStatus `json:"metadata"`
	Volumes  []VolumeStatus `json:"volumes"`
	// Replication is the replication layer's counters, when the
	// Replicator reports them (ReplicationReporter).
	Replication *ReplicationStatus `json:"replication,omitempty"`
	// Removing names the volumes being taken down here (deleted or moved
	// away) whose teardown has not finished.
	Removing []string `json:"removing,omitempty"`
}

// MetadataStatus is the metadata group as this node sees it.
type MetadataStatus struct {
	Leader  NodeID      `json:"leader"`
	Applied uint64      `json:"applied"`
	Raft    GroupStatus `json:"raft"`
}

// VolumeStatus is one volume as this node serves it.
type VolumeStatus struct {
	Name     string  `json:"name"`
	ID       GroupID `json:"id"`
	ANAGroup uint32  `json:"ana_group"`
	// ANAState is the state this node's port reports: "optimized" where
	// the volume's leader is, "inaccessible" elsewhere.
	ANAState string      `json:"ana_state"`
	Leader   NodeID      `json:"leader"`
	Raft     GroupStatus `json:"raft"`
	// Size is what hosts see here; ReplicaSize the local replica's size.
	Size        int64 `json:"size"`
	ReplicaSize int64 `json:"replica_size"`
	// Controllers is the number of host controllers connected here.
	Controllers int `json:"controllers"`
	// Error says why the volume is not served here, if it is not: why it
	// could not be opened, or "failed: " and the reason its group failed.
	Error string `json:"error,omitempty"`
	// Failed is why the volume's Raft group failed on this node (a storage
	// or state-machine error); the group is fenced, the path inaccessible.
	Failed string `json:"failed,omitempty"`
	// QoS are the limits in force on this node's replicated volume (the
	// leader's are the ones enforced); absent where it has none
	// (qos.go).
	QoS *qos.Limits `json:"qos,omitempty"`
	// Compression is the local replica's compression, if it reports one
	// (compression.go).
	Compression *CompressionStatus `json:"compression,omitempty"`
}

// Local returns this node's status.
func (c *Cluster) Local() LocalStatus {
	st := LocalStatus{Node: c.cfg.Self, Metadata: MetadataStatus{
		Leader: c.meta.Leader(), Applied: c.m.AppliedIndex(), Raft: c.meta.Status(),
	}}
	ctrls := map[string]int{}
	for _, ci := range c.cfg.Target.Controllers() {
		if !ci.Discovery {
			ctrls[ci.SubNQN]++
		}
	}
	r := c.rec
	r.mu.Lock()
	live := make([]*localVolume, 0, len(r.mu.live))
	for _, lv := range r.mu.live {
		live = append(live, lv)
	}
	failures := make(map[GroupID]string, len(r.mu.failures))
	for id, f := range r.mu.failures {
		failures[id] = f
	}
	for _, name := range r.mu.removing {
		st.Removing = append(st.Removing, name)
	}
	r.mu.Unlock()
	slices.Sort(st.Removing)
	for _, lv := range live {
		v := lv.spec.Load()
		vs := VolumeStatus{
			Name: v.Name, ID: v.ID, ANAGroup: v.ANAGroup,
			ANAState: c.cfg.Target.ANAState(v.ANAGroup, c.cfg.Port).String(),
			Leader:   lv.group.Leader(), Raft: lv.group.Status(),
			Size: lv.export.Size(), ReplicaSize: lv.replica.Size(),
			Controllers: ctrls[v.NQN()], Error: failures[v.ID], QoS: lv.qosInForce(),
			Compression: compressionStatus(v, lv.replica),
		}
		if vs.Raft.Failed {
			vs.Failed = vs.Raft.Err
			if vs.Error == "" {
				vs.Error = "failed: " + vs.Raft.Err
			}
		}
		st.Volumes = append(st.Volumes, vs)
		delete(failures, v.ID)
	}
	s := c.m.State()
	for id, f := range failures {
		if v := s.VolumeByID(id); v != nil {
			st.Volumes = append(st.Volumes, VolumeStatus{Name: v.Name, ID: id, ANAGroup: v.ANAGroup, Error: f})
		}
	}
	slices.SortFunc(st.Volumes, func(a, b VolumeStatus) int { return int(a.ID) - int(b.ID) })
	if rr, ok := c.cfg.Replicator.(ReplicationReporter); ok {
		rs := rr.ReplicationStatus()
		st.Replication = &rs
	}
	return st
}
