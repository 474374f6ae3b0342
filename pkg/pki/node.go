package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"time"
)

// Node is one node's TLS material: the cluster's CA certificate, the
// node's certificate and its key, checked against each other.
type Node struct {
	id      Identity
	cert    tls.Certificate
	leaf    *x509.Certificate
	pool    *x509.CertPool
	caPEM   []byte
	certPEM []byte
	keyPEM  []byte
}

// LoadNode reads ca.crt, node.crt and node.key from dir (ParseNode checks
// them). MissingFiles says which are absent.
func LoadNode(dir string) (*Node, error) {
	var pems [3][]byte
	for i, name := range []string{CACertFile, NodeCertFile, NodeKeyFile} {
		p := filepath.Join(dir, name)
		read := func(p string) (*pem.Block, error) { return readPEM(p, "CERTIFICATE") }
		if name == NodeKeyFile {
			read = readKeyBlock
		}
		block, err := read(p)
		if err != nil {
			return nil, err
		}
		pems[i] = pem.EncodeToMemory(block)
	}
	n, err := ParseNode(pems[0], pems[1], pems[2])
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	return n, nil
}

// ParseNode checks PEM material and wraps it: the CA certificate must be a
// CA naming a cluster; the node certificate must verify against it now,
// carry one identity of that cluster and match the key.
func ParseNode(caPEM, certPEM, keyPEM []byte) (*Node, error) {
	caBlock, _ := pem.Decode(caPEM)
	if caBlock == nil || caBlock.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: CA certificate: no PEM \"CERTIFICATE\" block")
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	if !ca.IsCA {
		return nil, fmt.Errorf("pki: CA certificate %q is not a CA", ca.Subject.CommonName)
	}
	cluster, err := caCluster(ca)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: node certificate and key: %w", err)
	}
	leaf := pair.Leaf
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("pki: node certificate does not verify against the CA of cluster %s: %w", cluster, err)
	}
	id, err := CertIdentity(leaf)
	if err != nil {
		return nil, err
	}
	if id.Cluster != cluster {
		return nil, fmt.Errorf("%w: node certificate names cluster %s, its CA cluster %s", ErrIdentity, id.Cluster, cluster)
	}
	return &Node{id: id, cert: pair, leaf: leaf, pool: pool,
		caPEM: pem.EncodeToMemory(caBlock), certPEM: certPEM, keyPEM: keyPEM}, nil
}

// NewNode draws a key for id and issues its certificate (Issue), in memory;
// Save writes it.
func (ca *CA) NewNode(id Identity, hosts []string) (*Node, error) {
	keyPEM, csrPEM, err := NewKeyAndCSR()
	if err != nil {
		return nil, err
	}
	certPEM, err := ca.SignCSR(csrPEM, id, hosts)
	if err != nil {
		return nil, err
	}
	return ParseNode(ca.certPEM, certPEM, keyPEM)
}

// InitNode gives a node its material in dir: a fresh key, a certificate for
// id and hosts signed by ca, and the CA certificate (ca.crt, node.crt,
// node.key; not ca.key: CA.Save writes that).
func InitNode(dir string, ca *CA, id Identity, hosts []string) error {
	n, err := ca.NewNode(id, hosts)
	if err != nil {
		return err
	}
	return n.Save(dir)
}

// Save writes ca.crt, node.crt (0644) and node.key (0600) into dir,
// creating it 0700, each atomically.
func (n *Node) Save(dir string) error {
	if err := writeFiles(dir, []file{
		{NodeKeyFile, n.keyPEM, 0o600},
		{NodeCertFile, n.certPEM, 0o644},
		{CACertFile, n.caPEM, 0o644},
	}); err != nil {
		return fmt.Errorf("pki: save node %s: %w", n.id, err)
	}
	return nil
}

// Identity is the identity the node's certificate asserts.
func (n *Node) Identity() Identity { return n.id }

// Certificate is the node's certificate.
func (n *Node) Certificate() *x509.Certificate { return n.leaf }

// NotAfter is when the node's certificate expires.
func (n *Node) NotAfter() time.Time { return n.leaf.NotAfter }

// CAPool is a pool holding the cluster's CA certificate alone.
func (n *Node) CAPool() *x509.CertPool { return n.pool.Clone() }

// ServerTLS is a TLS 1.3 server configuration presenting the node's
// certificate. With requireClientCert, a client must present a certificate
// that verifies against the CA; without, a client may present none, but
// one it presents must verify. A client certificate must name this
// cluster. Which node the client is, the caller checks (VerifyPeer).
func (n *Node) ServerTLS(requireClientCert bool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if requireClientCert {
		auth = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{n.cert},
		ClientCAs:    n.pool.Clone(),
		ClientAuth:   auth,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 && !requireClientCert {
				return nil
			}
			return n.VerifyPeer(cs, 0)
		},
	}
}

// ClientTLS is a TLS 1.3 client configuration presenting the node's
// certificate and verifying the server's chain against the CA, with the
// server name ServerName(cluster) (any node of the cluster, by whatever
// address it was reached), and that the server's identity names this
// cluster. Which node the server is, the caller checks (VerifyPeer).
func (n *Node) ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		MaxVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{n.cert},
		RootCAs:          n.pool.Clone(),
		ServerName:       ServerName(n.id.Cluster),
		VerifyConnection: func(cs tls.ConnectionState) error { return n.VerifyPeer(cs, 0) },
	}
}

// VerifyPeer checks a connection's verified peer names this node's cluster
// and, when node is non-zero, that node.
func (n *Node) VerifyPeer(cs tls.ConnectionState, node uint64) error {
	id, err := PeerIdentity(cs)
	if err != nil {
		return err
	}
	if id.Cluster != n.id.Cluster {
		return fmt.Errorf("%w: peer %s is of cluster %s, not %s", ErrForeign, id, id.Cluster, n.id.Cluster)
	}
	if node != 0 && id.Node != node {
		return fmt.Errorf("%w: peer certificate names node %d, the peer claims node %d", ErrForeign, id.Node, node)
	}
	return nil
}

// PeerIdentity is the identity of a connection's peer, from the leaf of its
// first verified chain; ErrNoChain if nothing verified one, ErrForeign if
// the chain's root names another cluster than the leaf, ErrIdentity if the
// leaf carries no identity.
func PeerIdentity(cs tls.ConnectionState) (Identity, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Identity{}, ErrNoChain
	}
	chain := cs.VerifiedChains[0]
	id, err := CertIdentity(chain[0])
	if err != nil {
		return Identity{}, err
	}
	root, err := caCluster(chain[len(chain)-1])
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrForeign, err)
	}
	if root != id.Cluster {
		return Identity{}, fmt.Errorf("%w: peer %s is signed by the CA of cluster %s", ErrForeign, id, root)
	}
	return id, nil
}
