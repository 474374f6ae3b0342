package clustertest

import (
	"basalt/pkg/crypt"
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/cluster"
	"basalt/pkg/metrics"
	"basalt/target"
)

// APINode is one in-process node with its API on a loopback port.
type APINode struct {
	ID      cluster.NodeID
	Cluster *cluster.Cluster
	Target  *target.Target
	Server  *httptest.Server
	Metrics *metrics.Registry
	// Scrub is what the node's API reports as its scrub schedule; nil:
	// none (a node without a store).
	Scrub atomic.Pointer[api.ScrubView]
}

// APICluster is n in-process nodes on a Net, each with its HTTP API,
// served as basaltd serves it: over HTTPS with a node certificate of the
// cluster's CA, with tokens (api.Security; security.go).
type APICluster struct {
	t     testing.TB
	Net   *Net
	Nodes []*APINode
	// Sec is the cluster's CA, node certificates and tokens.
	Sec *TestSecurity
	// Keys is every node's keyring of key-encryption keys (nil: none);
	// NewAPIClusterWithKeys sets it.
	Keys *crypt.Keyring
	// Logs holds what every node's cluster, metadata machine and API
	// logged, at debug level (tests check it for what must never be
	// logged).
	Logs LogBuffer
}

// LogBuffer is a log sink safe for concurrent use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// swapHandler lets a server start before its handler exists.
type swapHandler struct {
	mu sync.Mutex
	h  http.Handler
}

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

func (s *swapHandler) set(h http.Handler) {
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
}

// NewAPICluster starts n nodes with memory replicas and waits until all
// are registered. Node 1 leads the metadata. Changes time out after
// timeout. Everything stops at the end of the test.
func NewAPICluster(t testing.TB, n int, timeout time.Duration) *APICluster {
	return NewAPIClusterWithKeys(t, n, timeout, nil)
}

// NewAPIClusterWithKeys is NewAPICluster with keys as every node's keyring
// of key-encryption keys (encrypted volumes).
func NewAPIClusterWithKeys(t testing.TB, n int, timeout time.Duration, keys *crypt.Keyring) *APICluster {
	ac := &APICluster{t: t, Net: NewNet(), Sec: NewTestSecurity(t, n), Keys: keys}
	var peers []cluster.Node
	var handlers []*swapHandler
	for i := 1; i <= n; i++ {
		h := &swapHandler{h: http.NotFoundHandler()}
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = ac.Sec.Nodes[i-1].ServerTLS(false)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		handlers = append(handlers, h)
		id := cluster.NodeID(i)
		peers = append(peers, cluster.Node{ID: id, Name: id.String(), NVMeAddr: fmt.Sprintf("127.0.0.1:%d", 4419+i),
			RaftAddr: fmt.Sprintf("127.0.0.1:%d", 9519+i), APIAddr: strings.TrimPrefix(srv.URL, "https://")})
		ac.Nodes = append(ac.Nodes, &APINode{ID: id, Server: srv})
	}
	for i, an := range ac.Nodes {
		ac.startNode(an, peers, handlers[i], timeout)
	}
	ac.Eventually("every node registered", func() bool {
		for _, an := range ac.Nodes {
			if len(an.Cluster.State().Nodes) != n {
				return false
			}
		}
		return true
	})
	return ac
}

func (ac *APICluster) startNode(an *APINode, peers []cluster.Node, h *swapHandler, timeout time.Duration) {
	t := ac.t
	tgt, err := target.New(target.Config{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(&ac.Logs, &slog.HandlerOptions{Level: slog.LevelDebug})).
		With("node", an.ID)
	m, err := cluster.NewMachine(&cluster.MemoryPersister{}, log)
	if err != nil {
		t.Fatal(err)
	}
	client := api.NewTLSClient("", ac.Sec.Nodes[an.ID-1].ClientTLS(), "")
	var c *cluster.Cluster
	reg := metrics.New(metrics.Sources{Target: tgt.Stats, Cluster: func() cluster.LocalStatus { return c.Local() }}, nil)
	c, err = cluster.Start(cluster.Config{
		Self: peers[an.ID-1], Peers: peers, Machine: m, Replicator: ac.Net.Replicator(an.ID),
		Replicas: &cluster.MemoryReplicas{}, Keys: ac.Keys, Target: tgt, Port: uint16(an.ID), Resync: 20 * time.Millisecond,
		Forward: client.Forwarder(), Logger: log,
		Wrap:   func(v *cluster.Volume, b backend.Backend) backend.Backend { return reg.TrackVolume(v.Name, b) },
		Unwrap: func(v *cluster.Volume) { reg.ForgetVolume(v.Name) },
	})
	if err != nil {
		t.Fatal(err)
	}
	an.Cluster, an.Target, an.Metrics = c, tgt, reg
	h.set(api.NewServer(api.Config{Cluster: c, Metrics: reg.Handler(), Client: client, RequestTimeout: timeout,
		Scrub: an.Scrub.Load, Logger: log, Security: ac.Sec.API(an.ID)}))
	t.Cleanup(func() { _ = c.Close(); _ = tgt.Close() })
}

// Eventually waits up to 5 s for cond.
func (ac *APICluster) Eventually(what string, cond func() bool) {
	ac.t.Helper()
	clk := clock.Real()
	deadline := clk.Now().Add(5 * time.Second)
	for !cond() {
		if clk.Now().After(deadline) {
			ac.t.Fatalf("timed out waiting until %s", what)
		}
		<-clk.NewTimer(5 * time.Millisecond).C()
	}
}

// Client returns a client of node i's API (0-based) with the admin token.
func (ac *APICluster) Client(i int) *api.Client {
	return api.NewTLSClient(ac.Nodes[i].Server.URL, ac.Sec.UserTLS(), ac.Sec.AdminToken)
}

// Do sends req with the admin token (unless it has an Authorization
// header) over a client that verifies the nodes against the cluster CA.
func (ac *APICluster) Do(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+ac.Sec.AdminToken)
	}
	return api.NewTLSClient("", ac.Sec.UserTLS(), "").HTTP.Do(req)
}

// Get GETs url with the admin token (Do).
func (ac *APICluster) Get(url string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return ac.Do(req)
}
