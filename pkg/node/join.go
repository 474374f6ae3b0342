package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/clock"
	"basalt/pkg/cluster"
	"basalt/pkg/config"
	"basalt/pkg/identity"
)

// A new node joins a running cluster (config cluster.join): on its first
// start it asks a member's API for an ID (POST /v1/nodes/join, which the
// metadata leader answers with OpJoinNode), and records the answer in
// <data_dir>/cluster-join.json before anything else is written, so that a
// start interrupted after it resumes with the same ID instead of asking for
// another (join_tls.go: in a secure cluster it is given the CA certificate
// and an admin token, and gets its node certificate with the answer). The
// metadata leader then adds it to the metadata group as a
// learner and promotes it once it has caught up (pkg/cluster,
// meta_members.go); the rebalancer moves replicas to it.

// joinRecord is cluster-join.json.
type joinRecord struct {
	NodeID         cluster.NodeID       `json:"node_id"`
	ClusterID      identity.ClusterUUID `json:"cluster_id"`
	Nodes          []cluster.Node       `json:"nodes"`
	MetadataVoters []cluster.NodeID     `json:"metadata_voters"`
}

const joinFile = "cluster-join.json"

// joinTimeout bounds the wait for the cluster to admit this node.
const joinTimeout = 60 * time.Second

// joinIfNew makes cfg the configuration of the node the cluster admitted,
// asking it first if this node has never joined. It returns the record, nil
// for a node that does not join.
func joinIfNew(cfg *config.Config, log *slog.Logger) (*joinRecord, error) {
	cl := cfg.Cluster
	if cl.Join == "" {
		return nil, nil
	}
	path := filepath.Join(cfg.Node.DataDir, joinFile)
	rec, err := readJoinRecord(path)
	switch {
	case err == nil:
		log.Info("joined the cluster before: resuming as that node", "node", rec.NodeID, "cluster", rec.ClusterID)
	case errors.Is(err, os.ErrNotExist):
		if cl.NodeID != 0 {
			return nil, fmt.Errorf("node: cluster.join with cluster.node_id %d: a joining node gets its ID from the cluster; "+
				"remove node_id (or remove join from a node that is already a member)", cl.NodeID)
		}
		if _, err := os.Stat(filepath.Join(cfg.Node.DataDir, "meta")); err == nil {
			return nil, fmt.Errorf("node: cluster.join: %s holds a node's state but no %s, so which node it was is "+
				"unknown; joining again would give that state a new ID. Remove the data directory to join afresh", cfg.Node.DataDir, joinFile)
		}
		if rec, err = askToJoin(cfg, log); err != nil {
			return nil, err
		}
		if err := writeJoinRecord(path, rec); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	var peers []config.Peer
	for _, n := range rec.Nodes {
		peers = append(peers, config.Peer{ID: uint64(n.ID), Name: n.Name, Raft: n.RaftAddr, NVMe: n.NVMeAddr, API: n.APIAddr})
	}
	if err := cfg.AdoptJoin(uint64(rec.NodeID), rec.ClusterID, peers); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return rec, nil
}

// askToJoin asks the member at cluster.join to admit this node, retrying
// while the cluster has no leader.
func askToJoin(cfg *config.Config, log *slog.Logger) (*joinRecord, error) {
	cl := cfg.Cluster
	ja, err := newJoinAuth(cfg)
	if err != nil {
		return nil, err
	}
	req := api.JoinRequest{Name: cfg.Node.Name, NVMeAddr: cfg.NVMe.Advertise, RaftAddr: cl.RaftListen,
		APIAddr: cl.APIListen, Zone: cl.Zone, CSR: ja.csr()}
	ctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
	defer cancel()
	for {
		jv, err := ja.client.JoinNode(ctx, req)
		if err == nil {
			id, perr := identity.ParseClusterUUID(jv.ClusterID)
			if perr != nil {
				return nil, fmt.Errorf("node: the cluster at %s answered the join without a valid cluster UUID %q: %w",
					cl.Join, jv.ClusterID, perr)
			}
			if err := ja.save(cfg, jv, id); err != nil { // its certificate, before anything else
				return nil, err
			}
			log.Info("joined the cluster", "node", jv.Node.ID, "cluster", id, "via", cl.Join,
				"metadata_voters", jv.MetadataVoters, "certificate", ja.keyPEM != nil)
			return &joinRecord{NodeID: jv.Node.ID, ClusterID: id, Nodes: jv.Nodes, MetadataVoters: jv.MetadataVoters}, nil
		}
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status < 500 && ae.Code != "no_leader" && ae.Code != "not_leader" {
			return nil, fmt.Errorf("node: the cluster at %s refused to admit this node: %w", cl.Join, err)
		}
		log.Info("cluster not reachable or without a leader yet; retrying the join", "via", cl.Join, "err", err)
		t := clock.Real().NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("node: joining the cluster at %s: %w (last error: %w)", cl.Join, ctx.Err(), err)
		case <-t.C():
		}
	}
}

func readJoinRecord(path string) (*joinRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec joinRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.NodeID == 0 || rec.ClusterID.IsZero() {
		return nil, fmt.Errorf("node: %s is damaged (%v): remove the data directory to join afresh", path, err)
	}
	return &rec, nil
}

// writeJoinRecord writes the record durably: a temporary file, synced,
// renamed over path, and the directory synced.
func writeJoinRecord(path string, rec *joinRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(filepath.Dir(path)); err == nil {
			err = d.Sync()
			_ = d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("node: recording the join in %s: %w", path, err)
	}
	return nil
}

// joinVoters returns the metadata group's voters this node joins, nil for
// an initial member (which bootstraps the group with every peer).
func (cp *clusterParts) joinVoters() []cluster.NodeID {
	if cp.join == nil {
		return nil
	}
	return cp.join.MetadataVoters
}
