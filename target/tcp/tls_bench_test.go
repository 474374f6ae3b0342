package tcp

import (
	"bytes"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"basalt/pkg/nvme"
	"basalt/pkg/psktls"
	"basalt/pkg/psktls/psktlstest"
	"basalt/target"
)

// BenchmarkTLS compares 4 KiB writes (in-capsule data) and reads over
// loopback with TLS off and on, against the fake core: the figures are
// the transport's cost. It reports MB/s, IOPS and the process CPU time
// per I/O (both sides: the test host runs in the same process, so the
// TLS figure includes the client's encryption as well).
// Run: go test -run '^$' -bench BenchmarkTLS -benchtime 3s ./target/tcp
func BenchmarkTLS(b *testing.B) {
	const qd = 32
	for _, op := range []string{"write", "read"} {
		for _, tls := range []bool{false, true} {
			b.Run(fmt.Sprintf("op=%s/bs=4k/qd=%d/tls=%v", op, qd, tls), func(b *testing.B) {
				bh, h := newTLSBenchHost(b, tls)
				var req bytes.Buffer
				for i := range qd {
					if op == "write" {
						c := rwCmd(h, nvme.IOWrite, uint64(i*8), 8, nvme.SGLDataBlockOffset)
						req.Write(h.capsule(&c, pattern(4096, byte(i))))
					} else {
						c := rwCmd(h, nvme.IORead, uint64(i*8), 8, nvme.SGLTransportDataBlock)
						req.Write(h.capsule(&c, nil))
					}
				}
				bh.req = req.Bytes()
				if op == "write" {
					bh.resp = make([]byte, qd*24)
				} else {
					bh.resp = make([]byte, qd*(24+4096+24))
				}
				for range 200 {
					bh.roundTrip(b)
				}
				cpu0 := cpuTime()
				b.SetBytes(qd * 4096)
				b.ResetTimer()
				for b.Loop() {
					bh.roundTrip(b)
				}
				b.StopTimer()
				ios := float64(b.N * qd)
				b.ReportMetric(ios/b.Elapsed().Seconds(), "IOPS")
				b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/ios/1000, "cpu-µs/IO")
			})
		}
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// newTLSBenchHost is newBenchHost on a listener whose port offers TLS,
// connecting with TLS or plain.
func newTLSBenchHost(b *testing.B, useTLS bool) (*benchHost, *testHost) {
	key := bytes.Repeat([]byte{7}, 32)
	src := newCoreSource(nil)
	l, err := listen("127.0.0.1:0", src.factory, testOptions())
	if err != nil {
		b.Fatal(err)
	}
	l.tls = newTLSPort(target.TLSOptional, func([]byte) []psktls.PSK { return []psktls.PSK{{Key: key, Hash: psktls.SHA256}} })
	go l.Serve()
	b.Cleanup(func() { l.Close(); l.Wait() })
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	var c net.Conn = conn
	if useTLS {
		if c, err = psktlstest.Client(conn, "NVMe0R01 nqn.test:host nqn.test:sub", key, psktls.SHA256); err != nil {
			b.Fatal(err)
		}
	}
	h := newTestHost(b, c) // the core is made once the queue exists (buffered channel)
	h.icreq(0)
	h.connect(1, 127, 0)
	return &benchHost{c: c}, h
}
