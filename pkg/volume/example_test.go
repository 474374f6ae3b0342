package volume_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"time"

	"basalt/pkg/backend"
	"basalt/pkg/clock"
	"basalt/pkg/pmem"
	"basalt/pkg/volume"
	"basalt/replication"
)

// A single-node group on a simulated network, driven by hand (Manual): the
// volume elects itself, then a write is committed, applied and read back.
func ExampleAdd() {
	clk := clock.NewManual(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	network := replication.NewSimNetwork(1, clk)
	host, err := replication.NewHost(replication.Config{
		NodeID:    1,
		LogRegion: pmem.NewFake(4096+1<<20, 1), // a write buffer in memory
		Clock:     clk,
		Logger:    slog.New(slog.DiscardHandler),
		Transport: network.Endpoint(1),
		Manual:    true,
	})
	if err != nil {
		panic(err)
	}
	if err := host.Start(); err != nil {
		panic(err)
	}
	local, _ := backend.NewMemory(1<<20, 4096)
	vol, err := volume.Add(host, 7, []replication.NodeID{1}, local)
	if err != nil {
		panic(err)
	}
	poll := func() {
		for range 200 {
			network.Deliver()
			host.Poll()
			clk.Advance(10 * time.Millisecond)
		}
	}
	poll()
	fmt.Println("leader:", vol.Group().Leader())

	vol.WriteAtAsync(bytes.Repeat([]byte("b"), 4096), 8192, 0, func(err error) { fmt.Println("write:", err) })
	poll()
	got := make([]byte, 4096)
	vol.ReadAtAsync(got, 8192, func(err error) { fmt.Println("read:", err, string(got[:3])) })
	poll()
	// Output:
	// leader: n1
	// write: <nil>
	// read: <nil> bbb
}
