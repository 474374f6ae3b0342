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

	"basalt/pkg/api"
	"basalt/pkg/auth"
	"basalt/pkg/cluster"
	"basalt/pkg/config"
	"basalt/pkg/identity"
	"basalt/pkg/pki"
)

// A cluster node's API security ([security], pkg/config): its certificate
// and the cluster CA's (pkg/pki) make the API HTTPS and let the others
// know it, the tokens file (pkg/auth) says which bearer tokens its API
// accepts, and the CA key, which the nodes basaltd pki init set up hold,
// signs joining nodes' certificates. With security.insecure none of this
// is loaded: the API is plain HTTP and answers anyone.

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

// loadSecurity reads the security directory; nil, nil with
// security.insecure.
func loadSecurity(cfg *config.Config, log *slog.Logger) (*nodeSecurity, error) {
	sc := cfg.Security
	if sc.Insecure {
		log.Warn("security.insecure: the API is plain HTTP and answers anyone, without a token")
		return nil, nil
	}
	if missing := pki.MissingFiles(sc.Dir); len(missing) > 0 {
		return nil, fmt.Errorf("node: security directory %s lacks %v: create it with basaltd pki init "+
			"(or set security.insecure = true for a test cluster)", sc.Dir, missing)
	}
	n, err := pki.LoadNode(sc.Dir)
	if err != nil {
		return nil, fmt.Errorf("node: security: %w", err)
	}
	s := &nodeSecurity{dir: sc.Dir, node: n}
	if s.caPEM, err = os.ReadFile(filepath.Join(sc.Dir, pki.CACertFile)); err != nil {
		return nil, fmt.Errorf("node: security: %w", err)
	}
	if s.tokensJSON, err = os.ReadFile(filepath.Join(sc.Dir, auth.TokensFile)); err != nil {
		return nil, fmt.Errorf("node: security: the API's tokens: %w (basaltd pki init writes %s)", err, auth.TokensFile)
	}
	if s.tokens, err = auth.ParseTokens(s.tokensJSON); err != nil {
		return nil, fmt.Errorf("node: security: %s: %w", filepath.Join(sc.Dir, auth.TokensFile), err)
	}
	switch _, err := os.Stat(filepath.Join(sc.Dir, pki.CAKeyFile)); {
	case err == nil:
		if s.ca, err = pki.LoadCA(sc.Dir); err != nil {
			return nil, fmt.Errorf("node: security: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("node: security: %w", err)
	}
	log.Info("security loaded", "dir", sc.Dir, "identity", n.Identity().String(), "tokens", s.tokens.Len(),
		"signs_joins", s.ca != nil, "certificate_expires", n.NotAfter())
	return s, nil
}

// checkIdentity refuses a certificate that names another node or cluster
// than the node's configuration and state (a zero clusterID: state
// without stamps, which only tests make, is not compared).
func (s *nodeSecurity) checkIdentity(id cluster.NodeID, clusterID identity.ClusterUUID) error {
	if s == nil {
		return nil
	}
	got := s.node.Identity()
	if got.Node != uint64(id) || !clusterID.IsZero() && got.Cluster != clusterID.String() {
		return fmt.Errorf("node: the certificate in %s is %s, but this is node %d of cluster %s: "+
			"give each node the directory basaltd pki init wrote for it (node<ID>)", s.dir, got, id, clusterID)
	}
	return nil
}

// client returns the client this node calls the others with: HTTPS with
// its node certificate (the node-only routes), or plain HTTP when insecure.
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
	as := &api.Security{Tokens: s.tokens, MetricsPublic: sc.MetricsPublic, CACert: s.caPEM,
		TokensJSON: s.tokensJSON,
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
