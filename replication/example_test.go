package replication_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"basalt/pkg/clock"
	"basalt/pkg/pmem"
	"basalt/replication"
)

// lines is a state machine that keeps the entries it applied (not
// durably: AppliedIndex stays 0, so the group never compacts past them).
type lines struct{ applied []string }

func (l *lines) Apply(_ context.Context, _ uint64, data []byte) error {
	l.applied = append(l.applied, string(data))
	return nil
}
func (l *lines) AppliedIndex() uint64            { return 0 }
func (l *lines) Snapshot(io.Writer) error        { return nil }
func (l *lines) Restore(io.Reader, uint64) error { return nil }

// A single-node group on a simulated network, driven by hand (Manual): the
// group elects its one member, then a proposal is committed and applied.
// (pkg/volume's example does the same with a replicated block device.)
func ExampleHost_AddGroup() {
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
	sm := &lines{}
	g, err := host.AddGroup(7, []replication.NodeID{1}, sm)
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
	fmt.Println("leader:", g.Leader())

	g.ProposeAsync([]byte("hello"), func(err error) { fmt.Println("proposed:", err) })
	poll()
	fmt.Println("applied:", sm.applied)
	// Output:
	// leader: n1
	// proposed: <nil>
	// applied: [hello]
}
