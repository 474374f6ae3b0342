package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/backend"
	"basalt/pkg/cluster"
	"basalt/pkg/pmem"
	"basalt/replication"
)

// TestPeerReadsServeTheVolumesTheReplicatorOpened: a volume the Raft
// replicator opens is served to other nodes' peer reads from its local
// replica (api.PeerReads) until it is closed; a group this node holds no
// replica of is ErrNoReplica, an index it has not reached ErrReplicaBehind;
// its own reads from peers fail while no cluster gives their addresses.
func TestPeerReadsServeTheVolumesTheReplicatorOpened(t *testing.T) {
	h, err := replication.NewHost(replication.Config{NodeID: 1, Listen: "127.0.0.1:0",
		LogRegion: pmem.NewFake(4096+4<<20, 1), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	peers := newPeerReads(1, api.NewClient(""), slog.New(slog.DiscardHandler))
	r := raftReplicator{h: h, peers: peers}
	local, err := backend.NewMemory(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := r.OpenVolume(9, []cluster.NodeID{1}, local)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := bytes.Repeat([]byte{0x5A}, 4096)
	for {
		if err = b.WriteAt(ctx, want, 8192, 0); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond) // until the single voter leads
	}
	if err != nil {
		t.Fatal(err)
	}
	got, hi, err := peers.ReadReplica(ctx, 9, 8192, 4096, 1)
	if err != nil || !bytes.Equal(got, want) || hi < 1 {
		t.Fatalf("ReadReplica of the open volume: %v, equal %v, reflects %d", err, bytes.Equal(got, want), hi)
	}
	if _, _, err := peers.ReadReplica(ctx, 10, 0, 4096, 0); !errors.Is(err, api.ErrNoReplica) {
		t.Fatalf("ReadReplica of another group: %v, want ErrNoReplica", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	if _, _, err := peers.ReadReplica(short, 9, 0, 4096, hi+1000); !errors.Is(err, api.ErrReplicaBehind) {
		t.Fatalf("ReadReplica far ahead: %v, want ErrReplicaBehind", err)
	}
	if _, _, err := peers.read(ctx, 9, 0, 4096, 0); err == nil {
		t.Fatal("a peer read without a cluster to find the peers succeeded")
	}
	if err := r.CloseVolume(9, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := peers.ReadReplica(ctx, 9, 0, 4096, 0); !errors.Is(err, api.ErrNoReplica) {
		t.Fatalf("ReadReplica after CloseVolume: %v, want ErrNoReplica", err)
	}
}
