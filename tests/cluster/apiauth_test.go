package cluster_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
)

// TestAPIRefusesWithoutCredentials: real basaltd processes deny API calls
// without a token, a read-only token's change, and the node-only routes
// (a raw register_node command among them) to a client without a node
// certificate, each with a JSON error saying what is missing; a change
// sent to a node that does not lead the metadata is forwarded to the
// leader with the node's certificate and succeeds.
func TestAPIRefusesWithoutCredentials(t *testing.T) {
	tc := startCluster(t, opts{nodes: 3})
	n := tc.nodes[0]
	ask := func(token, method, path, body string) (int, http.Header, api.Error) {
		t.Helper()
		c := tc.sec.client(n.api, tc.sec.admin)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, c.Base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e api.Error
		if resp.StatusCode >= 300 && (json.Unmarshal(b, &e) != nil || e.Message == "") {
			t.Fatalf("%s %s: %d, not a JSON error: %s", method, path, resp.StatusCode, b)
		}
		return resp.StatusCode, resp.Header, e
	}
	register := `{"op":"register_node","node":{"id":9,"name":"intruder","nvme_addr":"127.0.0.1:1","raft_addr":"127.0.0.1:2","api_addr":"127.0.0.1:3"}}`
	for _, c := range []struct {
		name, token, method, path, body string
		status                          int
		want                            string
	}{
		{"no token", "", "GET", "/v1/volumes", "", 401, "needs a token, and the request has none"},
		{"unknown token", "basalt_" + strings.Repeat("x", 43), "GET", "/v1/cluster", "", 401, "not one this node knows"},
		{"read-only change", tc.sec.reader.Token, "POST", "/v1/volumes", `{"name":"x","size":"4MiB"}`, 403,
			`needs a token of role "admin"; the token "reader" is "read-only"`},
		{"read-only join", tc.sec.reader.Token, "POST", "/v1/nodes/join", `{}`, 403, `role "admin"`},
		{"internal without a certificate", "", "POST", "/v1/internal/commands", register, 403, "the client presented none"},
		{"internal with an admin token", tc.sec.admin.Token, "POST", "/v1/internal/commands", register, 403, "refuses tokens"},
		{"peer read without a certificate", "", "POST", "/v1/internal/volumes/1/read", `{}`, 403, "needs a node certificate"},
		{"metrics without a token", "", "GET", "/metrics", "", 401, "GET /metrics needs a token"},
	} {
		status, h, e := ask(c.token, c.method, c.path, c.body)
		if status != c.status || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, status, e.Message, c.status, c.want)
		}
		if status == 401 && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without a Bearer challenge: %q", c.name, h.Get("WWW-Authenticate"))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := tc.client(n).Nodes(ctx)
	if err != nil || len(nodes) != 3 {
		t.Fatalf("nodes after the refused register_node: %v %d (want 3)", err, len(nodes))
	}

	// Plain HTTP to the HTTPS port gets nothing.
	if resp, err := http.Get("http://" + n.api + "/v1/volumes"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("plain HTTP to the API: %d", resp.StatusCode)
		}
	}

	// A change through every node, the non-leaders forwarding it.
	var leader cluster.NodeID
	cv, err := tc.client(n).Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader = cv.Leader
	for _, nd := range tc.nodes {
		if cluster.NodeID(nd.id) == leader {
			continue
		}
		name := "fwd" + string(rune('0'+nd.id))
		if _, err := tc.client(nd).CreateVolume(ctx, api.CreateVolumeRequest{Name: name, Size: 4 << 20, RF: 1}); err != nil {
			t.Errorf("create through node%d (the leader is %d): %v", nd.id, leader, err)
		}
	}
	// A read-only token reads through any node.
	if _, err := tc.sec.client(tc.nodes[2].api, tc.sec.reader).Volumes(ctx); err != nil {
		t.Errorf("read-only list: %v", err)
	}
}
