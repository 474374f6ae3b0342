package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"basalt/pkg/clock"
)

// Validity periods and clock-skew allowance (package doc, "Certificates").
const (
	caValidity   = 20 * 365 * 24 * time.Hour
	nodeValidity = 10 * 365 * 24 * time.Hour
	skew         = time.Hour
	organization = "basalt"
)

// File names inside a security directory (package doc).
const (
	CACertFile   = "ca.crt"
	CAKeyFile    = "ca.key"
	NodeCertFile = "node.crt"
	NodeKeyFile  = "node.key"
)

// ErrCSR: a certificate signing request is malformed or its signature does
// not verify.
var ErrCSR = errors.New("pki: bad certificate signing request")

// CA is a cluster's certificate authority: its certificate and key.
type CA struct {
	cluster string
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

// NewCA creates a CA for the cluster (canonical UUID text): a fresh ECDSA
// P-256 key and a self-signed certificate whose subject and URI SAN name
// the cluster.
func NewCA(cluster string) (*CA, error) {
	if err := validCluster(cluster); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := clock.Real().Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "basalt cluster " + cluster, Organization: []string{organization}},
		NotBefore:             now.Add(-skew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{caURI(cluster)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	return newCA(der, key)
}

// newCA wraps a parsed CA certificate (DER) and its key, checking they
// match and the certificate names a cluster.
func newCA(der []byte, key crypto.Signer) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: certificate %q is not a CA", cert.Subject.CommonName)
	}
	cluster, err := caCluster(cert)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("pki: CA key does not match the CA certificate of cluster %s", cluster)
	}
	return &CA{cluster: cluster, cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads ca.crt and ca.key from dir.
func LoadCA(dir string) (*CA, error) {
	der, err := readCert(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	key, err := readKey(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	return newCA(der, key)
}

// Save writes ca.crt (0644) and ca.key (0600) into dir, creating it 0700,
// each atomically; it replaces files of those names.
func (ca *CA) Save(dir string) error {
	keyPEM, err := encodeKey(ca.key)
	if err != nil {
		return err
	}
	if err := writeFiles(dir, []file{
		{CAKeyFile, keyPEM, 0o600},
		{CACertFile, ca.certPEM, 0o644},
	}); err != nil {
		return fmt.Errorf("pki: save CA: %w", err)
	}
	return nil
}

// Cluster is the UUID text the CA names.
func (ca *CA) Cluster() string { return ca.cluster }

// Certificate is the CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// CertPEM is the CA certificate in PEM, as ca.crt holds it.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Issue signs a node certificate for id (which must name the CA's cluster)
// over pub, with hosts as its IP (those that parse as one) and DNS SANs
// beside ServerName(cluster). It returns the certificate in PEM.
func (ca *CA) Issue(id Identity, pub crypto.PublicKey, hosts []string) (certPEM []byte, err error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	if id.Cluster != ca.cluster {
		return nil, fmt.Errorf("%w: identity %s is not of the CA's cluster %s", ErrIdentity, id, ca.cluster)
	}
	ips, names, err := splitHosts(hosts)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := clock.Real().Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{CommonName: "basalt node " + strconv.FormatUint(id.Node, 10),
			Organization: []string{organization}, OrganizationalUnit: []string{id.Cluster}},
		NotBefore:   now.Add(-skew),
		NotAfter:    now.Add(nodeValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{id.URI()},
		DNSNames:    append([]string{ServerName(id.Cluster)}, names...),
		IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("pki: issue %s: %w", id, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// SignCSR verifies a PEM certificate signing request's signature and issues
// a certificate over its public key for id and hosts (Issue). The identity
// and host names the CSR itself asks for are ignored: the CA decides them.
func (ca *CA) SignCSR(csrPEM []byte, id Identity, hosts []string) ([]byte, error) {
	block, rest := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: no PEM \"CERTIFICATE REQUEST\" block", ErrCSR)
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, fmt.Errorf("%w: data after the PEM block", ErrCSR)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCSR, err)
	}
	return ca.Issue(id, csr.PublicKey, hosts)
}

// NewKeyAndCSR draws a node key (ECDSA P-256) and a CSR over it; it returns
// the key in PEM "PRIVATE KEY" (PKCS #8) and the CSR in PEM "CERTIFICATE
// REQUEST". The CSR names no identity: the signing CA gives it.
func NewKeyAndCSR() (keyPEM, csrPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: node key: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader,
		&x509.CertificateRequest{Subject: pkix.Name{CommonName: "basalt node", Organization: []string{organization}}}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CSR: %w", err)
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// splitHosts sorts hosts into IP addresses and DNS names, refusing empty or
// malformed names.
func splitHosts(hosts []string) (ips []net.IP, names []string, err error) {
	for _, h := range hosts {
		if ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if !validDNSName(h) {
			return nil, nil, fmt.Errorf("pki: host %q is neither an IP address nor a DNS name", h)
		}
		names = append(names, strings.ToLower(h))
	}
	return ips, names, nil
}

// validDNSName accepts letters, digits and hyphens in dot-separated labels
// of 1 to 63 bytes, 253 bytes in all; a label neither starts nor ends with
// a hyphen.
func validDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// newSerial draws a 128-bit random serial number.
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return n, nil
}

// publicKeysEqual compares two public keys of any supported type.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}
