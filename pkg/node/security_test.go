package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"basalt/pkg/api"
	"basalt/pkg/auth"
	"basalt/pkg/config"
	"basalt/pkg/identity"
	"basalt/pkg/pki"
)

// The test nodes run with security on, as basaltd pki init sets it up:
// one CA per cluster UUID, a node certificate for 127.0.0.1, and a tokens
// file accepting testAdminToken and testReaderToken.

var (
	testTokensOnce                  sync.Once
	testAdminToken, testReaderToken string
	testCAs                         sync.Map // cluster UUID text → *pki.CA
)

func testTokens(t *testing.T) (admin, reader string) {
	t.Helper()
	testTokensOnce.Do(func() {
		testAdminToken, _ = auth.NewToken()
		testReaderToken, _ = auth.NewToken()
	})
	if testAdminToken == "" || testReaderToken == "" {
		t.Fatal("drawing the test tokens failed")
	}
	return testAdminToken, testReaderToken
}

func testCA(t *testing.T, c identity.ClusterUUID) *pki.CA {
	t.Helper()
	if ca, ok := testCAs.Load(c.String()); ok {
		return ca.(*pki.CA)
	}
	ca, err := pki.NewCA(c.String())
	if err != nil {
		t.Fatal(err)
	}
	actual, _ := testCAs.LoadOrStore(c.String(), ca)
	return actual.(*pki.CA)
}

// writeTestSecurity fills dir (a node's security directory) for node id of
// cluster c, unless it holds that node's certificate already.
func writeTestSecurity(t *testing.T, dir string, c identity.ClusterUUID, id uint64) {
	t.Helper()
	if n, err := pki.LoadNode(dir); err == nil && n.Identity() == (pki.Identity{Cluster: c.String(), Node: id}) {
		return
	}
	ca := testCA(t, c)
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := pki.InitNode(dir, ca, pki.Identity{Cluster: c.String(), Node: id}, []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	admin, reader := testTokens(t)
	b, err := auth.File{Tokens: []auth.Entry{{Name: "admin", Role: auth.RoleAdmin, SHA256: auth.Hash(admin)},
		{Name: "reader", Role: auth.RoleReadOnly, SHA256: auth.Hash(reader)}}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteFile(filepath.Join(dir, auth.TokensFile), b); err != nil {
		t.Fatal(err)
	}
}

// testClientTLS verifies a node of cfg's cluster.
func testClientTLS(t *testing.T, cfg *config.Config) *tls.Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.Security.Dir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatal("no CA certificate")
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
}

// adminClient is a client of the API at addr with the admin token.
func adminClient(t *testing.T, cfg *config.Config, addr string) *api.Client {
	t.Helper()
	admin, _ := testTokens(t)
	return api.NewTLSClient(addr, testClientTLS(t, cfg), admin)
}

// adminGet GETs an API URL path with the admin token.
func adminGet(t *testing.T, cfg *config.Config, addr, path string) (*http.Response, error) {
	t.Helper()
	c := adminClient(t, cfg, addr)
	req, err := http.NewRequest(http.MethodGet, c.Base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	return c.HTTP.Do(req)
}

// writeSecurity gives dir the material of node id of cluster c (its CA's
// and the tests' tokens too).
func writeSecurity(t *testing.T, dir string, c identity.ClusterUUID, id uint64) {
	t.Helper()
	writeTestSecurity(t, dir, c, id)
}

// TestNodeRefusesWithoutItsTLSMaterial: a cluster node whose security
// directory is empty, holds another cluster's certificate or another
// node's, refuses to start, saying what is wrong and how to make it right;
// with [security] insecure it starts without.
func TestNodeRefusesWithoutItsTLSMaterial(t *testing.T) {
	dir := t.TempDir()
	cfg := oneNodeConfig(t, dir, false)
	sec := cfg.Security.Dir
	if sec != filepath.Join(dir, "security") {
		t.Fatalf("security dir %s", sec)
	}
	refuse := func(want ...string) {
		t.Helper()
		n, err := Start(cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			n.Close()
			t.Fatal("started")
		}
		if !errors.Is(err, ErrNoSecurity) {
			t.Fatalf("refusal %v, want ErrNoSecurity", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q lacks %q", err, w)
			}
		}
	}
	if err := os.RemoveAll(sec); err != nil {
		t.Fatal(err)
	}
	refuse(filepath.Join(sec, "ca.crt"), filepath.Join(sec, "node.crt"), filepath.Join(sec, "node.key"), "basaltd pki init")
	other := identity.NewClusterUUID()
	writeSecurity(t, sec, other, 1)
	refuse("of cluster "+other.String(), "this node is of cluster "+testClusterID.String())
	writeSecurity(t, sec, testClusterID, 2)
	refuse("names node 2, this node is node 1")
	if err := os.Chmod(filepath.Join(sec, "node.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	refuse("lets others read the key")

	if err := os.RemoveAll(sec); err != nil {
		t.Fatal(err)
	}
	cfg.Security.Insecure = true // the case under test: insecure starts without material
	n, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
}
