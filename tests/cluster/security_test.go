package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/pki"
)

// TestImpostorNodeCannotSendRaftTraffic replaces node 3 of a running
// cluster by an impostor at its addresses, with a fresh data directory
// that bootstraps as node 3 of the same cluster UUID: first with a
// certificate naming exactly that (node 3 of this cluster) but issued by
// another CA, then with no TLS at all ([security] insecure). Either way
// the other nodes refuse its connections at the handshake (counted as
// "auth" refusals) and nothing of it reaches their Raft, nor theirs its:
// it never learns the metadata leader, while nodes 1 and 2 keep theirs.
// With the Raft transport unauthenticated the impostor would follow the
// leader within a heartbeat.
func TestImpostorNodeCannotSendRaftTraffic(t *testing.T) {
	tc := startCluster(t, opts{nodes: 3})
	n1, n2, n3 := tc.nodes[0], tc.nodes[1], tc.nodes[2]
	tc.kill(n3)

	foreign, err := pki.NewCA(tc.clusterID.String()) // the cluster's UUID, another key
	if err != nil {
		t.Fatal(err)
	}
	t.Run("certificate of another CA", func(t *testing.T) {
		tc.replaceByImpostor(n3, func(sec string) {
			id := pki.Identity{Cluster: tc.clusterID.String(), Node: 3}
			if err := pki.InitNode(sec, foreign, id, []string{"127.0.0.1"}); err != nil {
				t.Fatal(err)
			}
		})
		// Its API is HTTPS under the other CA: the test asks it trusting that.
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(foreign.CertPEM())
		tc.clientOf[n3.id] = api.NewTLSClient(n3.api, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool},
			tc.sec.admin.Token)
		tc.checkImpostorRefused(n3, n1, n2)
	})
	t.Run("plain TCP", func(t *testing.T) {
		tc.clientOf[n3.id] = api.NewClient(n3.api) // insecure: its API is plain HTTP too
		tc.replaceByImpostor(n3, func(string) {
			f, err := os.OpenFile(n3.cfg, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// The case under test: a peer that speaks plain TCP.
			if _, err := f.WriteString("insecure = true\n"); err != nil { // [security] is the last section
				t.Fatal(err)
			}
		})
		tc.checkImpostorRefused(n3, n1, n2)
	})
}

// replaceByImpostor stops n, wipes its state (data directory, Raft log,
// security directory), lets give write what the impostor holds, and starts
// it again at n's addresses with n's configuration: a fresh node 3 that
// bootstraps.
func (tc *testCluster) replaceByImpostor(n *node, give func(securityDir string)) {
	tc.t.Helper()
	tc.kill(n)
	cfg, err := os.ReadFile(n.cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	for _, p := range []string{n.dir, filepath.Join(tc.logDir, fmt.Sprintf("node%d.raft", n.id))} {
		if err := os.RemoveAll(p); err != nil {
			tc.t.Fatal(err)
		}
	}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		tc.t.Fatal(err)
	}
	if err := os.WriteFile(n.cfg, cfg, 0o600); err != nil {
		tc.t.Fatal(err)
	}
	sec := filepath.Join(n.dir, "security")
	give(sec)
	// The API's tokens, which a node with TLS material needs too.
	if b, err := os.ReadFile(filepath.Join(tc.secDir, "tokens.json")); err != nil {
		tc.t.Fatal(err)
	} else if err := os.MkdirAll(sec, 0o700); err != nil {
		tc.t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(sec, "tokens.json"), b, 0o600); err != nil {
		tc.t.Fatal(err)
	}
	tc.start(n)
}

// checkImpostorRefused waits until the impostor's API answers, watches for
// a few seconds that it learns no leader (nothing of the members' Raft
// reached it, nor its votes them) while the members keep theirs, and checks
// both members counted and logged refused handshakes.
func (tc *testCluster) checkImpostorRefused(imp *node, members ...*node) {
	tc.t.Helper()
	before := map[int]uint64{}
	for _, m := range members {
		before[m.id] = tc.authRefusals(m)
	}
	tc.eventually(30*time.Second, "the impostor's API answers", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := tc.client(imp).Local(ctx)
		return err == nil
	})
	tc.eventually(10*time.Second, "the members follow a leader among themselves", func() bool {
		for _, m := range members {
			if l := tc.metadataLeader(m); l == 0 || l == cluster.NodeID(imp.id) {
				return false
			}
		}
		return true
	})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, err := tc.client(imp).Local(ctx)
		cancel()
		if err == nil && l.Metadata.Leader != 0 {
			tc.t.Fatalf("the impostor follows metadata leader %v (term %d): Raft traffic crossed", l.Metadata.Leader,
				l.Metadata.Raft.Term)
		}
		for _, m := range members {
			if l := tc.metadataLeader(m); l == 0 || l == cluster.NodeID(imp.id) {
				tc.t.Fatalf("node%d lost its metadata leader: now %v", m.id, l)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	tc.eventually(10*time.Second, "both members refuse the impostor's handshakes", func() bool {
		for _, m := range members {
			if tc.authRefusals(m) <= before[m.id] {
				return false
			}
		}
		return true
	})
	b, err := os.ReadFile(members[0].log)
	if err != nil {
		tc.t.Fatal(err)
	}
	if !strings.Contains(string(b), "reason=auth") {
		tc.t.Errorf("node%d's log does not tell of the refusal", members[0].id)
	}
}

// authRefusals is node n's count of peers refused for not authenticating.
func (tc *testCluster) authRefusals(n *node) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l, err := tc.client(n).Local(ctx)
	if err != nil || l.Replication == nil {
		return 0
	}
	return l.Replication.Rejected["auth"]
}

// metadataLeader is the metadata leader node n follows, 0 if none or n
// does not answer.
func (tc *testCluster) metadataLeader(n *node) cluster.NodeID {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l, err := tc.client(n).Local(ctx)
	if err != nil {
		return 0
	}
	return l.Metadata.Leader
}
