package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"basalt/pkg/api"
	"basalt/pkg/auth"
	"basalt/pkg/cluster"
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
// to start.
//
// The same certificate makes the API HTTPS and lets the other nodes know
// this one on their node-only routes; the tokens file (pkg/auth) says
// which bearer tokens the API accepts; the CA key, which the nodes basaltd
// pki init set up hold, signs joining nodes' certificates (join_tls.go).
// [security] insecure = true runs the transport on plain TCP and the API
// on plain HTTP without tokens.

// ErrNoSecurity: a cluster node without valid TLS material, and not
// configured insecure.
var ErrNoSecurity = errors.New("node: no valid TLS material for the Raft transport and the API")

// pkiInitCommand is the command that creates a security directory.
const pkiInitCommand = "basaltd pki init"

// nodeSecurity is what a secure node loaded from its security directory.
type nodeSecurity struct {
	dir    string
	node   *pki.Node
	tokens *auth.Tokens
	// tokensJSON is tokens.json as read, which a join's answer carries
	// (hashes only: nothing in it is a secret).
	tokensJSON []byte
	// caPEM is ca.crt, which a join's answer carries.
	caPEM []byte
	// ca is the cluster CA with its key; nil on a node without ca.key.
	ca *pki.CA
}

// loadSecurity loads the node's TLS material and API tokens from
// [security] dir; nil without error when [security] insecure is set.
func loadSecurity(cfg *config.Config, log *slog.Logger) (*nodeSecurity, error) {
	sc := cfg.Security
	if sc.Insecure {
		log.Warn("security.insecure: the Raft transport is plain TCP and authenticates no peer; " +
			"the API is plain HTTP and answers anyone, without a token")
		return nil, nil
	}
	if missing := pki.MissingFiles(sc.Dir); len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing %s; create the cluster's CA and this node's certificate with `%s` "+
			"(or set [security] insecure = true, for tests only)", ErrNoSecurity, strings.Join(missing, ", "), pkiInitCommand)
	}
	n, err := pki.LoadNode(sc.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w; recreate it with `%s`", ErrNoSecurity, err, pkiInitCommand)
	}
	s := &nodeSecurity{dir: sc.Dir, node: n}
	if s.caPEM, err = os.ReadFile(filepath.Join(sc.Dir, pki.CACertFile)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSecurity, err)
	}
	if s.tokensJSON, err = os.ReadFile(filepath.Join(sc.Dir, auth.TokensFile)); err != nil {
		return nil, fmt.Errorf("%w: the API's tokens: %w (`%s` writes %s)", ErrNoSecurity, err, pkiInitCommand, auth.TokensFile)
	}
	if s.tokens, err = auth.ParseTokens(s.tokensJSON); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoSecurity, filepath.Join(sc.Dir, auth.TokensFile), err)
	}
	switch _, err := os.Stat(filepath.Join(sc.Dir, pki.CAKeyFile)); {
	case err == nil:
		if s.ca, err = pki.LoadCA(sc.Dir); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoSecurity, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %w", ErrNoSecurity, err)
	}
	log.Info("security: mutual TLS between nodes, HTTPS API with tokens", "dir", sc.Dir, "identity", n.Identity().String(),
		"not_after", n.NotAfter(), "tokens", s.tokens.Len(), "signs_joins", s.ca != nil)
	return s, nil
}

// pki returns the node's certificate; nil when insecure.
func (s *nodeSecurity) pki() *pki.Node {
	if s == nil {
		return nil
	}
	return s.node
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

// client returns the client this node calls the others' APIs with: HTTPS
// with its node certificate (the node-only routes), or plain HTTP when
// insecure.
func (s *nodeSecurity) client() *api.Client {
	if s == nil {
		return api.NewClient("")
	}
	return api.NewTLSClient("", s.node.ClientTLS(), "")
}

// listen wraps the API's listener in TLS 1.3 with the node certificate;
// a client certificate is verified against the cluster CA when given.
func (s *nodeSecurity) listen(ln net.Listener) net.Listener {
	if s == nil {
		return ln
	}
	return tls.NewListener(ln, s.node.ServerTLS(false))
}

// api returns the API's Config.Security; nil when insecure.
func (s *nodeSecurity) api(sc config.Security) *api.Security {
	if s == nil {
		return nil
	}
	as := &api.Security{Tokens: s.tokens, MetricsPublic: sc.MetricsPublic, CACert: s.caPEM, TokensJSON: s.tokensJSON,
		PeerNode: func(cs *tls.ConnectionState) (cluster.NodeID, error) {
			if err := s.node.VerifyPeer(*cs, 0); err != nil {
				return 0, err
			}
			id, err := pki.PeerIdentity(*cs)
			return cluster.NodeID(id.Node), err
		}}
	if ca := s.ca; ca != nil {
		as.SignNode = func(csrPEM []byte, id cluster.NodeID, hosts []string) ([]byte, error) {
			return ca.SignCSR(csrPEM, pki.Identity{Cluster: ca.Cluster(), Node: uint64(id)}, hosts)
		}
	}
	return as
}
