package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"basalt/pkg/nvme"
)

// TestFullStoreAnswersCapacityExceeded fills a thin volume that promises
// more than the nodes' stores hold. Once full, a write of fresh blocks must
// get Capacity Exceeded (with DNR) from the leader before it is proposed,
// and the volume must stay healthy on every node: overwrites still succeed
// and everything acknowledged reads back.
func TestFullStoreAnswersCapacityExceeded(t *testing.T) {
	tc := startCluster(t, opts{nodes: 3, store: true, driveSize: "32MiB", raftLog: "8MiB"})
	const size = 256 << 20
	v := tc.createVolume("full", size, 3)
	mp, closePaths := tc.connect(v.NQN)
	defer closePaths()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const chunk = 32 // blocks per write: 128 KiB, the MDTS
	data := func(lba uint64, version uint64) []byte {
		var b []byte
		for i := range uint64(chunk) {
			b = append(b, block(lba+i, version)...)
		}
		return b
	}
	var lba uint64
	var full error
	for lba = 0; lba < size/4096; lba += chunk {
		if full = mp.Write(ctx, 1, lba, data(lba, 1), false); full != nil {
			break
		}
	}
	var st nvme.Status
	if full == nil || !errors.As(full, &st) || st != nvme.StatusCapacityExceeded {
		t.Fatalf("after %d MiB of fresh writes: %v, want Capacity Exceeded", lba*4096>>20, full)
	}
	if lba*4096 < 16<<20 {
		t.Fatalf("full after only %d MiB", lba*4096>>20)
	}
	t.Logf("full after %d MiB: %v", lba*4096>>20, full)
	if err := mp.Write(ctx, 1, 0, data(0, 2), false); err != nil {
		t.Fatalf("overwrite on a full store: %v", err)
	}
	got := make([]byte, chunk*4096)
	for _, at := range []struct{ lba, version uint64 }{{0, 2}, {lba / 2 / chunk * chunk, 1}, {lba - chunk, 1}} {
		if err := mp.Read(ctx, 1, at.lba, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data(at.lba, at.version)) {
			t.Fatalf("lba %d does not read back version %d", at.lba, at.version)
		}
	}
	tc.waitHealthy("full", 10*time.Second)
}
