package node

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"basalt/pkg/cluster"
	"basalt/pkg/config"
)

// TestJoinRefusesStateWithoutItsRecord: a node configured to join whose
// data directory holds state but no cluster-join.json is refused: asking
// the cluster again would give that state a new node ID.
func TestJoinRefusesStateWithoutItsRecord(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "meta"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Node: config.Node{DataDir: dir},
		Cluster: &config.Cluster{Join: "127.0.0.1:1", RaftListen: "127.0.0.1:2", APIListen: "127.0.0.1:3"}}
	_, err := joinIfNew(cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "cluster-join.json") {
		t.Fatalf("join over state without its record: %v, want a refusal naming cluster-join.json", err)
	}
}

// TestJoinResumesFromItsRecord: a node that joined before starts again as
// the node its record names, without asking the cluster.
func TestJoinResumesFromItsRecord(t *testing.T) {
	dir := t.TempDir()
	rec := &joinRecord{NodeID: 7, ClusterID: [16]byte{1}}
	rec.Nodes = append(rec.Nodes, clusterNode(7, "127.0.0.1:4420", "127.0.0.1:9300", "127.0.0.1:9420"),
		clusterNode(1, "127.0.0.1:4421", "127.0.0.1:9301", "127.0.0.1:9421"))
	if err := writeJoinRecord(filepath.Join(dir, joinFile), rec); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Node: config.Node{DataDir: dir},
		Cluster: &config.Cluster{Join: "127.0.0.1:1", RaftListen: "127.0.0.1:9300", APIListen: "127.0.0.1:9420"}}
	got, err := joinIfNew(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeID != 7 || cfg.Cluster.NodeID != 7 || cfg.NVMe.PortID != 7 || len(cfg.Cluster.Peers) != 2 {
		t.Fatalf("resumed as %+v, config node %d port %d peers %d; want node 7 with 2 peers",
			got, cfg.Cluster.NodeID, cfg.NVMe.PortID, len(cfg.Cluster.Peers))
	}
}

func clusterNode(id cluster.NodeID, nvme, raft, api string) cluster.Node {
	return cluster.Node{ID: id, Name: id.String(), NVMeAddr: nvme, RaftAddr: raft, APIAddr: api}
}
