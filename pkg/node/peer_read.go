package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/volume"
	"basalt/replication"
)

// peerAttempt bounds one peer read: the other node's wait for its replica
// to catch up (api.PeerReadWait) and the transfer.
const peerAttempt = api.PeerReadWait + time.Second

// peerReads joins this node's volumes to the other replicas for reads the
// local replica cannot serve (pkg/volume, "Reads from another replica"):
// as volume.PeerReader it reads a range from the group's other voters'
// replicas over their API, one after the other; as api.PeerReads it serves
// this node's replicas to theirs. It knows the volumes this node's Raft
// host opened (raftReplicator) and the nodes' API addresses from the
// cluster metadata (setCluster).
type peerReads struct {
	self    replication.NodeID
	client  *api.Client
	log     *slog.Logger
	cluster atomic.Pointer[cluster.Cluster]
	mu      sync.Mutex
	vols    map[replication.GroupID]*volume.Volume
}

var _ api.PeerReads = (*peerReads)(nil)

func newPeerReads(self replication.NodeID, client *api.Client, log *slog.Logger) *peerReads {
	return &peerReads{self: self, client: client, log: log, vols: map[replication.GroupID]*volume.Volume{}}
}

// setCluster gives the node addresses; until then peer reads fail.
func (p *peerReads) setCluster(c *cluster.Cluster) {
	if c != nil {
		p.cluster.Store(c)
	}
}

// add serves v to the other nodes and lets it read from them.
func (p *peerReads) add(v *volume.Volume) {
	id := v.Group().ID()
	p.mu.Lock()
	p.vols[id] = v
	p.mu.Unlock()
	v.SetPeerReader(p.read, p.log.With("group", id))
}

// remove stops serving group id's replica.
func (p *peerReads) remove(id replication.GroupID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.vols, id)
}

func (p *peerReads) volume(id replication.GroupID) *volume.Volume {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.vols[id]
}

// ReadReplica implements api.PeerReads: the local replica of group,
// read directly (volume.Volume.ReadReplica).
func (p *peerReads) ReadReplica(ctx context.Context, group cluster.GroupID, off int64, n int, minIndex uint64) (
	[]byte, uint64, error) {
	v := p.volume(replication.GroupID(group))
	if v == nil {
		return nil, 0, fmt.Errorf("%w: group %d", api.ErrNoReplica, group)
	}
	buf := make([]byte, n)
	hi, err := v.ReadReplica(ctx, buf, off, minIndex)
	if errors.Is(err, volume.ErrReplicaBehind) {
		return nil, 0, fmt.Errorf("%w: %w", api.ErrReplicaBehind, err)
	}
	if err != nil {
		return nil, 0, err
	}
	return buf, hi, nil
}

// read implements volume.PeerReader: each other voter of the group in
// turn, until one answers.
func (p *peerReads) read(ctx context.Context, group replication.GroupID, off int64, n int, minIndex uint64) (
	[]byte, uint64, error) {
	v, c := p.volume(group), p.cluster.Load()
	if v == nil || c == nil {
		return nil, 0, fmt.Errorf("node: group %d: no volume or no cluster to read from", group)
	}
	var errs []error
	for _, id := range v.Group().Members().Voters {
		if id == p.self {
			continue
		}
		node, ok := c.Node(cluster.NodeID(id))
		if !ok || node.APIAddr == "" {
			errs = append(errs, fmt.Errorf("node %d: no API address known", id))
			continue
		}
		actx, cancel := context.WithTimeout(ctx, peerAttempt)
		data, hi, err := p.client.At(node.APIAddr).PeerRead(actx, cluster.GroupID(group), off, n, minIndex)
		cancel()
		if err == nil {
			return data, hi, nil
		}
		errs = append(errs, fmt.Errorf("node %d: %w", id, err))
	}
	if len(errs) == 0 {
		return nil, 0, fmt.Errorf("node: group %d has no other voter", group)
	}
	return nil, 0, errors.Join(errs...)
}
