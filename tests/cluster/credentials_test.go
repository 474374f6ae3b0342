package cluster_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"basalt/pkg/api"
	"basalt/pkg/auth"
)

// The test clusters run with security on, set up as an operator would
// (harness_test.go, security):
// basaltd pki init writes a security directory per node (the CA, its
// certificate, the tokens) and the admin and read-only credentials files,
// and every client here reads those.

// security is what basaltd pki init wrote for a test cluster.
type security struct {
	dir           string
	caPEM         []byte
	admin, reader auth.Credentials
}

// initSecurity runs basaltd pki init for the cluster's nodes.
func (tc *testCluster) initSecurity() {
	tc.t.Helper()
	tc.secDir = filepath.Join(tc.dir, "security")
	var ids []string
	for i := 1; i <= tc.o.nodes; i++ {
		ids = append(ids, fmt.Sprint(i))
	}
	out, err := exec.Command(basaltd, "pki", "init", "--dir", tc.secDir, "--cluster-id", tc.clusterID.String(),
		"--nodes", strings.Join(ids, ","), "--hosts", "127.0.0.1,localhost").CombinedOutput()
	if err != nil {
		tc.t.Fatalf("basaltd pki init: %v\n%s", err, out)
	}
	s := &security{dir: tc.secDir}
	if s.caPEM, err = os.ReadFile(filepath.Join(tc.secDir, "ca.crt")); err != nil {
		tc.t.Fatal(err)
	}
	if s.admin, err = auth.ReadCredentials(filepath.Join(tc.secDir, "admin.json")); err != nil {
		tc.t.Fatal(err)
	}
	if s.reader, err = auth.ReadCredentials(filepath.Join(tc.secDir, "reader.json")); err != nil {
		tc.t.Fatal(err)
	}
	tc.sec = s
}

// copySecurity copies the directory pki init wrote for node id into dir.
func (tc *testCluster) copySecurity(id int, dir string) {
	tc.t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tc.t.Fatal(err)
	}
	from := filepath.Join(tc.secDir, fmt.Sprintf("node%d", id))
	ents, err := os.ReadDir(from)
	if err != nil {
		tc.t.Fatalf("no security directory for node%d from basaltd pki init: %v", id, err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err == nil {
			var st os.FileInfo
			if st, err = e.Info(); err == nil {
				err = os.WriteFile(filepath.Join(dir, e.Name()), b, st.Mode().Perm())
			}
		}
		if err != nil {
			tc.t.Fatal(err)
		}
	}
}

// userTLS verifies the nodes against the cluster CA and presents no
// certificate, as basaltctl does.
func (s *security) userTLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.caPEM)
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
}

// client is a client of the API at addr with creds' token.
func (s *security) client(addr string, creds auth.Credentials) *api.Client {
	return api.NewTLSClient(addr, s.userTLS(), creds.Token)
}

// get GETs an API path of addr with the admin token.
func (s *security) get(addr, path string) (*http.Response, error) {
	c := s.client(addr, s.admin)
	req, err := http.NewRequest(http.MethodGet, c.Base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.admin.Token)
	return c.HTTP.Do(req)
}

// joinSecurity gives a joining node what an operator gives it: the
// cluster's ca.crt in its security directory (the default,
// <data_dir>/security) and a file with the admin token, whose path it
// returns.
func (tc *testCluster) joinSecurity(n *node) string {
	tc.t.Helper()
	dir := filepath.Join(n.dir, "security")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tc.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), tc.sec.caPEM, 0o644); err != nil {
		tc.t.Fatal(err)
	}
	tok := filepath.Join(tc.dir, fmt.Sprintf("node%d-join-token", n.id))
	if err := os.WriteFile(tok, []byte(tc.sec.admin.Token+"\n"), 0o600); err != nil {
		tc.t.Fatal(err)
	}
	return tok
}
