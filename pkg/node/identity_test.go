package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/config"
	"basalt/pkg/disk"
	"basalt/pkg/identity"
	"basalt/pkg/meta"
	"basalt/pkg/pmem"
	"basalt/replication"
)

// The identity tests run real one-node clusters (Start) on state that was
// lost, swapped or made before stamps, and check what the node does.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// runOnce starts a node on cfg, creates volume "v" (so that the metadata
// has applied commands and, with a store, the store holds a volume), and
// stops it cleanly.
func runOnce(t *testing.T, cfg *config.Config) {
	t.Helper()
	n, err := Start(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := adminClient(t, cfg, n.APIAddr().String())
	for {
		_, err = client.CreateVolume(ctx, api.CreateVolumeRequest{Name: "v", Size: 8 << 20})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // until the node registered itself
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// refused starts a node that must not start and returns why.
func refused(t *testing.T, cfg *config.Config, want error) error {
	t.Helper()
	n, err := Start(cfg, quiet)
	if err == nil {
		n.Close()
		t.Fatal("the node started")
	}
	if !errors.Is(err, want) {
		t.Fatalf("refusal %v, want %v", err, want)
	}
	t.Logf("refused: %v", err)
	return err
}

func mustContain(t *testing.T, err error, words ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal lacks %q", w)
		}
	}
}

// stamps reads the stamps a stopped node's state carries.
func stamps(t *testing.T, cfg *config.Config) (logStamp, metaStamp identity.Stamp, info meta.NodeInfo, drives []identity.NodeUUID) {
	t.Helper()
	db, err := meta.Open(meta.Options{Dir: filepath.Join(cfg.Node.DataDir, "meta")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	metaStamp, _, err = db.Identity()
	if err != nil {
		t.Fatal(err)
	}
	info, _, err = db.Node()
	if err != nil {
		t.Fatal(err)
	}
	region, err := pmem.OpenFile(cfg.RaftLog.Path, int(cfg.RaftLog.Size))
	if err != nil {
		t.Fatal(err)
	}
	defer region.Close()
	h, err := replication.NewHost(replication.Config{NodeID: 1, Listen: "127.0.0.1:0", LogRegion: region, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	logStamp, _ = h.Identity()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if cfg.Store != nil {
		for _, p := range cfg.Store.Drives {
			d, err := disk.OpenFile(p, 0)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := disk.ReadSuperblock(d)
			_ = d.Close()
			if err != nil {
				t.Fatal(err)
			}
			drives = append(drives, identity.NodeUUID(sb.NodeUUID))
		}
	}
	return logStamp, metaStamp, info, drives
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestBootstrapStampsEveryStore: a fresh node with bootstrap and
// initial_cluster_id stamps its Raft log, its metadata, its store's record
// and every drive with that cluster UUID and one new node UUID, and starts
// again on them.
func TestBootstrapStampsEveryStore(t *testing.T) {
	cfg := oneNodeConfig(t, t.TempDir(), true)
	runOnce(t, cfg)
	logStamp, metaStamp, info, drives := stamps(t, cfg)
	want := identity.Stamp{Cluster: testClusterID, Node: metaStamp.Node}
	if metaStamp != want || logStamp != want || want.Node.IsZero() {
		t.Fatalf("log %v, metadata %v, want both %v", logStamp, metaStamp, want)
	}
	if info.ClusterUUID != testClusterID || identity.NodeUUID(info.NodeUUID) != want.Node {
		t.Errorf("store record: node %v cluster %v", identity.NodeUUID(info.NodeUUID), info.ClusterUUID)
	}
	for i, d := range drives {
		if d != want.Node {
			t.Errorf("drive %d: node %v", i, d)
		}
	}
	n, err := Start(cfg, quiet) // everything intact: it starts
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRefusesALostRaftLog: a node whose Raft log file is gone, its metadata
// and store kept, refuses to start, with bootstrap set or not, and says what
// was lost and what to do. It used to bootstrap a new cluster at term 1 over
// its metadata.
func TestRefusesALostRaftLog(t *testing.T) {
	dir := t.TempDir()
	cfg := oneNodeConfig(t, dir, true)
	runOnce(t, cfg)
	_, mine, _, _ := stamps(t, cfg)
	if err := os.Remove(cfg.RaftLog.Path); err != nil {
		t.Fatal(err)
	}
	for _, bootstrap := range []bool{true, false} {
		cfg.Cluster.Bootstrap = bootstrap
		err := refused(t, cfg, ErrLostRaftState)
		mustContain(t, err, "the Raft log "+cfg.RaftLog.Path+" is empty or missing", "the metadata in "+filepath.Join(dir, "meta"),
			"belongs to "+mine.String(), "(applied index ", "Do not bootstrap over it", cfg.Store.Drives[0],
			"node replace")
	}
}

// TestRefusesAnotherNodesRaftLog: a node given another node's Raft log (of
// the same cluster) refuses to start, naming both node UUIDs.
func TestRefusesAnotherNodesRaftLog(t *testing.T) {
	a, b := oneNodeConfig(t, t.TempDir(), false), oneNodeConfig(t, t.TempDir(), false)
	runOnce(t, a)
	runOnce(t, b)
	_, stampA, _, _ := stamps(t, a)
	_, stampB, _, _ := stamps(t, b)
	copyFile(t, b.RaftLog.Path, a.RaftLog.Path)
	err := refused(t, a, ErrForeignState)
	mustContain(t, err, "the Raft log "+a.RaftLog.Path+" belongs to node "+stampB.Node.String(),
		"the metadata in "+filepath.Join(a.Node.DataDir, "meta")+" to node "+stampA.Node.String())
}

// TestRefusesDrivesOfAnotherCluster: a node given the drives of a node of
// another cluster refuses to start, naming the drive and both node UUIDs.
// It used to open its store with every drive failed.
func TestRefusesDrivesOfAnotherCluster(t *testing.T) {
	a, b := oneNodeConfig(t, t.TempDir(), true), oneNodeConfigOf(t, t.TempDir(), true, identity.NewClusterUUID())
	runOnce(t, a)
	runOnce(t, b)
	_, stampA, _, _ := stamps(t, a)
	_, stampB, _, _ := stamps(t, b)
	for i := range a.Store.Drives {
		copyFile(t, b.Store.Drives[i], a.Store.Drives[i])
	}
	err := refused(t, a, ErrForeignState)
	mustContain(t, err, "to node "+stampB.Node.String(), "belongs to node "+stampA.Node.String(),
		"the drive "+a.Store.Drives[0])
	// And given all of that node's state, the configuration tells.
	for i := range a.Store.Drives {
		copyFile(t, b.Store.Drives[i], a.Store.Drives[i])
	}
	copyFile(t, b.RaftLog.Path, a.RaftLog.Path)
	if err := os.RemoveAll(filepath.Join(a.Node.DataDir, "meta")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(a.Node.DataDir, "meta"), os.DirFS(filepath.Join(b.Node.DataDir, "meta"))); err != nil {
		t.Fatal(err)
	}
	err = refused(t, a, ErrForeignState)
	mustContain(t, err, "cluster.initial_cluster_id is "+testClusterID.String(), "to cluster "+stampB.Cluster.String())
}

// TestAdoptsStampsOfStateFromBeforeThem: state made without stamps (as
// before they existed) is refused until initial_cluster_id names its
// cluster, then adopted: the node keeps its store's node UUID, stamps
// everything, keeps its volume and starts again.
func TestAdoptsStampsOfStateFromBeforeThem(t *testing.T) {
	cfg := oneNodeConfig(t, t.TempDir(), true)
	startUnstamped = true
	runOnce(t, cfg)
	startUnstamped = false
	logStamp, metaStamp, info, _ := stamps(t, cfg)
	if !logStamp.IsZero() || !metaStamp.IsZero() || !info.ClusterUUID.IsZero() {
		t.Fatalf("the old state has stamps: %v %v %v", logStamp, metaStamp, info.ClusterUUID)
	}
	old := *cfg.Cluster
	cfg.Cluster.Bootstrap, cfg.Cluster.InitialClusterID = false, identity.ClusterUUID{}
	err := refused(t, cfg, ErrUnstamped)
	mustContain(t, err, "Set cluster.initial_cluster_id", cfg.RaftLog.Path)
	*cfg.Cluster = old
	for range 2 { // adopts, then starts on what it adopted
		n, err := Start(cfg, quiet)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if v, err := adminClient(t, cfg, n.APIAddr().String()).Volume(ctx, "v"); err != nil || v.Name != "v" {
			t.Errorf("volume after adoption: %+v %v", v, err)
		}
		if err := n.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	want := identity.Stamp{Cluster: testClusterID, Node: identity.NodeUUID(info.NodeUUID)}
	logStamp, metaStamp, info, drives := stamps(t, cfg)
	if logStamp != want || metaStamp != want || info.ClusterUUID != want.Cluster || drives[0] != want.Node {
		t.Fatalf("after adoption: log %v, metadata %v, store cluster %v, drive %v; want %v", logStamp, metaStamp,
			info.ClusterUUID, drives[0], want)
	}
}
