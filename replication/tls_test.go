package replication

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"basalt/pkg/identity"
	"basalt/pkg/pki"
)

// testCA is a cluster's CA with certificates for its nodes.
type testCA struct {
	ca    *pki.CA
	nodes map[NodeID]*pki.Node
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	ca, err := pki.NewCA(identity.NewClusterUUID().String())
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{ca: ca, nodes: map[NodeID]*pki.Node{}}
}

// node returns id's material, issued on first use.
func (c *testCA) node(t testing.TB, id NodeID) *pki.Node {
	t.Helper()
	if n := c.nodes[id]; n != nil {
		return n
	}
	n, err := c.ca.NewNode(pki.Identity{Cluster: c.ca.Cluster(), Node: uint64(id)}, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	c.nodes[id] = n
	return n
}

// tlsOf is the transport TLS configuration of a node holding n.
func tlsOf(n *pki.Node) *TLSConfig {
	return &TLSConfig{Server: n.ServerTLS(true), Client: n.ClientTLS(),
		VerifyPeer: func(cs tls.ConnectionState, claimed NodeID) error { return n.VerifyPeer(cs, uint64(claimed)) }}
}

// rejection is one ReportRejected call.
type rejection struct {
	reason RejectReason
	from   NodeID
	err    error
}

// authHandler records what a transport delivers and refuses: HandleMessage
// and HandleSnapshot are the only ways into Raft.
type authHandler struct {
	messages chan raftpb.Message
	rejected chan rejection
	mu       sync.Mutex
	snaps    int
}

func newAuthHandler() *authHandler {
	return &authHandler{messages: make(chan raftpb.Message, 1024), rejected: make(chan rejection, 1024)}
}

func (h *authHandler) HandleMessage(_ GroupID, m raftpb.Message, _ Source) { h.messages <- m }
func (h *authHandler) HandleSnapshot(_ GroupID, _ raftpb.Message, body io.Reader) error {
	h.mu.Lock()
	h.snaps++
	h.mu.Unlock()
	_, err := io.Copy(io.Discard, body)
	return err
}
func (h *authHandler) ReportUnreachable(NodeID, GroupID) {}
func (h *authHandler) ReportRejected(r RejectReason, from NodeID, err error) {
	select {
	case h.rejected <- rejection{r, from, err}:
	default:
	}
}

func startTransport(t *testing.T, id NodeID, tc *TLSConfig, peers map[NodeID]string, h Handler) *TCPTransport {
	t.Helper()
	tr, err := NewTCPTransport(TCPConfig{NodeID: id, Listen: "127.0.0.1:0", Peers: peers, TLS: tc,
		Logger: testLogger().With("node", id)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	if err := tr.Start(h); err != nil {
		t.Fatal(err)
	}
	return tr
}

func heartbeat(from, to NodeID, term uint64) raftpb.Message {
	return raftpb.Message{Type: raftpb.MsgHeartbeat, From: uint64(from), To: uint64(to), Term: term}
}

// TestTLSTransportDelivers: two transports with certificates of the same
// CA exchange messages, heartbeats and appends with payloads in batches
// larger than a TLS record, in order, and a snapshot stream opens.
func TestTLSTransportDelivers(t *testing.T) {
	cas := newTestCA(t)
	rxh := newAuthHandler()
	rx := startTransport(t, 1, tlsOf(cas.node(t, 1)), nil, rxh)
	tx := startTransport(t, 2, tlsOf(cas.node(t, 2)), map[NodeID]string{1: rx.Addr().String()}, newAuthHandler())
	const n = 200
	payload := bytes.Repeat([]byte("0123456789abcdef"), 2048) // 32 KiB: two records and more
	for i := range uint64(n) {
		m := raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1, Term: 2, Index: i, LogTerm: 2,
			Entries: []raftpb.Entry{{Term: 2, Index: i + 1, Data: payload[:1+int(i)*160]}}}
		tx.Send(1, []raftpb.Message{m, heartbeat(2, 1, 2)})
	}
	for i := uint64(0); i < n; {
		select {
		case m := <-rxh.messages:
			if m.Type == raftpb.MsgHeartbeat {
				continue
			}
			if m.Index != i || len(m.Entries) != 1 || !bytes.Equal(m.Entries[0].Data, payload[:1+int(i)*160]) {
				t.Fatalf("append %d arrived as index %d with %d entries", i, m.Index, len(m.Entries))
			}
			i++
		case r := <-rxh.rejected:
			t.Fatalf("refused: %v %v %v", r.reason, r.from, r.err)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d appends arrived", i, n)
		}
	}
	done := make(chan error, 1)
	tx.SendSnapshot(1, raftpb.Message{Type: raftpb.MsgSnap, From: 2, To: 1, Term: 2,
		Snapshot: &raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 5, Term: 2}}},
		func(w io.Writer) error { _, err := w.Write(payload); return err }, func(err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("snapshot stream: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("snapshot stream did not end")
	}
}

// impostor is a peer that must not get anything to Raft.
type impostor struct {
	name string
	id   NodeID
	tls  func(t *testing.T, ours, foreign *testCA) *TLSConfig
	// from is the node the receiver's refusal names: the claimed sender
	// once the TLS handshake passed, 0 before.
	from NodeID
}

func impostors() []impostor {
	return []impostor{
		{"certificate of another cluster's CA", 2, func(t *testing.T, _, foreign *testCA) *TLSConfig {
			return tlsOf(foreign.node(t, 2))
		}, 0},
		{"certificate of another cluster's CA, trusting ours", 2, func(t *testing.T, ours, foreign *testCA) *TLSConfig {
			c := tlsOf(foreign.node(t, 2))
			c.Client.RootCAs = ours.node(t, 1).CAPool()
			c.Client.ServerName = pki.ServerName(ours.ca.Cluster())
			c.Client.VerifyConnection = nil
			// Present the certificate though the server's request names
			// another CA (Go's client would otherwise send none).
			cert := c.Client.Certificates[0]
			c.Client.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
			c.VerifyPeer = func(tls.ConnectionState, NodeID) error { return nil }
			return c
		}, 0},
		{"no certificate", 2, func(t *testing.T, ours, _ *testCA) *TLSConfig {
			c := tlsOf(ours.node(t, 2))
			c.Client.Certificates = nil
			return c
		}, 0},
		{"node 2's certificate claiming node 3", 3, func(t *testing.T, ours, _ *testCA) *TLSConfig {
			return tlsOf(ours.node(t, 2))
		}, 3},
		{"plain TCP", 2, func(*testing.T, *testCA, *testCA) *TLSConfig { return nil }, 0},
	}
}

// TestTLSTransportRefusesImpostors: a peer with a certificate of another
// cluster's CA, without one, with a valid one of another node than it
// claims, or on plain TCP, is refused (RejectAuth) and nothing it sends
// reaches the Handler, Raft's only way in; a node with its own certificate
// still gets through afterwards.
func TestTLSTransportRefusesImpostors(t *testing.T) {
	ours, foreign := newTestCA(t), newTestCA(t)
	for _, imp := range impostors() {
		t.Run(imp.name, func(t *testing.T) {
			rxh := newAuthHandler()
			rx := startTransport(t, 1, tlsOf(ours.node(t, 1)), nil, rxh)
			tx := startTransport(t, imp.id, imp.tls(t, ours, foreign), map[NodeID]string{1: rx.Addr().String()},
				newAuthHandler())
			deadline := time.After(5 * time.Second)
			var refused rejection
			for refused.err == nil {
				tx.Send(1, []raftpb.Message{heartbeat(imp.id, 1, 7)})
				select {
				case refused = <-rxh.rejected:
				case m := <-rxh.messages:
					t.Fatalf("the receiver delivered %v from %v", m.Type, m.From)
				case <-deadline:
					t.Fatal("no refusal reported")
				case <-time.After(20 * time.Millisecond):
				}
			}
			if refused.reason != RejectAuth || refused.from != imp.from || !errors.Is(refused.err, ErrRejected) {
				t.Fatalf("refusal %v from %v: %v", refused.reason, refused.from, refused.err)
			}
			t.Logf("refused: %v", refused.err)
			for range 10 { // the impostor keeps trying: still nothing gets in
				tx.Send(1, []raftpb.Message{heartbeat(imp.id, 1, 7)})
				time.Sleep(10 * time.Millisecond)
			}
			expectNoMessage(t, rxh, 200*time.Millisecond)
			checkOwnGetsThrough(t, ours, rx, rxh)
		})
	}
}

func expectNoMessage(t *testing.T, h *authHandler, wait time.Duration) {
	t.Helper()
	select {
	case m := <-h.messages:
		t.Fatalf("the receiver delivered %v from %v", m.Type, m.From)
	case <-time.After(wait):
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.snaps != 0 {
		t.Fatalf("the receiver handled %d snapshots", h.snaps)
	}
}

// checkOwnGetsThrough sends from node 2 with its own certificate to rx.
func checkOwnGetsThrough(t *testing.T, ours *testCA, rx *TCPTransport, rxh *authHandler) {
	t.Helper()
	tx := startTransport(t, 2, tlsOf(ours.node(t, 2)), map[NodeID]string{1: rx.Addr().String()}, newAuthHandler())
	tx.Send(1, []raftpb.Message{heartbeat(2, 1, 9)})
	for {
		select {
		case m := <-rxh.messages:
			if m.From != 2 || m.Term != 9 {
				t.Fatalf("delivered %+v", m)
			}
			return
		case <-rxh.rejected: // the impostor's reconnections
		case <-time.After(5 * time.Second):
			t.Fatal("node 2 with its own certificate did not get through")
		}
	}
}

// TestTLSTransportRefusesForgedPlainFrames writes a well-formed stream
// handshake and message frames on a plain TCP connection to a TLS
// transport: the connection is closed, the refusal counted, and nothing is
// delivered.
func TestTLSTransportRefusesForgedPlainFrames(t *testing.T) {
	ours := newTestCA(t)
	rxh := newAuthHandler()
	rx := startTransport(t, 1, tlsOf(ours.node(t, 1)), nil, rxh)
	var stream bytes.Buffer
	stream.Write(handshake{kind: streamMessages, from: 2, to: 1}.encode())
	fw := frameWriter{w: &stream}
	for _, m := range []raftpb.Message{heartbeat(2, 1, 1<<40),
		{Type: raftpb.MsgApp, From: 2, To: 1, Term: 1 << 40, Entries: []raftpb.Entry{{Term: 1 << 40, Index: 1, Data: []byte("forged")}}}} {
		if err := fw.message(1, &m); err != nil {
			t.Fatal(err)
		}
	}
	c, err := net.Dial("tcp", rx.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write(stream.Bytes())
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("connection not closed: %v", err)
	}
	select {
	case r := <-rxh.rejected:
		if r.reason != RejectAuth || r.from != 0 {
			t.Fatalf("refusal %v from %v: %v", r.reason, r.from, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no refusal reported")
	}
	expectNoMessage(t, rxh, 100*time.Millisecond)
}

// TestTLSHandshakeNeverBlocksAccept holds connections that never finish
// their TLS handshake while a node with its certificate connects and
// delivers; a stalled connection is closed at the handshake deadline.
func TestTLSHandshakeNeverBlocksAccept(t *testing.T) {
	ours := newTestCA(t)
	rxh := newAuthHandler()
	rx := startTransport(t, 1, tlsOf(ours.node(t, 1)), nil, rxh)
	var stalled []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", rx.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte{0x16, 0x03}) // the start of a record, then nothing
		stalled = append(stalled, c)
	}
	checkOwnGetsThrough(t, ours, rx, rxh)
	_ = stalled[0].SetReadDeadline(time.Now().Add(handshakeTimeout + 5*time.Second))
	start := time.Now()
	if _, err := io.ReadAll(stalled[0]); err != nil {
		t.Fatalf("stalled connection not closed: %v", err)
	}
	if waited := time.Since(start); waited > handshakeTimeout+time.Second {
		t.Errorf("stalled connection closed after %v", waited)
	}
}

// TestTLSConfigValidated: a TLS server configuration that does not require
// client certificates, or a missing part, is refused.
func TestTLSConfigValidated(t *testing.T) {
	n := newTestCA(t).node(t, 1)
	optional := tlsOf(n)
	optional.Server = n.ServerTLS(false)
	noVerify := tlsOf(n)
	noVerify.VerifyPeer = nil
	for name, c := range map[string]*TLSConfig{"optional client certificates": optional, "no VerifyPeer": noVerify} {
		if _, err := NewTCPTransport(TCPConfig{NodeID: 1, Listen: "127.0.0.1:0", TLS: c}); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTLSHostsCatchUpBySnapshot runs three Hosts over mutual TLS: they
// elect a leader, replicate, and a follower back after the leader compacted
// past it catches up by a snapshot stream.
func TestTLSHostsCatchUpBySnapshot(t *testing.T) {
	cas := newTestCA(t)
	for id := NodeID(1); id <= 3; id++ {
		cas.node(t, id)
	}
	followerCatchesUpBySnapshot(t, func(cfg *Config) { cfg.TLS = tlsOf(cas.nodes[cfg.NodeID]) })
}

// TestTLSBatchWriterAllocatesNothingOnceWarm: the sender's steady state
// over TLS, batches through the buffer into records, allocates nothing.
// (The receiver drains the raw connection: crypto/tls's reader allocates a
// small value for each record it reads, which is not ours to remove.)
func TestTLSBatchWriterAllocatesNothingOnceWarm(t *testing.T) {
	cas := newTestCA(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	server := cas.node(t, 1).ServerTLS(true)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		sc := tls.Server(c, server)
		_ = sc.Handshake()
		_, _ = io.Copy(io.Discard, c)
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, cas.node(t, 2).ClientTLS())
	defer tc.Close()
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	msgs := testMessages(t)
	var b frameBatch
	w := newBatchWriter(tc)
	send := func() {
		for i := range msgs {
			if err := b.add(GroupID(i+1), &msgs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.writeTo(w.w); err != nil {
			t.Fatal(err)
		}
		if err := w.flush(); err != nil {
			t.Fatal(err)
		}
	}
	// AllocsPerRun counts every goroutine's allocations: the least of a
	// few runs leaves out what other tests' goroutines still do.
	least := math.Inf(1)
	for range 5 {
		least = min(least, testing.AllocsPerRun(20, send))
	}
	if least != 0 {
		t.Fatalf("%v allocations per batch", least)
	}
}
