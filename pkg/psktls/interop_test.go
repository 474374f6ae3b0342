package psktls

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// interopServer accepts one connection, completes the handshake, reads a
// line and answers "pong <line>", then sends close_notify. The handshake
// error (if any) is returned on the channel.
func interopServer(t *testing.T) (string, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	res := make(chan error, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			res <- err
			return
		}
		defer raw.Close()
		c := Server(raw, &Config{PSKs: testLookup})
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if err := c.Handshake(); err != nil {
			res <- err
			return
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			res <- err
			return
		}
		c.Write([]byte("pong " + line))
		c.CloseWrite()
		res <- nil
	}()
	return ln.Addr().String(), res
}

// runPeer runs a TLS client tool with "ping\n" on stdin and returns its
// output; the test is skipped when the tool is not installed.
func runPeer(t *testing.T, name string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed (apt-get install gnutls-bin openssl)", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader("ping\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Run() // the tools' exit status after the server's close varies; the output decides
	return out.String()
}

func TestInteropGnuTLS(t *testing.T) {
	cases := []struct {
		name, id, priority string
		key                []byte
	}{
		{"sha256-ecdhe", "id256", "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK", key32},
		{"sha256-psk_ke", "id256", "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+PSK", key32},
		{"sha256-p384-hrr", "id256", "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:-GROUP-ALL:+GROUP-SECP384R1:+GROUP-X25519", key32},
		// GnuTLS before 3.8.11 binds every PSK with HMAC-SHA256 (so does
		// tlshd built on it): a 48-byte key then runs TLS_AES_128_GCM_SHA256.
		{"sha384-key-sha256-binder", "id384any", "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK", key48},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			addr, res := interopServer(t)
			host, port, _ := net.SplitHostPort(addr)
			out := runPeer(t, "gnutls-cli", "--priority", tt.priority, "--pskusername", tt.id,
				"--pskkey", hex.EncodeToString(tt.key), "-p", port, host)
			if err := <-res; err != nil {
				t.Fatalf("server: %v\ngnutls-cli:\n%s", err, out)
			}
			if !strings.Contains(out, "pong ping") {
				t.Fatalf("gnutls-cli did not get the answer:\n%s", out)
			}
		})
	}
}

func TestInteropOpenSSL(t *testing.T) {
	addr, res := interopServer(t)
	out := runPeer(t, "openssl", "s_client", "-connect", addr, "-tls1_3", "-psk_identity", "id256",
		"-psk", hex.EncodeToString(key32), "-ciphersuites", "TLS_AES_128_GCM_SHA256", "-quiet")
	if err := <-res; err != nil {
		t.Fatalf("server: %v\nopenssl:\n%s", err, out)
	}
	if !strings.Contains(out, "pong ping") {
		t.Fatalf("openssl s_client did not get the answer:\n%s", out)
	}
}
