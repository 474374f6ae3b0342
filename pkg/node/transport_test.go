package node

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"basalt/pkg/config"
)

// TestNodeAppliesTheNVMeLimits: the [nvme] limits reach the node's
// listeners. With max_connections = 2, a third connection is closed as soon
// as it is accepted while the first two stay open, and an ICReq that never
// comes closes its connection after icreq_timeout.
func TestNodeAppliesTheNVMeLimits(t *testing.T) {
	addr := freeAddr(t)
	cfg := &config.Config{
		NVMe: config.NVMe{Listen: addr, NVMeLimits: config.NVMeLimits{MaxConnections: 2,
			ICReqTimeout: config.Duration(500 * time.Millisecond)}},
		Subsystems: []config.Subsystem{{NQN: "nqn.2026-11.io.basalt:limits", AllowAnyHost: true,
			Namespaces: []config.Namespace{{NSID: 1, Backend: "memory", Size: 4 << 20}}}},
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	buf := make([]byte, 1)
	_ = conns[2].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conns[2].Read(buf); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("third connection beyond max_connections = 2: read %v, want it closed", err)
	}
	_ = conns[0].SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := conns[0].Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("first connection, within the limit, before icreq_timeout: read %v, want it still open", err)
	}
	_ = conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := conns[0].Read(buf); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("a connection without ICReq: read %v, want it closed after icreq_timeout", err)
	}
	t.Logf("closed %v after the first read timed out (icreq_timeout 500ms)", time.Since(start).Round(time.Millisecond))
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
