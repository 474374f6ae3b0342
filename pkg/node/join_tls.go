package node

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"basalt/pkg/api"
	"basalt/pkg/auth"
	"basalt/pkg/config"
	"basalt/pkg/identity"
	"basalt/pkg/pki"
)

// A joining node of a secure cluster (no security.insecure) is given two
// things beforehand: the cluster CA's certificate, as ca.crt in its
// security directory (copied from any node), and an admin token, in the
// file security.join_token_file or the environment variable
// BASALT_JOIN_TOKEN. It reaches the member at cluster.join over HTTPS,
// verifying it against that CA, authenticates with the token, and sends a
// certificate request for a key it draws (pki.NewKeyAndCSR). The member
// signs it for the ID the cluster gives, and answers it with the CA's
// certificate and its tokens file; the new node writes node.key, node.crt,
// ca.crt and (if it has none) tokens.json into its security directory
// before it records the join or writes anything else.

// joinAuth is what a joining node asks with: the client, and the key and
// CSR its certificate is asked for with (none when insecure).
type joinAuth struct {
	client         *api.Client
	keyPEM, csrPEM []byte
}

// newJoinAuth reads the CA certificate and the admin token, and draws the
// node's key.
func newJoinAuth(cfg *config.Config) (*joinAuth, error) {
	sc := cfg.Security
	if sc.Insecure {
		return &joinAuth{client: api.NewClient(cfg.Cluster.Join)}, nil
	}
	caPath := filepath.Join(sc.Dir, pki.CACertFile)
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		return nil, fmt.Errorf("node: cluster.join: the cluster's CA certificate: %w (copy ca.crt from any node into %s)",
			err, sc.Dir)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("node: cluster.join: %s holds no PEM certificate", caPath)
	}
	token, err := joinToken(sc)
	if err != nil {
		return nil, err
	}
	keyPEM, csrPEM, err := pki.NewKeyAndCSR()
	if err != nil {
		return nil, fmt.Errorf("node: cluster.join: %w", err)
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
	return &joinAuth{client: api.NewTLSClient(cfg.Cluster.Join, tlsCfg, token), keyPEM: keyPEM, csrPEM: csrPEM}, nil
}

// joinToken returns the admin token: $BASALT_JOIN_TOKEN, else the
// content of security.join_token_file.
func joinToken(sc config.Security) (string, error) {
	if t := strings.TrimSpace(os.Getenv(config.EnvJoinToken)); t != "" {
		return t, nil
	}
	if sc.JoinTokenFile == "" {
		return "", fmt.Errorf("node: cluster.join: no admin token to join with: set security.join_token_file " +
			"(a file holding the token) or $" + config.EnvJoinToken)
	}
	b, err := os.ReadFile(sc.JoinTokenFile)
	if err != nil {
		return "", fmt.Errorf("node: security.join_token_file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if !strings.HasPrefix(t, auth.TokenPrefix) {
		return "", fmt.Errorf("node: security.join_token_file %s: want a token (%s...)", sc.JoinTokenFile, auth.TokenPrefix)
	}
	return t, nil
}

// save checks the certificate the cluster answered and
// writes it, the key and the CA certificate (and the tokens file if the
// directory has none) into the security directory.
func (ja *joinAuth) save(cfg *config.Config, jv api.JoinView, clusterID identity.ClusterUUID) error {
	if ja.keyPEM == nil {
		return nil
	}
	dir := cfg.Security.Dir
	n, err := pki.ParseNode([]byte(jv.CACertificate), []byte(jv.Certificate), ja.keyPEM)
	if err != nil {
		return fmt.Errorf("node: the certificate the cluster answered the join with: %w", err)
	}
	if id := n.Identity(); id.Node != uint64(jv.Node.ID) || id.Cluster != clusterID.String() {
		return fmt.Errorf("node: the cluster answered the join as node %d of %s with a certificate for %s",
			jv.Node.ID, clusterID, id)
	}
	if err := n.Save(dir); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	tokens := filepath.Join(dir, auth.TokensFile)
	if _, err := os.Stat(tokens); os.IsNotExist(err) && len(jv.Tokens) > 0 {
		if _, err := auth.ParseTokens(jv.Tokens); err != nil {
			return fmt.Errorf("node: the tokens file the cluster answered the join with: %w", err)
		}
		if err := auth.WriteFile(tokens, jv.Tokens); err != nil {
			return err
		}
	}
	return nil
}

// csr is the CSR a join request carries ("" when insecure).
func (ja *joinAuth) csr() string { return string(ja.csrPEM) }
