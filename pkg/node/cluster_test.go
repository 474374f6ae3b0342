package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/config"
	"basalt/pkg/identity"
	"basalt/tests/ports"
)

// freeAddr returns a loopback address free right now (package ports says
// why not port 0).
// testHostNQN is the host NQN the tests' hosts connect as: volumes admit
// no host until one is listed.
const testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000b0de"

func freeAddr(t *testing.T) string {
	t.Helper()
	return ports.FreeAddr(t)
}

// testClusterID is the initial_cluster_id oneNodeConfig writes.
var testClusterID = identity.NewClusterUUID()

// oneNodeConfig writes the file of a one-node cluster in dir, which
// bootstraps with testClusterID.
func oneNodeConfig(t *testing.T, dir string, withStore bool) *config.Config {
	t.Helper()
	return oneNodeConfigOf(t, dir, withStore, testClusterID)
}

// oneNodeConfigOf is oneNodeConfig with another initial_cluster_id.
func oneNodeConfigOf(t *testing.T, dir string, withStore bool, clusterID identity.ClusterUUID) *config.Config {
	t.Helper()
	nvme, apiAddr, raft := freeAddr(t), freeAddr(t), freeAddr(t)
	text := fmt.Sprintf(`
[node]
data_dir = %q
[cluster]
node_id = 1
bootstrap = true
initial_cluster_id = %q
  [[cluster.peer]]
  id = 1
  raft = %q
  nvme = %q
  api = %q
[raft_log]
size = "16MiB"
`, dir, clusterID.String(), raft, nvme, apiAddr)
	if withStore {
		text += fmt.Sprintf("[store]\ndrives = [%q, %q, %q]\ndrive_size = \"64MiB\"\nbuffer = %q\nbuffer_size = \"16MiB\"\nchunk_size = \"16KiB\"\nsegment_stripes = 4\n",
			filepath.Join(dir, "d0"), filepath.Join(dir, "d1"), filepath.Join(dir, "d2"), filepath.Join(dir, "wbuf"))
	}
	writeTestSecurity(t, filepath.Join(dir, "security"), clusterID, 1) // the default security.dir
	p := filepath.Join(dir, "basaltd.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestOneNodeClusterServesAndKeepsData(t *testing.T) {
	for _, withStore := range []bool{false, true} {
		t.Run(fmt.Sprintf("store=%v", withStore), func(t *testing.T) {
			dir := t.TempDir()
			cfg := oneNodeConfig(t, dir, withStore)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			n, err := Start(cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			client := adminClient(t, cfg, n.APIAddr().String())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var v api.VolumeView
			for {
				v, err = client.CreateVolume(ctx, api.CreateVolumeRequest{Name: "v", Size: 8 << 20, Hosts: []string{testHostNQN}})
				if err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(50 * time.Millisecond) // until the node registered itself
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.RF != 1 {
				t.Errorf("default rf on one node: %d", v.RF)
			}
			data := bytes.Repeat([]byte("basalt!!"), 512)
			rw := func(write bool) { t.Helper(); hostIO(t, ctx, cfg, v.NQN, 7, data, write) }
			rw(true)
			if err := n.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			n, err = Start(cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			rw(false)
			st, err := client.Cluster(ctx)
			if err != nil || st.Volumes != 1 {
				t.Fatalf("cluster after restart: %v %+v", err, st)
			}
			if withStore {
				checkScrubWiring(t, ctx, client, cfg, n.APIAddr().String())
			}
		})
	}
}

// checkScrubWiring: a store node runs its scrub schedule (the default
// weekly one), keeps its state in the data directory, and shows it in
// the node list and the metrics.
func checkScrubWiring(t *testing.T, ctx context.Context, client *api.Client, cfg *config.Config, apiAddr string) {
	t.Helper()
	if _, ok, err := (scrubStateFile{path: filepath.Join(cfg.Node.DataDir, scrubStateName)}).LoadScrub(); !ok || err != nil {
		t.Errorf("scrub state in the data directory: ok %v err %v", ok, err)
	}
	nodes, err := client.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].Scrub == nil {
		t.Fatalf("nodes: %v %+v", err, nodes)
	}
	sc := nodes[0].Scrub
	if !sc.Enabled || sc.Interval != "168h0m0s" || sc.RateBytesPerSecond != 64<<20 || sc.InProgress || sc.NextDue.IsZero() {
		t.Errorf("scrub %+v, want the default schedule, the first pass due", sc)
	}
	resp, err := adminGet(t, cfg, apiAddr, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"basalt_scrub_enabled 1", "basalt_scrub_in_progress 0", "basalt_store_discarded_bytes_total ",
		"basalt_store_discard_errors_total 0", "basalt_scrub_next_due_timestamp_seconds "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestClusterNodeRefusesToJoinWithoutBootstrap(t *testing.T) {
	dir := t.TempDir()
	cfg := oneNodeConfig(t, dir, false)
	cfg.Cluster.Bootstrap = false
	n, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		n.Close()
		t.Fatal("a node without state and without bootstrap started")
	}
	if !errors.Is(err, ErrNoState) || !strings.Contains(err.Error(), "set cluster.join") {
		t.Errorf("refusal: %v", err)
	}
}
