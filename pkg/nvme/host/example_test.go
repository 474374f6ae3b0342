package host_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"basalt/pkg/nvme"
	"basalt/pkg/nvme/host"
)

func ExampleDial() {
	ctx := context.Background()
	c, err := host.Dial(ctx, "192.0.2.10:4420", host.Options{
		SubNQN:   "nqn.2026-01.io.basalt:vol1",
		IOQueues: 4,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Shutdown(ctx) //nolint:errcheck
	buf := make([]byte, 4096)
	err = c.Read(ctx, 1, 0, buf)
	var st nvme.Status
	switch {
	case host.IsPathError(err):
		fmt.Println("try another path:", err)
	case errors.As(err, &st):
		fmt.Println("the controller failed the read:", st)
	}
}

func ExampleController_SubmitBatch() {
	ctx := context.Background()
	c, err := host.Dial(ctx, "192.0.2.10:4420", host.Options{SubNQN: "nqn.2026-01.io.basalt:vol1"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// Reuse IOs and a buffered channel: no allocation per I/O.
	const depth = 32
	done := make(chan *host.IO, depth)
	ios := make([]host.IO, depth)
	batch := make([]*host.IO, depth)
	for i := range ios {
		ios[i] = host.IO{Op: host.OpRead, NSID: 1, SLBA: uint64(i), Data: make([]byte, 4096),
			Done: func(io *host.IO) { done <- io }}
		batch[i] = &ios[i]
	}
	if _, err := c.SubmitBatch(ctx, batch); err != nil {
		log.Fatal(err)
	}
	for range ios {
		if io := <-done; io.Err != nil {
			log.Print(io.Err)
		}
	}
}

func ExampleDialDiscovery() {
	ctx := context.Background()
	d, err := host.DialDiscovery(ctx, "192.0.2.10:8009", "")
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	entries, err := d.DiscoveryLog(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.SUBNQN, e.TRADDR, e.TRSVCID)
	}
}
