package clustertest

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"basalt/pkg/api"
	"basalt/pkg/auth"
	"basalt/pkg/cluster"
	"basalt/pkg/identity"
	"basalt/pkg/pki"
)

// TestSecurity is a test cluster's security as basaltd pki init makes it:
// a CA, a certificate per node, an admin and a read-only token.
type TestSecurity struct {
	CA    *pki.CA
	Nodes []*pki.Node
	// AdminToken and ReaderToken are the tokens; Tokens accepts both.
	AdminToken, ReaderToken string
	Tokens                  *auth.Tokens
	// CAFile is the CA certificate written to a file (for basaltctl --ca).
	CAFile string
}

// NewTestSecurity makes the security of an n-node cluster.
func NewTestSecurity(t testing.TB, n int) *TestSecurity {
	t.Helper()
	c := identity.NewClusterUUID().String()
	ca, err := pki.NewCA(c)
	if err != nil {
		t.Fatal(err)
	}
	s := &TestSecurity{CA: ca}
	for i := 1; i <= n; i++ {
		nd, err := ca.NewNode(pki.Identity{Cluster: c, Node: uint64(i)}, []string{"127.0.0.1", "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		s.Nodes = append(s.Nodes, nd)
	}
	if s.AdminToken, err = auth.NewToken(); err != nil {
		t.Fatal(err)
	}
	if s.ReaderToken, err = auth.NewToken(); err != nil {
		t.Fatal(err)
	}
	b, err := auth.File{Tokens: []auth.Entry{{Name: "admin", Role: auth.RoleAdmin, SHA256: auth.Hash(s.AdminToken)},
		{Name: "reader", Role: auth.RoleReadOnly, SHA256: auth.Hash(s.ReaderToken)}}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if s.Tokens, err = auth.ParseTokens(b); err != nil {
		t.Fatal(err)
	}
	s.CAFile = filepath.Join(t.TempDir(), pki.CACertFile)
	if err := os.WriteFile(s.CAFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// UserTLS is what a user's client (basaltctl) uses: the CA, no certificate.
func (s *TestSecurity) UserTLS() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.Nodes[0].CAPool()}
}

// API is node id's api.Security, as pkg/node builds it.
func (s *TestSecurity) API(id cluster.NodeID) *api.Security {
	nd := s.Nodes[id-1]
	return &api.Security{Tokens: s.Tokens, CACert: s.CA.CertPEM(),
		PeerNode: func(cs *tls.ConnectionState) (cluster.NodeID, error) {
			if err := nd.VerifyPeer(*cs, 0); err != nil {
				return 0, err
			}
			pid, err := pki.PeerIdentity(*cs)
			return cluster.NodeID(pid.Node), err
		},
		SignNode: func(csr []byte, id cluster.NodeID, hosts []string) ([]byte, error) {
			return s.CA.SignCSR(csr, pki.Identity{Cluster: s.CA.Cluster(), Node: uint64(id)}, hosts)
		}}
}
