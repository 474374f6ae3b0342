package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestResizeVolume grows a volume while a host is connected: every replica
// grows first, then the namespace; the host writes and reads the new end.
func TestResizeVolume(t *testing.T) {
	tc := startCluster(t, opts{nodes: 3})
	v := tc.createVolume("grow", 16<<20, 3)
	mp, closePaths := tc.connect(v.NQN)
	defer closePaths()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := mp.Write(ctx, 1, 0, block(0, 1), false); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.client(tc.up()).ResizeVolume(ctx, "grow", 32<<20); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := tc.volume("grow")
		if err == nil && v.Size == 32<<20 {
			break
		}
		if err == nil {
			for _, p := range v.Paths {
				if strings.Contains(p.Error, "cannot grow yet") {
					t.Skipf("resize waits on the replication layer: %s", p.Error)
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resize did not complete: %+v %v", v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	last := uint64(32<<20/4096 - 1)
	if err := mp.Write(ctx, 1, last, block(last, 2), false); err != nil {
		t.Fatalf("writing the new last block: %v", err)
	}
	buf := make([]byte, 4096)
	for lba, want := range map[uint64]uint64{0: 1, last: 2} {
		if err := mp.Read(ctx, 1, lba, buf); err != nil {
			t.Fatal(err)
		}
		if got, err := versionOf(buf, lba); err != nil || got != want {
			t.Errorf("lba %d: version %d (%v), want %d", lba, got, err, want)
		}
	}
}
