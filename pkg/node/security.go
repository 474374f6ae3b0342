package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"basalt/pkg/config"
	"basalt/pkg/identity"
	"basalt/pkg/pki"
	"basalt/replication"
)

// A cluster node authenticates to its peers with the certificate in its
// security directory ([security] dir, pkg/pki): the Raft transport is
// mutual TLS, and a peer whose certificate is not of this cluster's CA, or
// names another cluster or another node than the one it claims, is refused
// (replication, "Peer authentication"). The certificate must name this
// node's ID and its cluster's UUID (the identity stamp, identity.go): a
// node whose material is missing or names another node or cluster refuses
// to start. [security] insecure = true runs the transport on plain TCP.

// ErrNoSecurity: a cluster node without valid TLS material, and not
// configured insecure.
var ErrNoSecurity = errors.New("node: no valid TLS material for the Raft transport")

// pkiInitCommand is the command that creates a security directory.
const pkiInitCommand = "basaltd pki init"

// loadSecurity loads the node's TLS material from [security] dir; nil
// without error when [security] insecure is set.
func loadSecurity(cfg *config.Config, log *slog.Logger) (*pki.Node, error) {
	sec := cfg.Security
	if sec.Insecure {
		log.Warn("security.insecure: the Raft transport is plain TCP and authenticates no peer")
		return nil, nil
	}
	if missing := pki.MissingFiles(sec.Dir); len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing %s; create the cluster's CA and this node's certificate with `%s` "+
			"(or set [security] insecure = true, for tests only)", ErrNoSecurity, strings.Join(missing, ", "), pkiInitCommand)
	}
	n, err := pki.LoadNode(sec.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w; recreate it with `%s`", ErrNoSecurity, err, pkiInitCommand)
	}
	id := n.Identity()
	log.Info("raft transport: mutual TLS", "dir", sec.Dir, "identity", id.String(), "not_after", n.NotAfter())
	return n, nil
}

// checkSecurityIdentity checks the certificate names this node and the
// cluster it belongs to.
func checkSecurityIdentity(n *pki.Node, nodeID uint64, clusterID identity.ClusterUUID, dir string) error {
	if n == nil {
		return nil
	}
	id := n.Identity()
	if id.Cluster != clusterID.String() {
		return fmt.Errorf("%w: the certificate in %s is of cluster %s, this node is of cluster %s "+
			"(cluster.initial_cluster_id, or its identity stamp); give it material of its cluster with `%s`",
			ErrNoSecurity, dir, id.Cluster, clusterID, pkiInitCommand)
	}
	if id.Node != nodeID {
		return fmt.Errorf("%w: the certificate in %s names node %d, this node is node %d; "+
			"give it a certificate for node %d with `%s`", ErrNoSecurity, dir, id.Node, nodeID, nodeID, pkiInitCommand)
	}
	return nil
}

// raftTLS is the Raft transport's mutual TLS: client certificates
// required, and a peer must be the node it claims (or was dialed as).
func raftTLS(n *pki.Node) *replication.TLSConfig {
	if n == nil {
		return nil
	}
	return &replication.TLSConfig{Server: n.ServerTLS(true), Client: n.ClientTLS(),
		VerifyPeer: func(cs tls.ConnectionState, claimed replication.NodeID) error {
			return n.VerifyPeer(cs, uint64(claimed))
		}}
}
