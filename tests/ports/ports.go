// Package ports hands tests loopback TCP ports for processes they start.
//
// Asking the kernel for port 0 and closing the listener is not enough: the
// port comes from the ephemeral range (net.ipv4.ip_local_port_range,
// 32768-60999 by default), the range every outgoing connection takes its
// local port from too, so a node dialing its peers can take the port
// before the process it was meant for binds it ("address already in use").
// Ports here come from below that range, at random, each checked free and
// handed out once per test binary.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// The range ports are drawn from: below the default ephemeral range.
const (
	low  = 20000
	high = 32768
)

var handed struct {
	sync.Mutex
	ports map[int]bool
}

// Free returns a loopback port nobody listens on now that Free has not
// returned before in this process.
func Free(tb testing.TB) int {
	tb.Helper()
	handed.Lock()
	defer handed.Unlock()
	if handed.ports == nil {
		handed.ports = map[int]bool{}
	}
	for range 1000 {
		port := low + rand.IntN(high-low)
		if handed.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		_ = ln.Close()
		handed.ports[port] = true
		return port
	}
	tb.Fatalf("ports: no free loopback port in [%d, %d) after 1000 tries", low, high)
	return 0
}

// FreeAddr is Free as a "127.0.0.1:port" address.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Free(tb))
}
