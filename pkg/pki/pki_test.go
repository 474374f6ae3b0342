package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"basalt/pkg/identity"
)

func newCluster(t *testing.T) (*CA, string) {
	t.Helper()
	c := identity.NewClusterUUID().String()
	ca, err := NewCA(c)
	if err != nil {
		t.Fatal(err)
	}
	return ca, c
}

func newNode(t *testing.T, ca *CA, node uint64, hosts ...string) *Node {
	t.Helper()
	n, err := ca.NewNode(Identity{Cluster: ca.Cluster(), Node: node}, hosts)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestCASaveLoad(t *testing.T) {
	ca, c := newCluster(t)
	dir := filepath.Join(t.TempDir(), "security")
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("dir mode %v", m)
	}
	if m := mode(t, filepath.Join(dir, CAKeyFile)); m != 0o600 {
		t.Errorf("ca.key mode %v", m)
	}
	got, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Cluster() != c || !got.Certificate().Equal(ca.Certificate()) {
		t.Fatalf("loaded CA of %s, want %s", got.Cluster(), c)
	}
	if cn := got.Certificate().Subject.CommonName; !strings.Contains(cn, c) {
		t.Errorf("CA subject %q does not name the cluster", cn)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries (temporary files left?)", len(entries))
	}
	// A CA key from another CA does not load with this certificate.
	other, _ := newCluster(t)
	odir := t.TempDir()
	if err := other.Save(odir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(odir, CAKeyFile), filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(dir); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("mismatched CA key: %v", err)
	}
}

func TestNewCARefusesMalformedCluster(t *testing.T) {
	for _, c := range []string{"", "x", "00000000-0000-0000-0000-000000000000",
		strings.ToUpper(identity.NewClusterUUID().String())} {
		if _, err := NewCA(c); !errors.Is(err, ErrIdentity) {
			t.Errorf("NewCA(%q): %v", c, err)
		}
	}
}

func TestInitNodeLoadNode(t *testing.T) {
	ca, c := newCluster(t)
	dir := filepath.Join(t.TempDir(), "sec")
	if got := MissingFiles(dir); len(got) != 3 {
		t.Fatalf("missing %v", got)
	}
	id := Identity{Cluster: c, Node: 7}
	if err := InitNode(dir, ca, id, []string{"127.0.0.1", "::1", "Node7.example"}); err != nil {
		t.Fatal(err)
	}
	if got := MissingFiles(dir); len(got) != 0 {
		t.Fatalf("missing %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); !os.IsNotExist(err) {
		t.Errorf("InitNode wrote ca.key: %v", err)
	}
	if m := mode(t, filepath.Join(dir, NodeKeyFile)); m != 0o600 {
		t.Errorf("node.key mode %v", m)
	}
	n, err := LoadNode(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n.Identity() != id {
		t.Fatalf("identity %v, want %v", n.Identity(), id)
	}
	cert := n.Certificate()
	if len(cert.URIs) != 1 || cert.URIs[0].String() != "basalt://cluster/"+c+"/node/7" {
		t.Errorf("URI SANs %v", cert.URIs)
	}
	if !slices.Equal(cert.DNSNames, []string{ServerName(c), "node7.example"}) {
		t.Errorf("DNS SANs %v", cert.DNSNames)
	}
	if len(cert.IPAddresses) != 2 || !cert.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("IP SANs %v", cert.IPAddresses)
	}
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Error(err)
	}
	os.Remove(filepath.Join(dir, NodeKeyFile))
	if got := MissingFiles(dir); len(got) != 1 || !strings.HasSuffix(got[0], NodeKeyFile) {
		t.Errorf("missing %v", got)
	}
}

func TestLoadNodeRefuses(t *testing.T) {
	ca, _ := newCluster(t)
	other, _ := newCluster(t)
	setup := func(t *testing.T) string {
		dir := t.TempDir()
		if err := newNode(t, ca, 1).Save(dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	cases := []struct {
		name, want string
		spoil      func(t *testing.T, dir string)
	}{
		{"readable key", "lets others read", func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, NodeKeyFile), 0o644)
		}},
		{"key of another node", "private key does not match", func(t *testing.T, dir string) {
			d := t.TempDir()
			newNode(t, ca, 2).Save(d)
			os.Rename(filepath.Join(d, NodeKeyFile), filepath.Join(dir, NodeKeyFile))
		}},
		{"certificate of another CA", "does not verify", func(t *testing.T, dir string) {
			d := t.TempDir()
			newNode(t, other, 1).Save(d)
			os.Rename(filepath.Join(d, NodeKeyFile), filepath.Join(dir, NodeKeyFile))
			os.Rename(filepath.Join(d, NodeCertFile), filepath.Join(dir, NodeCertFile))
		}},
		{"not PEM", "no PEM block", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, NodeCertFile), []byte("hello"), 0o644)
		}},
		{"two blocks", "data after", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, NodeCertFile))
			os.WriteFile(filepath.Join(dir, NodeCertFile), append(b, b...), 0o644)
		}},
		{"key as certificate", "want CERTIFICATE", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, NodeKeyFile))
			os.WriteFile(filepath.Join(dir, CACertFile), b, 0o644)
		}},
		{"missing", "no such file", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, NodeCertFile))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := setup(t)
			tc.spoil(t, dir)
			if _, err := LoadNode(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadNode: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSignCSR(t *testing.T) {
	ca, c := newCluster(t)
	keyPEM, csrPEM, err := NewKeyAndCSR()
	if err != nil {
		t.Fatal(err)
	}
	id := Identity{Cluster: c, Node: 3}
	certPEM, err := ca.SignCSR(csrPEM, id, []string{"10.0.0.3"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := ParseNode(ca.CertPEM(), certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if n.Identity() != id {
		t.Fatalf("identity %v", n.Identity())
	}
	// A CSR whose signature does not verify is refused.
	block, _ := pem.Decode(csrPEM)
	block.Bytes[len(block.Bytes)-3] ^= 0xff
	if _, err := ca.SignCSR(pem.EncodeToMemory(block), id, nil); !errors.Is(err, ErrCSR) {
		t.Errorf("tampered CSR: %v", err)
	}
	if _, err := ca.SignCSR([]byte("nonsense"), id, nil); !errors.Is(err, ErrCSR) {
		t.Errorf("nonsense CSR: %v", err)
	}
}

func TestIssueRefuses(t *testing.T) {
	ca, c := newCluster(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other := identity.NewClusterUUID().String()
	for _, tc := range []struct {
		id    Identity
		hosts []string
	}{
		{Identity{Cluster: other, Node: 1}, nil},
		{Identity{Cluster: c, Node: 0}, nil},
		{Identity{Cluster: c, Node: 1}, []string{""}},
		{Identity{Cluster: c, Node: 1}, []string{"bad_name"}},
		{Identity{Cluster: c, Node: 1}, []string{"-a.b"}},
	} {
		if _, err := ca.Issue(tc.id, key.Public(), tc.hosts); err == nil {
			t.Errorf("Issue(%v, %q) succeeded", tc.id, tc.hosts)
		}
	}
}

// handshake runs a TLS handshake between the two configurations over a
// pipe and returns each side's error and connection state.
func handshake(t *testing.T, client, server *tls.Config) (cerr, serr error, ccs, scs tls.ConnectionState) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := tls.Server(b, server)
		serr = s.Handshake()
		scs = s.ConnectionState()
		s.Close()
	}()
	c := tls.Client(a, client)
	cerr = c.Handshake()
	if cerr == nil {
		// TLS 1.3: the server's verdict on the client's certificate
		// arrives after the client's handshake has completed.
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			cerr = err
		}
	}
	ccs = c.ConnectionState()
	c.Close()
	<-done
	return cerr, serr, ccs, scs
}

func TestMutualTLS(t *testing.T) {
	ca, c := newCluster(t)
	n1, n2 := newNode(t, ca, 1), newNode(t, ca, 2)
	srv := n2.ServerTLS(true)
	_, serr, ccs, scs := handshake(t, n1.ClientTLS(), srv)
	if serr != nil {
		t.Fatal(serr)
	}
	if ccs.Version != tls.VersionTLS13 {
		t.Errorf("version %x", ccs.Version)
	}
	if id, err := PeerIdentity(scs); err != nil || id != (Identity{c, 1}) {
		t.Errorf("server sees %v, %v", id, err)
	}
	if id, err := PeerIdentity(ccs); err != nil || id != (Identity{c, 2}) {
		t.Errorf("client sees %v, %v", id, err)
	}
	if err := n2.VerifyPeer(scs, 1); err != nil {
		t.Error(err)
	}
	if err := n2.VerifyPeer(scs, 3); !errors.Is(err, ErrForeign) {
		t.Errorf("node 1 claiming 3: %v", err)
	}
}

func TestTLSRefusals(t *testing.T) {
	ca, _ := newCluster(t)
	foreign, _ := newCluster(t)
	n1, n2, f1 := newNode(t, ca, 1), newNode(t, ca, 2), newNode(t, foreign, 1)
	noCert := n1.ClientTLS()
	noCert.Certificates = nil
	tls12 := n1.ClientTLS()
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12

	t.Run("client of another CA", func(t *testing.T) {
		if _, serr, _, _ := handshake(t, f1.ClientTLS(), n2.ServerTLS(true)); serr == nil {
			t.Fatal("server accepted a foreign client")
		}
	})
	t.Run("server of another CA", func(t *testing.T) {
		if cerr, _, _, _ := handshake(t, n1.ClientTLS(), f1.ServerTLS(true)); cerr == nil {
			t.Fatal("client accepted a foreign server")
		}
	})
	t.Run("no client certificate, required", func(t *testing.T) {
		if _, serr, _, _ := handshake(t, noCert, n2.ServerTLS(true)); serr == nil {
			t.Fatal("server accepted a client without certificate")
		}
	})
	t.Run("no client certificate, optional", func(t *testing.T) {
		_, serr, _, scs := handshake(t, noCert, n2.ServerTLS(false))
		if serr != nil {
			t.Fatal(serr)
		}
		if _, err := PeerIdentity(scs); !errors.Is(err, ErrNoChain) {
			t.Fatalf("PeerIdentity without certificate: %v", err)
		}
	})
	t.Run("foreign client certificate, optional", func(t *testing.T) {
		if _, serr, _, _ := handshake(t, f1.ClientTLS(), n2.ServerTLS(false)); serr == nil {
			t.Fatal("server accepted a foreign client certificate")
		}
	})
	t.Run("TLS 1.2", func(t *testing.T) {
		if _, serr, _, _ := handshake(t, tls12, n2.ServerTLS(true)); serr == nil {
			t.Fatal("server accepted TLS 1.2")
		}
	})
}

func TestParseIdentityURI(t *testing.T) {
	c := identity.NewClusterUUID().String()
	good := Identity{Cluster: c, Node: 12}
	id, ok, err := parseIdentityURI(good.URI())
	if err != nil || !ok || id != good {
		t.Fatalf("%v %v %v", id, ok, err)
	}
	for _, s := range []string{
		"basalt://cluster/" + c + "/node/0",
		"basalt://cluster/" + c + "/node/012",
		"basalt://cluster/" + c + "/node/+1",
		"basalt://cluster/" + c + "/node/18446744073709551616",
		"basalt://cluster/" + c + "/node/1/x",
		"basalt://cluster/" + c + "/host/1",
		"basalt://other/" + c + "/node/1",
		"basalt://cluster/" + c + "/node/1?x=1",
		"basalt://cluster/not-a-uuid/node/1",
	} {
		u, err := parseURL(s)
		if err != nil {
			continue
		}
		if _, ok, err := parseIdentityURI(u); !ok || err == nil {
			t.Errorf("%s: ok %v err %v", s, ok, err)
		}
	}
	u, _ := parseURL("spiffe://example/x")
	if _, ok, err := parseIdentityURI(u); ok || err != nil {
		t.Errorf("foreign scheme: ok %v err %v", ok, err)
	}
}

func FuzzIdentityURI(f *testing.F) {
	c := identity.NewClusterUUID().String()
	f.Add("basalt://cluster/" + c + "/node/1")
	f.Add("basalt://cluster/" + c)
	f.Add("basalt://cluster//node/")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := parseURL(s)
		if err != nil {
			return
		}
		id, ok, err := parseIdentityURI(u)
		if !ok || err != nil {
			return
		}
		if id.Validate() != nil {
			t.Fatalf("%q parsed to invalid %v", s, id)
		}
		again, _, err := parseIdentityURI(id.URI())
		if err != nil || again != id {
			t.Fatalf("%q: %v does not round-trip: %v %v", s, id, again, err)
		}
	})
}

func parseURL(s string) (*url.URL, error) { return url.Parse(s) }

// TestPeerIdentityChecksCluster: a chain that verified (here made up, as a
// pool holding two clusters' CAs would verify it) but whose root is another
// cluster's CA, or whose leaf names another cluster, is refused.
func TestPeerIdentityChecksCluster(t *testing.T) {
	ca, _ := newCluster(t)
	foreign, _ := newCluster(t)
	n1, f2 := newNode(t, ca, 1), newNode(t, foreign, 2)
	mixed := tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{f2.Certificate(), ca.Certificate()}}}
	if _, err := PeerIdentity(mixed); !errors.Is(err, ErrForeign) {
		t.Errorf("leaf of one cluster under another's CA: %v", err)
	}
	other := tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{f2.Certificate(), foreign.Certificate()}}}
	if _, err := PeerIdentity(other); err != nil {
		t.Fatal(err)
	}
	if err := n1.VerifyPeer(other, 0); !errors.Is(err, ErrForeign) {
		t.Errorf("peer of another cluster: %v", err)
	}
	if _, err := PeerIdentity(tls.ConnectionState{}); !errors.Is(err, ErrNoChain) {
		t.Errorf("no chain: %v", err)
	}
}
