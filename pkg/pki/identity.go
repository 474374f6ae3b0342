package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"basalt/pkg/identity"
)

// Errors of identities and certificates.
var (
	// ErrIdentity: an identity is malformed (cluster not a canonical UUID,
	// node ID zero) or a certificate carries none, or more than one.
	ErrIdentity = errors.New("pki: malformed or missing identity")
	// ErrNoChain: a TLS connection has no verified certificate chain (the
	// peer sent no certificate, or nothing verified it).
	ErrNoChain = errors.New("pki: no verified peer certificate")
	// ErrForeign: a verified peer names another cluster, or another node
	// than the one expected.
	ErrForeign = errors.New("pki: peer identity not accepted")
)

// uriScheme and uriHost begin every identity URI: basalt://cluster/...
const (
	uriScheme = "basalt"
	uriHost   = "cluster"
)

// Identity is what a node certificate asserts: the cluster (canonical UUID
// text, pkg/identity) and the node ID within it.
type Identity struct {
	Cluster string // UUID text, canonical form
	Node    uint64 // node ID, non-zero
}

// String is the identity URI, basalt://cluster/<uuid>/node/<id>.
func (id Identity) String() string { return id.URI().String() }

// URI is the identity's URI SAN.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: uriScheme, Host: uriHost,
		Path: "/" + id.Cluster + "/node/" + strconv.FormatUint(id.Node, 10)}
}

// Validate checks the cluster is a canonical, non-zero UUID and the node ID
// non-zero.
func (id Identity) Validate() error {
	if err := validCluster(id.Cluster); err != nil {
		return err
	}
	if id.Node == 0 {
		return fmt.Errorf("%w: node ID 0", ErrIdentity)
	}
	return nil
}

// validCluster checks s is a canonical cluster UUID.
func validCluster(s string) error {
	u, err := identity.ParseClusterUUID(s)
	if err != nil {
		return fmt.Errorf("%w: cluster %q: %w", ErrIdentity, s, err)
	}
	if u.String() != s {
		return fmt.Errorf("%w: cluster %q is not in canonical form (%s)", ErrIdentity, s, u)
	}
	return nil
}

// ServerName is the DNS SAN every node certificate of the cluster carries,
// and the server name a node's client configuration verifies:
// node.<cluster-uuid>.basalt. A UUID is a valid DNS label.
func ServerName(cluster string) string { return "node." + cluster + ".basalt" }

// caURI is the CA certificate's URI SAN, basalt://cluster/<uuid>.
func caURI(cluster string) *url.URL {
	return &url.URL{Scheme: uriScheme, Host: uriHost, Path: "/" + cluster}
}

// parseIdentityURI parses basalt://cluster/<uuid>/node/<id>; ok is false
// for a URI of another scheme (not an identity at all).
func parseIdentityURI(u *url.URL) (id Identity, ok bool, err error) {
	if u.Scheme != uriScheme {
		return Identity{}, false, nil
	}
	if u.Host != uriHost || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return Identity{}, true, fmt.Errorf("%w: URI %q", ErrIdentity, u)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 3 || parts[1] != "node" {
		return Identity{}, true, fmt.Errorf("%w: URI %q", ErrIdentity, u)
	}
	node, err := parseNodeID(parts[2])
	if err != nil {
		return Identity{}, true, fmt.Errorf("%w: URI %q: %w", ErrIdentity, u, err)
	}
	id = Identity{Cluster: parts[0], Node: node}
	if err := id.Validate(); err != nil {
		return Identity{}, true, err
	}
	return id, true, nil
}

// parseNodeID parses a decimal, non-zero node ID without sign or leading
// zeros.
func parseNodeID(s string) (uint64, error) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, fmt.Errorf("node ID %q", s)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("node ID %q: %w", s, err)
	}
	return n, nil
}

// CertIdentity is the identity a node certificate's URI SAN asserts. It
// checks nothing about who signed the certificate: PeerIdentity is the
// check for a peer.
func CertIdentity(cert *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range cert.URIs {
		id, ok, err := parseIdentityURI(u)
		if err != nil {
			return Identity{}, err
		}
		if ok {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		return Identity{}, fmt.Errorf("%w: certificate %q carries %d basalt identities, want 1",
			ErrIdentity, cert.Subject.CommonName, len(found))
	}
	return found[0], nil
}

// caCluster is the cluster a CA certificate's URI SAN names.
func caCluster(cert *x509.Certificate) (string, error) {
	for _, u := range cert.URIs {
		if u.Scheme != uriScheme {
			continue
		}
		c := strings.TrimPrefix(u.Path, "/")
		if u.Host != uriHost || strings.Contains(c, "/") {
			return "", fmt.Errorf("%w: CA URI %q", ErrIdentity, u)
		}
		if err := validCluster(c); err != nil {
			return "", err
		}
		return c, nil
	}
	return "", fmt.Errorf("%w: CA certificate %q names no cluster", ErrIdentity, cert.Subject.CommonName)
}
