package volume

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"basalt/pkg/backend"
)

// TestVolumeImplementsTheBackendContract drives a replicated volume on three
// TCP hosts through backend.Backend: writes larger than one proposal, trims,
// write-zeroes, range checks, Flush on the leader and a follower, Close; and
// checks that the followers' replicas end up equal to the leader's.
func TestVolumeImplementsTheBackendContract(t *testing.T) {
	c := newTCPCluster(t, 16<<20)
	leader, ok := c.leader(5 * time.Second)
	if !ok {
		t.Fatal("no leader")
	}
	v := c.vols[leader]
	ctx := context.Background()
	big := make([]byte, 3<<20+8192) // four proposals
	for i := range big {
		big[i] = byte(i / 4096)
	}
	if err := v.WriteAt(ctx, big, 4096, backend.WriteFUA); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(big))
	if err := v.ReadAt(ctx, got, 4096); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back a 3 MiB write: %v", err)
	}
	if err := v.Trim(ctx, 8192, 8192); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteZeroes(ctx, 1<<20, 4096); err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 4096)
	for _, off := range []int64{8192, 12288, 1 << 20} {
		if err := v.ReadAt(ctx, block, off); err != nil || !bytes.Equal(block, make([]byte, 4096)) {
			t.Fatalf("block at %d after trim/write-zeroes: %v %v", off, block[:4], err)
		}
	}
	if err := v.Flush(ctx); err != nil {
		t.Fatalf("Flush on the leader: %v", err)
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"misaligned write", v.WriteAt(ctx, make([]byte, 100), 0, 0), backend.ErrMisaligned},
		{"misaligned read", v.ReadAt(ctx, make([]byte, 4096), 10), backend.ErrMisaligned},
		{"write past the end", v.WriteAt(ctx, make([]byte, 4096), v.Size(), 0), backend.ErrOutOfRange},
		{"trim past the end", v.Trim(ctx, v.Size()-4096, 8192), backend.ErrOutOfRange},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for id, f := range c.vols {
		if id == leader {
			continue
		}
		for f.Group().Status().Applied < v.Group().Status().Commit && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := f.Flush(ctx); !errors.Is(err, backend.ErrInaccessible) && !errors.Is(err, backend.ErrTransition) {
			t.Errorf("Flush on follower %v: %v, want an ANA error", id, err)
		}
		want, have := make([]byte, tcpVolumeSize), make([]byte, tcpVolumeSize)
		_ = c.locals[leader].ReadAt(ctx, want, 0)
		_ = c.locals[id].ReadAt(ctx, have, 0)
		if !bytes.Equal(want, have) {
			t.Errorf("follower %v's replica differs from the leader's", id)
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteAt(ctx, block, 0, 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("write after Close: %v, want ErrClosed", err)
	}
}
