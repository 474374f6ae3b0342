package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "basaltd.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadAppliesDefaults(t *testing.T) {
	c, err := Load(write(t, `
[nvme]
listen = "0.0.0.0:4420"
[[subsystem]]
nqn = "nqn.2026-11.io.basalt:v"
allow_any_host = true
  [[subsystem.namespace]]
  nsid = 1
  backend = "memory"
  size = "64MiB"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NVMe.Advertise != "127.0.0.1:4420" {
		t.Errorf("advertise = %q, want the listen port on 127.0.0.1", c.NVMe.Advertise)
	}
	ns := c.Subsystems[0].Namespaces[0]
	if ns.Size != 64<<20 || ns.BlockSize != 4096 {
		t.Errorf("namespace = %+v", ns)
	}
	if c.Subsystems[0].Serial == "" || c.NVMe.PortID != 1 || c.NVMe.CNTLIDMax != 0xFFEF {
		t.Errorf("defaults missing: %+v %+v", c.Subsystems[0], c.NVMe)
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	_, err := Load(write(t, `
[nvme]
advertise = "0.0.0.0:4420"
[[subsystem]]
nqn = "bad"
  [[subsystem.namespace]]
  nsid = 0
  backend = "tape"
  size = "100"
  block_size = 1000
`))
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"advertise", "must start with", "no host may connect", "nsid must be", "backend \"tape\"", "block_size 1000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	_, err := Load(write(t, "[nvme]\nlisten_addr = \"x\"\n"))
	if err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("err = %v, want unknown key", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4GiB": 4 << 30, "512MiB": 512 << 20, "4096": 4096, "1G": 1 << 30, "2KB": 2000, "1.5KiB": 1536} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1G", "GiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

const clusterFile = `
[node]
data_dir = "/var/lib/basalt"
[cluster]
node_id = 2
  [[cluster.peer]]
  id = 1
  raft = "10.0.0.1:9520"
  nvme = "10.0.0.1:4420"
  api = "10.0.0.1:9420"
  [[cluster.peer]]
  id = 2
  name = "beta"
  raft = "10.0.0.2:9520"
  nvme = "10.0.0.2:4420"
  api = "10.0.0.2:9420"
[store]
drives = ["/dev/nvme0n1", "/dev/nvme1n1", "/dev/nvme2n1"]
buffer = "/mnt/pmem/wbuf"
buffer_size = "1GiB"
`

func TestClusterDefaults(t *testing.T) {
	c, err := Load(write(t, clusterFile))
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Cluster
	if c.Node.Name != "beta" || c.NVMe.Listen != "10.0.0.2:4420" || c.NVMe.Advertise != "10.0.0.2:4420" {
		t.Errorf("node %+v nvme %+v", c.Node, c.NVMe)
	}
	if c.NVMe.PortID != 2 || c.NVMe.CNTLIDMin != 0x2001 || c.NVMe.CNTLIDMax != 0x23FF {
		t.Errorf("port %d cntlid %#x..%#x, want 2 and 0x2001..0x23FF", c.NVMe.PortID, c.NVMe.CNTLIDMin, c.NVMe.CNTLIDMax)
	}
	if cl.RaftListen != "10.0.0.2:9520" || cl.APIListen != "10.0.0.2:9420" || cl.BootstrapEnabled() {
		t.Errorf("cluster %+v", cl)
	}
	if cl.Peers[0].Name != "node1" || cl.Self().Name != "beta" {
		t.Errorf("peers %+v", cl.Peers)
	}
	if c.RaftLog.Path != "/var/lib/basalt/raft.log" || c.RaftLog.Size != 256<<20 || time.Duration(cl.RaftTick) != 50*time.Millisecond {
		t.Errorf("raft log %+v tick %v", c.RaftLog, cl.RaftTick)
	}
	if c.Store.BufferSize != 1<<30 || len(c.Store.Drives) != 3 {
		t.Errorf("store %+v", c.Store)
	}
}

// TestRaftLogPersist: raft_log.persist is empty by default (auto) and takes
// "auto" and "msync".
func TestRaftLogPersist(t *testing.T) {
	for _, v := range []string{"auto", PersistMsync} {
		c, err := Load(write(t, sed(t, clusterFile, `s/\[store\]/[raft_log]\npersist = "`+v+`"\n[store]/`)))
		if err != nil {
			t.Fatalf("persist = %q: %v", v, err)
		}
		if c.RaftLog.Persist != v {
			t.Errorf("persist = %q read as %q", v, c.RaftLog.Persist)
		}
	}
	c, err := Load(write(t, clusterFile))
	if err != nil {
		t.Fatal(err)
	}
	if c.RaftLog.Persist != "" {
		t.Errorf("default persist %q, want empty (auto)", c.RaftLog.Persist)
	}
}

func TestClusterValidation(t *testing.T) {
	tests := []struct {
		name, edit string
		want       []string
	}{
		{"no data dir", `s/data_dir = .*//`, []string{"data_dir is required"}},
		{"node id out of range", `s/node_id = 2/node_id = 65/`, []string{"node_id 65: want 1..64", "no entry for this node"}},
		{"peer id out of range", `s/id = 1/id = 65/`, []string{"(id 65): want a unique id 1..64"}},
		{"self missing", `s/node_id = 2/node_id = 3/`, []string{"no entry for this node (id 3)"}},
		{"duplicate peer", `s/id = 1/id = 2/`, []string{"unique id"}},
		{"wildcard peer", `s/nvme = "10.0.0.1:4420"/nvme = "0.0.0.0:4420"/`, []string{"not a wildcard"}},
		{"bad peer address", `s/api = "10.0.0.1:9420"/api = "nowhere"/`, []string{"api \"nowhere\""}},
		{"port id", `s/\[cluster\]/[nvme]\nport_id = 7\n[cluster]/`, []string{"port ID is the node ID"}},
		{"ticks", `s/node_id = 2/node_id = 2\nelection_ticks = 1\nheartbeat_ticks = 2/`, []string{"election_ticks > heartbeat_ticks"}},
		{"bad tick", `s/node_id = 2/node_id = 2\nraft_tick = "soon"/`, []string{"duration \"soon\""}},
		{"store without buffer size", `s/buffer_size = .*//`, []string{"[store] needs drives and buffer_size"}},
		{"store gc", `s/buffer_size = "1GiB"/buffer_size = "1GiB"\ngc_policy = "lazy"/`, []string{"gc_policy \"lazy\""}},
		{"store discard", `s/buffer_size = "1GiB"/buffer_size = "1GiB"\ndiscard = "sometimes"/`, []string{"discard \"sometimes\""}},
		{"subsystems in a cluster", `s/\[cluster\]/[[subsystem]]\nnqn = "nqn.x:y"\nallow_any_host = true\n[cluster]/`, []string{"cannot be used with [cluster]"}},
		{"tiny raft log", `s/\[store\]/[raft_log]\nsize = "4KiB"\n[store]/`, []string{"raft_log.size"}},
		{"raft log persist", `s/\[store\]/[raft_log]\npersist = "clflush"\n[store]/`, []string{"raft_log.persist \"clflush\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := sed(t, clusterFile, tt.edit)
			_, err := Load(write(t, text))
			if err == nil {
				t.Fatalf("accepted:\n%s", text)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestStoreBufferInMemoryOnlyInACluster(t *testing.T) {
	for _, buf := range []string{"", `buffer = "memory"`} {
		_, err := Load(write(t, "[node]\ndata_dir = \"/tmp/x\"\n[store]\ndrives = [\"/d\"]\n"+buf+"\nbuffer_size = \"1MiB\"\n"))
		if err == nil || !strings.Contains(err.Error(), "needs a write-buffer file") {
			t.Errorf("single node, %q: err = %v", buf, err)
		}
	}
	for _, edit := range []string{`s/buffer = .*//`, `s/buffer = .*/buffer = "memory"/`} {
		cfg, err := Load(write(t, sed(t, clusterFile, edit)))
		if err != nil {
			t.Fatalf("cluster, %s: %v", edit, err)
		}
		if !cfg.Store.InMemoryBuffer() {
			t.Errorf("cluster, %s: buffer %q is not in memory", edit, cfg.Store.Buffer)
		}
	}
}

func TestSingleNodeStoreNeedsDataDir(t *testing.T) {
	_, err := Load(write(t, "[store]\ndrives = [\"/d\"]\nbuffer = \"/b\"\nbuffer_size = \"1MiB\"\n"))
	if err == nil || !strings.Contains(err.Error(), "[store] needs node.data_dir") {
		t.Fatalf("err = %v", err)
	}
}

func TestStoreBackendNeedsStoreSection(t *testing.T) {
	_, err := Load(write(t, `
[[subsystem]]
nqn = "nqn.2026-11.io.basalt:v"
allow_any_host = true
  [[subsystem.namespace]]
  nsid = 1
  backend = "store"
  size = "64MiB"
  block_size = 512
`))
	if err == nil {
		t.Fatal("store backend without [store] accepted")
	}
	for _, want := range []string{"needs a [store] section", "4096-byte blocks only"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestBootstrapNeedsAnInitialClusterID: bootstrap is off unless asked for,
// and asking needs the cluster's UUID, in the canonical form.
func TestBootstrapNeedsAnInitialClusterID(t *testing.T) {
	const id = "6f1c2a94-0b3e-4d7a-9c55-2e8f10b6d3a1"
	c, err := Load(write(t, strings.Replace(clusterFile, "node_id = 2", "node_id = 2\nbootstrap = true\ninitial_cluster_id = \""+id+"\"", 1)))
	if err != nil || !c.Cluster.BootstrapEnabled() || c.Cluster.InitialClusterID.String() != id {
		t.Fatalf("err %v, cluster %+v", err, c)
	}
	for _, tt := range []struct{ add, want string }{
		{"bootstrap = true", "cluster.bootstrap needs cluster.initial_cluster_id"},
		{"bootstrap = true\ninitial_cluster_id = \"6f1c2a94\"", "malformed UUID"},
		{"initial_cluster_id = \"00000000-0000-0000-0000-000000000000\"", "zero UUID"},
		{"initial_cluster_id = 7", "initial_cluster_id"},
	} {
		_, err := Load(write(t, strings.Replace(clusterFile, "node_id = 2", "node_id = 2\n"+tt.add, 1)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err %v, want %q", tt.add, err, tt.want)
		}
	}
}

// sed applies one s/old/new/ (old a regexp; \n in new is a newline).
func sed(t *testing.T, text, expr string) string {
	t.Helper()
	parts := strings.Split(expr, "/")
	if len(parts) != 4 || parts[0] != "s" {
		t.Fatalf("bad sed expression %q", expr)
	}
	re := regexp.MustCompile(parts[1])
	return re.ReplaceAllLiteralString(text, strings.ReplaceAll(parts[2], `\n`, "\n"))
}
