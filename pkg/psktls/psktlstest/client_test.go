package psktlstest

import (
	"bytes"
	"io"
	"net"
	"testing"

	"basalt/pkg/psktls"
)

func TestClientAgainstServer(t *testing.T) {
	key := bytes.Repeat([]byte{3}, 48)
	for _, h := range []psktls.Hash{psktls.SHA256, psktls.SHA384} {
		a, b := net.Pipe()
		srv := psktls.Server(b, &psktls.Config{PSKs: func([]byte) []psktls.PSK { return []psktls.PSK{{Key: key, Hash: h}} }})
		go func() {
			buf := make([]byte, 5)
			io.ReadFull(srv, buf)
			srv.Write(buf)
		}()
		c, err := Client(a, "id", key, h)
		if err != nil {
			t.Fatalf("%v: %v", h, err)
		}
		c.Write([]byte("hello"))
		got := make([]byte, 5)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
			t.Fatalf("%v: echo %q, %v", h, got, err)
		}
		a.Close()
		b.Close()
	}
}
