package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"basalt/pkg/cluster"
	"basalt/pkg/config"
	"basalt/pkg/disk"
	"basalt/pkg/identity"
	"basalt/pkg/meta"
	"basalt/pkg/store"
	"basalt/replication"
)

// A cluster node keeps its state in three places: its Raft log (a file on
// persistent memory, or tmpfs), its metadata (badger, <data_dir>/meta: the
// metadata state machine, the store's records) and its store's drives. Each
// carries the node's identity stamp (pkg/identity: its cluster's UUID and its
// own): the log an identity record (replication), the metadata the
// "identity" key and the store's node record (pkg/meta), every drive its
// superblock's node UUID. Before anything is written, checkIdentity reads
// them all and starts the node only if they agree (decide):
//
//   - a stamp that disagrees with another (a foreign log, swapped drives,
//     another cluster's data), or with cluster.initial_cluster_id when it is
//     set: refused (ErrForeignState), naming both;
//   - no metadata group in the log beside metadata or store data: the Raft
//     state was lost (a log on tmpfs after a reboot, a deleted file), and
//     bootstrapping over it would forget the node's term and vote and skip
//     the metadata entries up to the applied index: refused
//     (ErrLostRaftState), whatever cluster.bootstrap says;
//   - a log compacted past what the metadata has applied (the metadata was
//     lost, or is older than the log), or drives formatted beside metadata
//     without the store's record: refused (ErrLostMetadata). A metadata
//     group never compacted (the first entries after bootstrap) is replayed
//     whole into empty metadata: that is safe, and what a crash right after
//     the bootstrap leaves;
//   - nothing at all (perhaps the stamps of a bootstrap interrupted before
//     the metadata group existed): bootstrapped if cluster.bootstrap is set,
//     with cluster.initial_cluster_id and a new node UUID; stamped with the
//     cluster's UUID and a new node UUID if the node joined a running
//     cluster (cluster.join, join.go); else refused (ErrNoState);
//   - a log with the metadata group and metadata that has applied what the
//     log no longer holds, all stamped alike: started;
//   - the same, written before stamps existed (none of them stamped, or a
//     stamping interrupted): the stamps are adopted: the cluster UUID of an
//     existing stamp or else cluster.initial_cluster_id (refused without one,
//     ErrUnstamped), the node UUID of an existing stamp or the store's own
//     node UUID, or else a new one.
//
// Stamps are written log first, then metadata, then the store (store.Open
// with Options.Stamp), so an interrupted bootstrap or adoption leaves stamps
// that agree, and the next start finishes it.
var (
	// ErrLostRaftState: the Raft log has no metadata group beside
	// metadata or drives that hold state.
	ErrLostRaftState = errors.New("node: this node's Raft state was lost")
	// ErrLostMetadata: the Raft log was compacted past what the metadata
	// has applied, or the drives hold a store the metadata has no record of.
	ErrLostMetadata = errors.New("node: this node's metadata was lost")
	// ErrForeignState: two stores of state, or a store and
	// cluster.initial_cluster_id, name different clusters or nodes.
	ErrForeignState = errors.New("node: this node's state belongs to another node or cluster")
	// ErrNoState: an empty node without cluster.bootstrap.
	ErrNoState = errors.New("node: this node has no cluster state and cluster.bootstrap is false")
	// ErrUnstamped: state from before identity stamps, and no
	// cluster.initial_cluster_id to adopt them with.
	ErrUnstamped = errors.New("node: this node's state predates identity stamps")
)

// startUnstamped is a test hook: the node checks nothing and stamps nothing,
// as before identity stamps existed, so that a test can make such state.
var startUnstamped bool

// nodeState is what the node's stores of state hold, read before anything
// is written.
type nodeState struct {
	logPath, metaDir string
	drivePaths       []string
	removable        []string // every path of state that exists, for the messages

	logStamp    identity.Stamp
	logStamped  bool
	logGroups   int
	logMeta     replication.LogBounds
	logHasMeta  bool
	metaStamp   identity.Stamp
	metaStamped bool
	metaHas     bool   // the metadata state machine has a record
	applied     uint64 // its applied index
	store       *store.Identity
}

// plan is what decide found: the stamp to run with and where to write it.
type plan struct {
	stamp               identity.Stamp
	stampLog, stampMeta bool
	bootstrap, adopt    bool
}

// source is one store of state and the stamp it carries (parts unknown are
// zero).
type source struct {
	what  string
	stamp identity.Stamp
}

// checkIdentity reads the node's state, decides whether the node may start
// on it, and writes the stamps it lacks to the log and the metadata; it
// returns the stamp, which the store is opened with (it stamps itself).
func (cp *clusterParts) checkIdentity(cfg *config.Config, drives []disk.Drive) (identity.Stamp, error) {
	if startUnstamped {
		return identity.Stamp{}, nil
	}
	var sid *store.Identity
	if cfg.Store != nil {
		id, err := store.ReadIdentity(cp.db, drives)
		if err != nil {
			return identity.Stamp{}, fmt.Errorf("node: %w", err)
		}
		sid = &id
	}
	st, err := cp.readState(cfg, sid)
	if err != nil {
		return identity.Stamp{}, err
	}
	p, err := st.decide(cfg.Cluster)
	if err != nil {
		return identity.Stamp{}, err
	}
	switch {
	case p.bootstrap:
		cp.log.Info("an empty node: bootstrapping the cluster", "cluster", p.stamp.Cluster, "node_uuid", p.stamp.Node)
	case p.adopt:
		cp.log.Warn("this node's state predates identity stamps (or a stamping was interrupted): adopting them",
			"cluster", p.stamp.Cluster, "node_uuid", p.stamp.Node, "raft_log", st.logPath, "metadata", st.metaDir)
	default:
		cp.log.Info("identity checked", "cluster", p.stamp.Cluster, "node_uuid", p.stamp.Node)
	}
	if p.stampLog {
		if err := cp.host.StampIdentity(context.Background(), p.stamp); err != nil {
			return identity.Stamp{}, fmt.Errorf("node: raft log %s: %w", st.logPath, err)
		}
	}
	if p.stampMeta {
		if err := cp.db.Update(func(tx *meta.Tx) error { return tx.PutIdentity(p.stamp) }); err != nil {
			return identity.Stamp{}, fmt.Errorf("node: metadata: %w", err)
		}
	}
	return p.stamp, nil
}

// readState gathers what the Raft log (cp.host, recovered), the metadata
// (cp.db) and the store (sid, nil without one) say.
func (cp *clusterParts) readState(cfg *config.Config, sid *store.Identity) (*nodeState, error) {
	st := &nodeState{logPath: cfg.RaftLog.Path, metaDir: filepath.Join(cfg.Node.DataDir, "meta")}
	st.logStamp, st.logStamped = cp.host.Identity()
	st.logGroups = len(cp.host.RecoveredGroups())
	st.logMeta, st.logHasMeta = cp.host.RecoveredLog(replication.GroupID(cluster.MetadataGroup))
	var err error
	if st.metaStamp, st.metaStamped, err = cp.db.Identity(); err != nil {
		return nil, fmt.Errorf("node: metadata: %w", err)
	}
	m, err := cluster.NewMachine(metaPersister{db: cp.db}, nil)
	if err != nil {
		return nil, fmt.Errorf("node: metadata: %w", err)
	}
	_, st.metaHas, _ = cp.db.ClusterState()
	st.applied = m.AppliedIndex()
	if sid != nil {
		st.store, st.drivePaths = sid, cfg.Store.Drives
	}
	st.removable = existing(append([]string{st.metaDir, filepath.Join(cfg.Node.DataDir, "replicas"),
		filepath.Join(cfg.Node.DataDir, scrubStateName)}, append(st.drivePaths, st.logPath)...))
	return st, nil
}

// existing returns the paths that exist.
func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// sources lists every stamp the state carries, the log's first.
func (st *nodeState) sources() []source {
	var out []source
	if st.logStamped {
		out = append(out, source{"the Raft log " + st.logPath, st.logStamp})
	}
	if st.metaStamped {
		out = append(out, source{"the metadata in " + st.metaDir, st.metaStamp})
	}
	if s := st.store; s != nil {
		if s.Formatted {
			out = append(out, source{"the store's record in " + st.metaDir, s.Stamp})
		}
		for i, d := range s.Drives {
			if d.Formatted {
				out = append(out, source{"the drive " + st.drivePaths[i], identity.Stamp{Node: d.Node}})
			}
		}
	}
	return out
}

// known merges the sources' stamps, or reports the first two that disagree
// (and a cluster UUID other than the configured one).
func (st *nodeState) known(cl *config.Cluster) (identity.Stamp, error) {
	var k identity.Stamp
	var clusterFrom, nodeFrom string
	for _, s := range st.sources() {
		if c := s.stamp.Cluster; !c.IsZero() {
			if !k.Cluster.IsZero() && k.Cluster != c {
				return k, st.foreign("%s belongs to cluster %v, but %s to cluster %v", clusterFrom, k.Cluster, s.what, c)
			}
			k.Cluster, clusterFrom = c, cmpOr(clusterFrom, s.what)
		}
		if n := s.stamp.Node; !n.IsZero() {
			if !k.Node.IsZero() && k.Node != n {
				return k, st.foreign("%s belongs to node %v, but %s to node %v", nodeFrom, k.Node, s.what, n)
			}
			k.Node, nodeFrom = n, cmpOr(nodeFrom, s.what)
		}
	}
	if want := cl.InitialClusterID; !want.IsZero() && !k.Cluster.IsZero() && want != k.Cluster {
		return k, st.foreign("cluster.initial_cluster_id is %v, but %s belongs to cluster %v", want, clusterFrom, k.Cluster)
	}
	return k, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// decide applies the rules of the package comment above.
func (st *nodeState) decide(cl *config.Cluster) (plan, error) {
	k, err := st.known(cl)
	if err != nil {
		return plan{}, err
	}
	if !st.logHasMeta {
		if st.logGroups > 0 {
			return plan{}, st.foreign("the Raft log %s holds %d groups but not the metadata group: it is not a log this node wrote",
				st.logPath, st.logGroups)
		}
		if st.metaHas || (!st.logStamped && st.hasData()) {
			return plan{}, st.lostLog(k)
		}
		if cl.Join != "" && !cl.InitialClusterID.IsZero() {
			// A node that joined (join.go): it stamps its empty state with
			// the cluster's UUID and a new node UUID, and bootstraps nothing.
			return plan{stamp: identity.Stamp{Cluster: cl.InitialClusterID, Node: cmpNode(k.Node)},
				stampLog: !st.logStamped, stampMeta: !st.metaStamped}, nil
		}
		if !cl.BootstrapEnabled() {
			return plan{}, fmt.Errorf("%w: set cluster.join to a member's API address to join a running cluster, "+
				"or bootstrap = true and the same initial_cluster_id on every initial member to form one", ErrNoState)
		}
		stamp := identity.Stamp{Cluster: cl.InitialClusterID, Node: k.Node}
		if stamp.Node.IsZero() {
			stamp.Node = identity.NewNodeUUID()
		}
		return plan{stamp: stamp, stampLog: !st.logStamped, stampMeta: !st.metaStamped, bootstrap: true}, nil
	}
	if b := st.logMeta; !b.Whole() && st.applied < b.SnapIndex {
		return plan{}, st.lostMeta(k)
	}
	if st.store != nil && !st.store.Formatted && st.drivesFormatted() {
		return plan{}, fmt.Errorf("%w: the drives %s hold the store of %s, but the metadata in %s has no record of "+
			"it: where the store's data lie on them is lost. %s", ErrLostMetadata, strings.Join(st.drivePaths, ", "),
			owner(k), st.metaDir, st.remedy())
	}
	storeStamped := st.store == nil || !st.store.Formatted || !st.store.Stamp.Cluster.IsZero()
	if st.logStamped && st.metaStamped && storeStamped {
		return plan{stamp: k}, nil
	}
	return st.adopt(k, cl)
}

// cmpNode returns u, or a new node UUID if u is zero.
func cmpNode(u identity.NodeUUID) identity.NodeUUID {
	if u.IsZero() {
		return identity.NewNodeUUID()
	}
	return u
}

// adopt stamps state that has its Raft log and metadata but not (all of)
// its stamps: written before they existed, or an adoption interrupted.
func (st *nodeState) adopt(k identity.Stamp, cl *config.Cluster) (plan, error) {
	if k.Cluster.IsZero() {
		k.Cluster = cl.InitialClusterID
	}
	if k.Cluster.IsZero() {
		return plan{}, fmt.Errorf("%w: the Raft log %s and the metadata in %s carry no cluster UUID. "+
			"Set cluster.initial_cluster_id to one UUID (uuidgen makes one), the same on every node of this "+
			"cluster, and start it again: it then stamps its state with it", ErrUnstamped, st.logPath, st.metaDir)
	}
	if k.Node.IsZero() {
		k.Node = identity.NewNodeUUID()
	}
	return plan{stamp: k, stampLog: !st.logStamped, stampMeta: !st.metaStamped, adopt: true}, nil
}

// hasData reports whether the metadata or the drives hold anything besides
// a stamp.
func (st *nodeState) hasData() bool {
	if st.metaHas || st.metaStamped {
		return true
	}
	return st.store != nil && (st.store.Formatted || st.drivesFormatted())
}

// drivesFormatted reports whether any drive carries a superblock.
func (st *nodeState) drivesFormatted() bool {
	for _, d := range st.store.Drives {
		if d.Formatted {
			return true
		}
	}
	return false
}

// owner describes whose state k says it is.
func owner(k identity.Stamp) string {
	switch {
	case k.IsZero():
		return "a node from before identity stamps"
	case k.Cluster.IsZero():
		return "node " + k.Node.String() + " (from before identity stamps: no cluster UUID)"
	}
	return k.String()
}

// remedy is the end of every refusal: what to remove to start empty.
func (st *nodeState) remedy() string {
	return fmt.Sprintf("To start this node empty, remove %s; or replace it from its peers (node replace, not yet available)",
		strings.Join(st.removable, ", "))
}

func (st *nodeState) lostLog(k identity.Stamp) error {
	what := fmt.Sprintf("the metadata in %s belongs to %s (applied index %d)", st.metaDir, owner(k), st.applied)
	harm := fmt.Sprintf("its metadata would skip the entries up to index %d", st.applied)
	if !st.metaHas {
		whose := owner(k)
		if k.Cluster.IsZero() && !k.Node.IsZero() { // drives carry no cluster UUID
			whose = "node " + k.Node.String()
		}
		what = fmt.Sprintf("the metadata in %s or the drives %s hold the state of %s", st.metaDir,
			strings.Join(st.drivePaths, ", "), whose)
		harm = "the replicas on its store would be taken for new ones"
	}
	return fmt.Errorf("%w: the Raft log %s is empty or missing, but %s. Do not bootstrap over it: the node would forget its "+
		"Raft term and vote, and %s. %s", ErrLostRaftState, st.logPath, what, harm, st.remedy())
}

func (st *nodeState) lostMeta(k identity.Stamp) error {
	have := "is empty"
	if st.metaHas {
		have = fmt.Sprintf("has applied only up to index %d", st.applied)
	}
	return fmt.Errorf("%w: the Raft log %s of %s holds the metadata group from index %d to %d (the entries before "+
		"were compacted away), but the metadata in %s %s: it cannot be rebuilt from this log. %s",
		ErrLostMetadata, st.logPath, owner(k), st.logMeta.SnapIndex+1, st.logMeta.LastIndex, st.metaDir, have, st.remedy())
}

func (st *nodeState) foreign(format string, a ...any) error {
	return fmt.Errorf("%w: %s. This node starts only on a Raft log, metadata and drives that are all its own: put "+
		"back the right ones (is a log, metadata directory or drive of another node or cluster here, or are drives "+
		"swapped?). %s", ErrForeignState, fmt.Sprintf(format, a...), st.remedy())
}
