package api_test

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/cluster/clustertest"
	"basalt/pkg/pki"
)

// call sends method path (body) to node 0 of ac with the Authorization
// header auth ("" for none) over tlsCfg, and returns the status, the
// WWW-Authenticate header and the decoded error (if any).
func call(t *testing.T, ac *clustertest.APICluster, tlsCfg *tls.Config, auth, method, path, body string) (
	int, string, api.Error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), method, ac.Nodes[0].Server.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := api.NewTLSClient("", tlsCfg, "").HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e api.Error
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(b, &e); err != nil || e.Message == "" || e.Code == "" {
			t.Fatalf("%s %s: %d with a body that is not a JSON error: %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), e
}

// TestAPIDenials: each way a request can lack what its route needs is
// refused with its status, a JSON error saying what is missing, and (401)
// a Bearer challenge.
func TestAPIDenials(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 1, 3*time.Second)
	sec := ac.Sec
	user := sec.UserTLS()
	nodeTLS := sec.Nodes[0].ClientTLS()
	admin, reader := "Bearer "+sec.AdminToken, "Bearer "+sec.ReaderToken
	unknown := "Bearer basalt_" + strings.Repeat("A", 43)
	for _, c := range []struct {
		name                 string
		tls                  *tls.Config
		auth, method, path   string
		body                 string
		status               int
		code, challenge      string
		wantInMsg, wantInHnt string
	}{
		{"no token", user, "", "GET", "/v1/volumes", "", 401, "unauthenticated", `Bearer realm="basalt"`,
			"needs a token, and the request has none", "BASALT_CREDENTIALS"},
		{"no token on a change", user, "", "POST", "/v1/volumes", `{"name":"a","size":"1MiB"}`, 401, "unauthenticated",
			`Bearer realm="basalt"`, "needs a token", ""},
		{"unknown token", user, unknown, "GET", "/v1/cluster", "", 401, "unauthenticated",
			`Bearer realm="basalt", error="invalid_token"`, "not one this node knows", ""},
		{"not bearer", user, "Basic YWRtaW46eA==", "GET", "/v1/cluster", "", 401, "unauthenticated",
			`Bearer realm="basalt", error="invalid_request"`, "not \"Bearer <token>\"", ""},
		{"read-only on a change", user, reader, "POST", "/v1/volumes", `{"name":"a","size":"1MiB"}`, 403, "forbidden",
			`Bearer realm="basalt", error="insufficient_scope"`, `needs a token of role "admin"; the token "reader" is "read-only"`, "admin.json"},
		{"read-only on a delete", user, reader, "DELETE", "/v1/volumes/a", "", 403, "forbidden",
			`Bearer realm="basalt", error="insufficient_scope"`, `role "admin"`, ""},
		{"read-only on a join", user, reader, "POST", "/v1/nodes/join", `{}`, 403, "forbidden",
			`Bearer realm="basalt", error="insufficient_scope"`, `role "admin"`, ""},
		{"admin token on an internal route", user, admin, "POST", "/v1/internal/commands", `{}`, 403, "forbidden", "",
			"for the cluster's nodes only: it takes a node certificate and refuses tokens", ""},
		{"token with a node certificate on an internal route", nodeTLS, admin, "POST", "/v1/internal/volumes/1/read", `{}`,
			403, "forbidden", "", "refuses tokens", ""},
		{"no certificate on an internal route", user, "", "POST", "/v1/internal/commands", `{}`, 403, "forbidden", "",
			"the client presented none", ""},
		{"no certificate on a peer read", user, "", "POST", "/v1/internal/volumes/1/read", `{}`, 403, "forbidden", "",
			"needs a node certificate", ""},
		{"metrics without a token", user, "", "GET", "/metrics", "", 401, "unauthenticated", `Bearer realm="basalt"`,
			"GET /metrics needs a token", ""},
		{"unknown endpoint without a token", user, "", "GET", "/v2/x", "", 401, "unauthenticated", `Bearer realm="basalt"`, "", ""},
		{"local without anything", user, "", "GET", "/v1/local", "", 401, "unauthenticated", `Bearer realm="basalt"`, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, chal, e := call(t, ac, c.tls, c.auth, c.method, c.path, c.body)
			if status != c.status || e.Code != c.code || chal != c.challenge {
				t.Fatalf("%d %q %q, want %d %q %q: %+v", status, e.Code, chal, c.status, c.code, c.challenge, e)
			}
			if !strings.Contains(e.Message, c.wantInMsg) || !strings.Contains(e.Hint, c.wantInHnt) {
				t.Errorf("error %q (hint %q), want one saying %q (hint %q)", e.Message, e.Hint, c.wantInMsg, c.wantInHnt)
			}
		})
	}
	// What is allowed.
	for _, c := range []struct {
		name               string
		tls                *tls.Config
		auth, method, path string
		body               string
		status             int
	}{
		{"read-only reads", user, reader, "GET", "/v1/volumes", "", 200},
		{"read-only reads metrics", user, reader, "GET", "/metrics", "", 200},
		{"admin changes", user, admin, "POST", "/v1/volumes", `{"name":"a","size":"1MiB"}`, 201},
		{"a node reads local status", nodeTLS, "", "GET", "/v1/local", "", 200},
		{"a user reads local status", user, reader, "GET", "/v1/local", "", 200},
		{"a node forwards a command", nodeTLS, "", "POST", "/v1/internal/commands", `{"op":"delete_volume","volume":"zz"}`, 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			if status, _, e := call(t, ac, c.tls, c.auth, c.method, c.path, c.body); status != c.status {
				t.Fatalf("%d, want %d: %+v", status, c.status, e)
			}
		})
	}
}

// TestAPIRefusesAForeignNodeCertificate: a node certificate of another
// cluster (another CA) fails the TLS handshake, before any route. (Go's
// client does not even send it unprompted: the server names the CAs it
// accepts, and a client without a matching certificate sends none, which
// the node-only routes refuse with a JSON error.)
func TestAPIRefusesAForeignNodeCertificate(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 1, 3*time.Second)
	other := clustertest.NewTestSecurity(t, 1)
	foreign := other.Nodes[0].ClientTLS()
	cert := foreign.Certificates[0]
	foreign.RootCAs, foreign.ServerName, foreign.VerifyConnection = ac.Sec.UserTLS().RootCAs, "", nil
	foreign.Certificates = nil
	foreign.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	req, _ := http.NewRequestWithContext(ctx(t), "POST", ac.Nodes[0].Server.URL+"/v1/internal/commands", strings.NewReader(`{}`))
	resp, err := api.NewTLSClient("", foreign, "").HTTP.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a node certificate of another cluster was accepted: %d", resp.StatusCode)
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("the refusal is not the handshake's: %v", err)
	}
	plain := other.Nodes[0].ClientTLS()
	plain.RootCAs, plain.ServerName, plain.VerifyConnection = ac.Sec.UserTLS().RootCAs, "", nil
	status, _, e := call(t, ac, plain, "", "POST", "/v1/internal/commands", `{}`)
	if status != 403 || !strings.Contains(e.Message, "presented none") {
		t.Errorf("another cluster's node, its certificate not sent: %d %+v", status, e)
	}
}

// TestAPINodeOnlyFromTheClient: the node client (what pkg/node
// forwards with) reaches the node-only route, and a client with a token
// but no certificate does not: errors.Is works with ErrForbidden.
func TestAPINodeOnlyFromTheClient(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 1, 3*time.Second)
	node := api.NewTLSClient(ac.Nodes[0].Server.URL, ac.Sec.Nodes[0].ClientTLS(), "")
	if _, err := node.Command(ctx(t), cluster.Command{Op: cluster.OpDeleteVolume, Volume: "zz"}); !errors.Is(err, cluster.ErrNotFound) {
		t.Errorf("the node's command: %v, want not found", err)
	}
	if _, err := ac.Client(0).Command(ctx(t), cluster.Command{Op: cluster.OpDeleteVolume, Volume: "zz"}); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("an admin's command on the node route: %v, want forbidden", err)
	}
	reader := api.NewTLSClient(ac.Nodes[0].Server.URL, ac.Sec.UserTLS(), ac.Sec.ReaderToken)
	if _, err := reader.CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "a", Size: 1 << 20}); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("a reader's change: %v, want forbidden", err)
	}
	if _, err := api.NewTLSClient(ac.Nodes[0].Server.URL, ac.Sec.UserTLS(), "").Volumes(ctx(t)); !errors.Is(err, api.ErrUnauthenticated) {
		t.Errorf("no token: %v, want unauthenticated", err)
	}
}

// TestMetricsPublic: with MetricsPublic, /metrics needs no token; the
// rest still does.
func TestMetricsPublic(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 1, 3*time.Second)
	sec := ac.Sec.API(1)
	sec.MetricsPublic = true
	srv := httptest.NewServer(api.NewServer(api.Config{Cluster: ac.Nodes[0].Cluster, Metrics: ac.Nodes[0].Metrics.Handler(),
		Security: sec}))
	defer srv.Close()
	for path, want := range map[string]int{"/metrics": 200, "/v1/volumes": 401} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a token: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// TestJoinNeedsACSR: a secure node refuses a join without a certificate
// request, or with a malformed one, before it takes a node ID; with one it
// answers the certificate for the new ID.
func TestJoinNeedsACSR(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 1, 3*time.Second)
	cl := ac.Client(0)
	req := api.JoinRequest{Name: "n2", NVMeAddr: "127.0.0.1:4421", RaftAddr: "127.0.0.1:9521", APIAddr: "127.0.0.1:9421"}
	if _, err := cl.JoinNode(ctx(t), req); !errors.Is(err, cluster.ErrInvalid) || !strings.Contains(err.Error(), "csr") {
		t.Errorf("a join without a CSR: %v", err)
	}
	req.CSR = "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
	if _, err := cl.JoinNode(ctx(t), req); !errors.Is(err, cluster.ErrInvalid) {
		t.Errorf("a join with a bad CSR: %v", err)
	}
	if n := len(ac.Nodes[0].Cluster.Nodes()); n != 1 {
		t.Fatalf("the refused joins took node IDs: %d nodes", n)
	}
	keyPEM, csrPEM, err := pki.NewKeyAndCSR()
	if err != nil {
		t.Fatal(err)
	}
	req.CSR = string(csrPEM)
	jv, err := cl.JoinNode(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	nd, err := pki.ParseNode([]byte(jv.CACertificate), []byte(jv.Certificate), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if id := nd.Identity(); id.Node != uint64(jv.Node.ID) || id.Cluster != ac.Sec.CA.Cluster() {
		t.Errorf("certificate for %s, joined as node %d of %s", id, jv.Node.ID, ac.Sec.CA.Cluster())
	}
}

// TestJoinWithoutCAKey: a node holding no CA key refuses a join before it
// takes a node ID, naming what to do.
func TestJoinWithoutCAKey(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 1, 3*time.Second)
	sec := ac.Sec.API(1)
	sec.SignNode = nil
	srv := httptest.NewUnstartedServer(api.NewServer(api.Config{Cluster: ac.Nodes[0].Cluster, Security: sec}))
	srv.TLS = ac.Sec.Nodes[0].ServerTLS(false)
	srv.StartTLS()
	defer srv.Close()
	_, csrPEM, err := pki.NewKeyAndCSR()
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.NewTLSClient(srv.URL, ac.Sec.UserTLS(), ac.Sec.AdminToken).JoinNode(ctx(t), api.JoinRequest{Name: "n2",
		NVMeAddr: "127.0.0.1:4421", RaftAddr: "127.0.0.1:9521", APIAddr: "127.0.0.1:9421", CSR: string(csrPEM)})
	if !errors.Is(err, cluster.ErrInvalid) || !strings.Contains(err.Error(), "no CA key") {
		t.Errorf("join through a node without the CA key: %v", err)
	}
	if n := len(ac.Nodes[0].Cluster.Nodes()); n != 1 {
		t.Errorf("the refused join took a node ID: %d nodes", n)
	}
}
