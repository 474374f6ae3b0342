// Package cluster_test runs whole Basalt clusters as processes on loopback:
// basaltd is built once into a temporary directory, every node gets its own
// ports, data directory and log, and the Raft traffic between every two
// nodes passes through a fault-injecting proxy (proxy_test.go), so that a
// test can partition a node away. Hosts are the user-space initiator
// (pkg/nvme/host) with its ANA-following MultiPath.
//
// BASALT_CLUSTER_TESTS=0 skips the process tests; -short runs the quick
// ones only.
package cluster_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/identity"
	"basalt/pkg/nvme/host"
	"basalt/pkg/pki"
	"basalt/tests/ports"

	"golang.org/x/sys/unix"
)

var basaltd string // path of the binary built by TestMain

func TestMain(m *testing.M) {
	if os.Getenv("BASALT_CLUSTER_TESTS") == "0" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "basalt-cluster-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	basaltd = filepath.Join(dir, "basaltd")
	build := exec.Command("go", "build", "-o", basaltd, "basalt/cmd/basaltd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building basaltd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needProcesses(t *testing.T) {
	t.Helper()
	if os.Getenv("BASALT_CLUSTER_TESTS") == "0" {
		t.Skip("BASALT_CLUSTER_TESTS=0")
	}
}

// opts configure a test cluster.
type opts struct {
	nodes int
	// store keeps replicas in the log-structured store; otherwise as files
	// (which a test can compare byte for byte after a clean stop).
	store bool
	// driveSize and raftLog override the store's drive size ("256MiB") and
	// the Raft log region's size ("64MiB").
	driveSize, raftLog string
	// raftLogOn is where the Raft log regions live (default tmpfs).
	raftLogOn medium
	// clusterConf is extra lines for every node's [cluster] section
	// ("down_out_interval = \"3s\"").
	clusterConf string
}

// medium is where a test cluster's nodes keep their Raft log regions. The
// store's write buffer of a test node is in process memory, whatever the
// medium.
type medium int

const (
	// onTmpfs: /dev/shm, as make run does (the test's temporary directory
	// where there is no /dev/shm). Persist is a no-op there (pmem's tmpfs
	// mode): a kill -9 keeps the pages; the region's own persistence is not
	// exercised.
	onTmpfs medium = iota
	// onDisk: the test's temporary directory (or BASALT_DISK_DIR), which
	// must be on a disk filesystem: every Persist is an msync of the file.
	// startCluster fails if it is on tmpfs or ramfs.
	onDisk
)

func (m medium) String() string {
	if m == onDisk {
		return "disk"
	}
	return "tmpfs"
}

// onEachMedium runs test once with the Raft logs on tmpfs and once on a
// disk file, as subtests raftlog=tmpfs and raftlog=disk.
func onEachMedium(t *testing.T, test func(t *testing.T, m medium)) {
	for _, m := range []medium{onTmpfs, onDisk} {
		t.Run("raftlog="+m.String(), func(t *testing.T) { test(t, m) })
	}
}

// node is one basaltd process and its addresses.
type node struct {
	id                  int
	dir, cfg, log       string
	nvme, api, raft     string
	cmd                 *exec.Cmd
	exited              chan struct{}
	proxiesTo           map[int]*proxy // this node → peer
	startedAt, killedAt time.Time
}

type testCluster struct {
	t   *testing.T
	o   opts
	dir string
	// logDir holds the Raft log regions (opts.raftLogOn); logDurable: its
	// filesystem is not tmpfs or ramfs, so basaltd maps them in a mode that
	// survives power loss (msync), which startCluster checks in the node logs.
	logDir     string
	logDurable bool
	nodes      []*node
	// clusterID is every node's initial_cluster_id.
	clusterID identity.ClusterUUID
	// secDir is what basaltd pki init wrote (security.go): each node's
	// security directory, admin.json and reader.json.
	secDir string
	sec    *security
	// clientOf overrides client for a node (an impostor's API, which is
	// not under the cluster's CA).
	clientOf map[int]*api.Client
}

// freePort returns a loopback address with a port free right now, never
// one it returned before (package ports says why not port 0).
func freePort(t *testing.T) string {
	t.Helper()
	return ports.FreeAddr(t)
}

// startCluster starts o.nodes nodes and waits until every one is
// registered in the metadata and answering.
func startCluster(t *testing.T, o opts) *testCluster {
	t.Helper()
	needProcesses(t)
	tc := &testCluster{t: t, o: o, dir: t.TempDir(), clusterID: identity.NewClusterUUID(), clientOf: map[int]*api.Client{}}
	tc.placeRaftLogs()
	tc.initSecurity()
	for i := 1; i <= o.nodes; i++ {
		n := &node{id: i, dir: filepath.Join(tc.dir, fmt.Sprintf("node%d", i)), nvme: freePort(t), api: freePort(t),
			raft: freePort(t), proxiesTo: map[int]*proxy{}}
		n.cfg, n.log = filepath.Join(n.dir, "basaltd.toml"), filepath.Join(tc.dir, fmt.Sprintf("node%d.log", i))
		if err := os.MkdirAll(n.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		tc.nodes = append(tc.nodes, n)
	}
	for _, from := range tc.nodes {
		for _, to := range tc.nodes {
			if from != to {
				from.proxiesTo[to.id] = newProxy(t, to.raft)
			}
		}
	}
	for _, n := range tc.nodes {
		tc.writeConfig(n)
		tc.start(n)
	}
	t.Cleanup(func() {
		for _, n := range tc.nodes {
			tc.kill(n)
		}
		if t.Failed() {
			tc.dumpLogs()
		}
	})
	tc.waitReady(30 * time.Second)
	for _, n := range tc.nodes {
		tc.checkRaftLogMode(n)
	}
	return tc
}

// placeRaftLogs chooses logDir for opts.raftLogOn and finds out whether its
// filesystem is a volatile one; for onDisk it must not be.
func (tc *testCluster) placeRaftLogs() {
	tc.t.Helper()
	tc.logDir = tc.dir
	base := "/dev/shm"
	if tc.o.raftLogOn == onDisk {
		base = os.Getenv("BASALT_DISK_DIR")
	}
	if base != "" {
		if dir, err := os.MkdirTemp(base, "basalt-test-"); err == nil {
			tc.logDir = dir
			tc.t.Cleanup(func() { os.RemoveAll(dir) })
		} else if tc.o.raftLogOn == onDisk {
			tc.t.Fatalf("BASALT_DISK_DIR: %v", err)
		}
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(tc.logDir, &fs); err != nil {
		tc.t.Fatalf("statfs %s: %v", tc.logDir, err)
	}
	tc.logDurable = fs.Type != unix.TMPFS_MAGIC && fs.Type != unix.RAMFS_MAGIC
	if tc.o.raftLogOn == onDisk && !tc.logDurable {
		tc.t.Fatalf("the Raft logs of this disk variant would be in %s, on tmpfs or ramfs (statfs type %#x), "+
			"where persisting is a no-op and the variant tests nothing more than the tmpfs one: set TMPDIR or "+
			"BASALT_DISK_DIR to a directory on a disk filesystem", tc.logDir, fs.Type)
	}
	tc.t.Logf("Raft logs in %s (statfs type %#x, survives power loss: %v)", tc.logDir, fs.Type, tc.logDurable)
}

// checkRaftLogMode checks that node n mapped its Raft log in the mode its
// directory's filesystem calls for: survives_power_loss=true (msync or dax)
// off tmpfs and ramfs, false on them.
func (tc *testCluster) checkRaftLogMode(n *node) {
	tc.t.Helper()
	b, err := os.ReadFile(n.log)
	if err != nil {
		tc.t.Fatal(err)
	}
	want := fmt.Sprintf("survives_power_loss=%v", tc.logDurable)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `msg="raft log mapped"`) {
			if !strings.Contains(line, want) {
				tc.t.Fatalf("node%d mapped its Raft log in %s in the wrong mode, want %s: %s", n.id, tc.logDir, want, line)
			}
			return
		}
	}
	tc.t.Fatalf("node%d's log has no \"raft log mapped\" line", n.id)
}

func (tc *testCluster) writeConfig(n *node) {
	var b strings.Builder
	fmt.Fprintf(&b, "[node]\nname = \"node%d\"\ndata_dir = %q\n\n", n.id, n.dir)
	fmt.Fprintf(&b, "[nvme]\nlisten = %q\nadvertise = %q\n\n", n.nvme, n.nvme)
	fmt.Fprintf(&b, "[log]\nlevel = \"info\"\n\n")
	fmt.Fprintf(&b, "[cluster]\nnode_id = %d\nraft_listen = %q\napi_listen = %q\nbootstrap = true\ninitial_cluster_id = %q\n",
		n.id, n.raft, n.api, tc.clusterID)
	b.WriteString(tc.o.clusterConf)
	for _, p := range tc.nodes {
		raft := p.raft
		if p != n {
			raft = n.proxiesTo[p.id].addr() // every Raft message to p crosses a proxy
		}
		fmt.Fprintf(&b, "  [[cluster.peer]]\n  id = %d\n  raft = %q\n  nvme = %q\n  api = %q\n", p.id, raft, p.nvme, p.api)
	}
	if tc.o.store {
		// No buffer file: the store stages in memory, the Raft log holds the writes.
		fmt.Fprintf(&b, "\n[store]\ndrives = [%q, %q, %q]\ndrive_size = %q\nbuffer_size = \"64MiB\"\n"+
			"chunk_size = \"32KiB\"\nsegment_stripes = 8\n",
			filepath.Join(n.dir, "d0"), filepath.Join(n.dir, "d1"), filepath.Join(n.dir, "d2"),
			cmp.Or(tc.o.driveSize, "256MiB"))
	}
	fmt.Fprintf(&b, "\n[raft_log]\npath = %q\nsize = %q\n", filepath.Join(tc.logDir, fmt.Sprintf("node%d.raft", n.id)),
		cmp.Or(tc.o.raftLog, "64MiB"))
	b.WriteString(tc.security(n.id, n.dir))
	if err := os.WriteFile(n.cfg, []byte(b.String()), 0o600); err != nil {
		tc.t.Fatal(err)
	}
}

// security gives node id its material, copied from what basaltd pki init
// wrote for it (credentials_test.go), into <dir>/security unless there
// already is some (a test's own), and returns its [security] section,
// which writeConfig puts last.
func (tc *testCluster) security(id int, dir string) string {
	tc.t.Helper()
	sec := filepath.Join(dir, "security")
	if len(pki.MissingFiles(sec)) > 0 {
		tc.copySecurity(id, sec)
	}
	return fmt.Sprintf("\n[security]\ndir = %q\n", sec)
}

func (tc *testCluster) start(n *node) {
	tc.t.Helper()
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		tc.t.Fatal(err)
	}
	fmt.Fprintf(logf, "\n==== start %s ====\n", time.Now().Format(time.TimeOnly))
	cmd := exec.Command(basaltd, "--config", n.cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		tc.t.Fatal(err)
	}
	n.cmd, n.exited, n.startedAt = cmd, make(chan struct{}), time.Now()
	go func(exited chan struct{}) {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}(n.exited)
}

// killAll sends SIGKILL to every node at once, then waits for them all.
func (tc *testCluster) killAll() {
	for _, n := range tc.nodes {
		_ = n.cmd.Process.Kill()
	}
	for _, n := range tc.nodes {
		tc.kill(n)
	}
}

// crashAll kills every node with SIGKILL, starts them again and returns
// the volume once it is healthy.
func (tc *testCluster) crashAll(volume string) api.VolumeView {
	tc.t.Helper()
	tc.killAll()
	for _, n := range tc.nodes {
		tc.start(n)
	}
	tc.waitReady(60 * time.Second)
	return tc.waitHealthy(volume, 60*time.Second)
}

// kill sends SIGKILL and waits for the process to end.
func (tc *testCluster) kill(n *node) {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	n.cmd, n.killedAt = nil, time.Now()
}

// stop sends SIGTERM and waits for a clean exit.
func (tc *testCluster) stop(n *node) {
	tc.t.Helper()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		tc.t.Errorf("node%d did not stop within 20 s of SIGTERM", n.id)
		tc.kill(n)
	}
	if code := n.cmd.ProcessState.ExitCode(); code != 0 {
		tc.t.Errorf("node%d exited with %d after SIGTERM", n.id, code)
	}
	n.cmd = nil
}

func (tc *testCluster) dumpLogs() {
	for _, n := range tc.nodes {
		b, _ := os.ReadFile(n.log)
		lines := strings.Split(string(b), "\n")
		tc.t.Logf("---- node%d log, last 40 lines ----\n%s", n.id, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// client is a client of n's API with the admin credentials.
func (tc *testCluster) client(n *node) *api.Client {
	if c := tc.clientOf[n.id]; c != nil {
		return c
	}
	return tc.sec.client(n.api, tc.sec.admin)
}

// up returns a node that is running.
func (tc *testCluster) up() *node {
	for _, n := range tc.nodes {
		if n.cmd != nil {
			return n
		}
	}
	tc.t.Fatal("no node is running")
	return nil
}

// eventually polls cond every 50 ms until it holds or d passes.
func (tc *testCluster) eventually(d time.Duration, what string, cond func() bool) {
	tc.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tc.t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (tc *testCluster) waitReady(d time.Duration) {
	tc.t.Helper()
	tc.eventually(d, "every node is up and registered", func() bool {
		for _, n := range tc.nodes {
			if n.cmd == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			nodes, err := tc.client(n).Nodes(ctx)
			cancel()
			if err != nil {
				return false
			}
			for _, nv := range nodes {
				running := tc.nodes[nv.ID-1].cmd != nil
				if nv.State != cluster.NodeActive || nv.Up != running {
					return false
				}
			}
		}
		return true
	})
}

// createVolume creates a volume that admits the tests' host (hostNQN) and
// waits until it is healthy.
func (tc *testCluster) createVolume(name string, size int64, rf int) api.VolumeView {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := tc.client(tc.up()).CreateVolume(ctx, api.CreateVolumeRequest{Name: name, Size: api.Size(size), RF: rf,
		Hosts: []string{hostNQN}})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.waitHealthy(name, 30*time.Second)
	return v
}

func (tc *testCluster) volume(name string) (api.VolumeView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return tc.client(tc.up()).Volume(ctx, name)
}

func (tc *testCluster) waitHealthy(name string, d time.Duration) api.VolumeView {
	tc.t.Helper()
	var v api.VolumeView
	tc.eventually(d, "volume "+name+" is healthy", func() bool {
		var err error
		v, err = tc.volume(name)
		return err == nil && v.Health == "healthy"
	})
	return v
}

// leaderOf returns the node leading the volume's group.
func (tc *testCluster) leaderOf(name string) *node {
	tc.t.Helper()
	var leader cluster.NodeID
	tc.eventually(15*time.Second, "volume "+name+" has a leader", func() bool {
		v, err := tc.volume(name)
		leader = v.Leader
		return err == nil && leader != 0
	})
	return tc.nodes[leader-1]
}

// partition cuts (or heals) every Raft link between n and the others.
func (tc *testCluster) partition(n *node, cut bool) {
	for _, o := range tc.nodes {
		if o != n {
			n.proxiesTo[o.id].setBlocked(cut)
			o.proxiesTo[n.id].setBlocked(cut)
		}
	}
}

// hostNQN is the NQN the test hosts connect as.
const hostNQN = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000ba5a1"

// dial connects a controller to n's path of the volume.
func dial(ctx context.Context, n *node, nqn string) (*host.Controller, error) {
	return host.Dial(ctx, n.nvme, host.Options{SubNQN: nqn, HostNQN: hostNQN, KATO: 2 * time.Second,
		QueueDepth: 64, DialTimeout: 2 * time.Second})
}

// connect returns a MultiPath over every running node's path.
func (tc *testCluster) connect(nqn string) (*host.MultiPath, func()) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ctrls []*host.Controller
	for _, n := range tc.nodes {
		if n.cmd == nil {
			continue
		}
		c, err := dial(ctx, n, nqn)
		if err != nil {
			tc.t.Fatalf("connecting to node%d: %v", n.id, err)
		}
		ctrls = append(ctrls, c)
	}
	return host.NewMultiPath(ctrls...), func() {
		for _, c := range ctrls {
			_ = c.Close()
		}
	}
}

// block returns a 4 KiB block whose first 16 bytes say which write it is.
func block(lba uint64, version uint64) []byte {
	b := make([]byte, 4096)
	for i := 0; i+16 <= len(b); i += 16 {
		putU64(b[i:], lba)
		putU64(b[i+8:], version)
	}
	return b
}

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func getU64(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// versionOf returns the version a block read back carries, or an error if
// it is not a whole block written by block() for lba (or all zeroes,
// version 0).
func versionOf(b []byte, lba uint64) (uint64, error) {
	if bytes.Equal(b, make([]byte, len(b))) {
		return 0, nil
	}
	v := getU64(b[8:])
	if !bytes.Equal(b, block(lba, v)) {
		return 0, errors.New("torn or foreign block")
	}
	return v, nil
}
