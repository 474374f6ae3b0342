package store

import (
	"errors"
	"fmt"

	"basalt/pkg/disk"
	"basalt/pkg/identity"
	"basalt/pkg/meta"
)

// ErrForeignStore: the store's node record names another node or cluster
// than Options.Stamp.
var ErrForeignStore = errors.New("store: the store belongs to another node")

// formatNodeUUID is the node UUID a new format writes into the node record
// and every superblock: the stamp's on a cluster node, else a fresh one.
func (o *Options) formatNodeUUID() disk.UUID {
	if !o.Stamp.Node.IsZero() {
		return disk.UUID(o.Stamp.Node)
	}
	return disk.NewUUID()
}

// checkStamp compares the node record with Options.Stamp (nothing to do
// without one). A record formatted before identity stamps carries the node's
// UUID but no cluster UUID: with a matching node UUID it adopts the stamp's
// cluster (one synced metadata write).
func (s *Store) checkStamp(node *meta.NodeInfo) error {
	st := s.opts.Stamp
	if st.IsZero() {
		return nil
	}
	have := identity.Stamp{Cluster: node.ClusterUUID, Node: identity.NodeUUID(node.NodeUUID)}
	if have.Node != st.Node || (!have.Cluster.IsZero() && have.Cluster != st.Cluster) {
		return fmt.Errorf("%w: its metadata says %v, this node is %v", ErrForeignStore, have, st)
	}
	if have.Cluster.IsZero() && !st.Cluster.IsZero() {
		adopted := *node
		adopted.ClusterUUID = st.Cluster
		if err := s.meta.Update(func(tx *meta.Tx) error { return tx.PutNode(adopted) }); err != nil {
			return fmt.Errorf("store: while recording the cluster UUID: %w", err)
		}
		*node = adopted
		s.log.Info("store stamped with its cluster", "cluster", st.Cluster, "node_uuid", st.Node)
	}
	return nil
}

// Identity is what a store's metadata and drives say about whose they are,
// read without opening the store (ReadIdentity), so that a node can check
// them against its Raft log and metadata before anything is written.
type Identity struct {
	// Formatted: the metadata holds the store's node record.
	Formatted bool
	// Stamp is the node record's: its node UUID and, unless it was
	// formatted before identity stamps, its cluster UUID.
	Stamp identity.Stamp
	// Drives says what each drive's superblock names, in slot order.
	Drives []DriveIdentity
}

// DriveIdentity is one drive's superblock as ReadIdentity found it.
type DriveIdentity struct {
	// Formatted: the drive carries a valid superblock; Node is the node
	// UUID in it. A drive without one (blank) is not Formatted, Err nil.
	Formatted bool
	Node      identity.NodeUUID
	// Err is why a drive that is not blank has no valid superblock (the
	// store then opens it failed, as it does any unreadable drive).
	Err error
}

// ReadIdentity reads the store's node record from db and the superblock of
// each drive; it writes nothing.
func ReadIdentity(db *meta.DB, drives []disk.Drive) (Identity, error) {
	var id Identity
	node, ok, err := db.Node()
	if err != nil {
		return id, fmt.Errorf("store: while reading the node record: %w", err)
	}
	if ok {
		id.Formatted = true
		id.Stamp = identity.Stamp{Cluster: node.ClusterUUID, Node: identity.NodeUUID(node.NodeUUID)}
	}
	for _, d := range drives {
		sb, err := disk.ReadSuperblock(d)
		switch {
		case err == nil:
			id.Drives = append(id.Drives, DriveIdentity{Formatted: true, Node: identity.NodeUUID(sb.NodeUUID)})
		case errors.Is(err, disk.ErrNoSuperblock):
			id.Drives = append(id.Drives, DriveIdentity{})
		default:
			id.Drives = append(id.Drives, DriveIdentity{Err: err})
		}
	}
	return id, nil
}
