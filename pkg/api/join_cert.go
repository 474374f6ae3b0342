package api

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"slices"

	"basalt/pkg/cluster"
)

// A node with Config.Security admits a new node only with a certificate
// request: it checks the request before the join takes a node ID (so that
// a bad one costs none), then signs it with the cluster CA for the ID the
// cluster gave and the hosts of the addresses the node registered, and
// answers the certificate with the CA's. The new node writes them into its
// security directory before anything else (pkg/node, join.go).

// checkJoinCSR refuses a join this node could not answer with a
// certificate: no CSR, a malformed one, or no CA key here.
func (s *Server) checkJoinCSR(req JoinRequest) error {
	sec := s.cfg.Security
	if sec == nil {
		return nil
	}
	if sec.SignNode == nil {
		return fmt.Errorf("%w: this node holds no CA key (ca.key in its security directory), so it cannot sign "+
			"the new node's certificate: join through a node that does (every node basaltd pki init set up)", cluster.ErrInvalid)
	}
	if req.CSR == "" {
		return fmt.Errorf("%w: the join has no certificate request (csr): this cluster runs with TLS and every "+
			"node needs a certificate from its CA", cluster.ErrInvalid)
	}
	if _, err := parseCSR([]byte(req.CSR)); err != nil {
		return fmt.Errorf("%w: csr: %w", cluster.ErrInvalid, err)
	}
	return nil
}

// parseCSR decodes and checks the signature of a PEM certificate request.
func parseCSR(b []byte) (*x509.CertificateRequest, error) {
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("want one PEM block \"CERTIFICATE REQUEST\"")
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("its signature does not verify: %w", err)
	}
	return csr, nil
}

// signJoin puts the new node's certificate into the join's answer.
func (s *Server) signJoin(req JoinRequest, jv *JoinView) error {
	sec := s.cfg.Security
	if sec == nil {
		return nil
	}
	cert, err := sec.SignNode([]byte(req.CSR), jv.Node.ID, joinHosts(req))
	if err != nil {
		return fmt.Errorf("signing the certificate of node %d: %w", jv.Node.ID, err)
	}
	jv.Certificate, jv.CACertificate = string(cert), string(sec.CACert)
	if json.Valid(sec.TokensJSON) {
		jv.Tokens = json.RawMessage(sec.TokensJSON)
	}
	return nil
}

// joinHosts returns the hosts of the addresses a joining node registered:
// the names its certificate must carry for the others to reach it.
func joinHosts(req JoinRequest) []string {
	var hosts []string
	for _, a := range []string{req.APIAddr, req.RaftAddr, req.NVMeAddr} {
		h, _, err := net.SplitHostPort(a)
		if err != nil || h == "" || slices.Contains(hosts, h) {
			continue
		}
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			continue
		}
		hosts = append(hosts, h)
	}
	return hosts
}
