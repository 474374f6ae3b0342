package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/auth"
	"basalt/pkg/cluster"
	"basalt/pkg/identity"
)

// kcluster is a 3-node Basalt cluster of basaltd processes on loopback whose
// NVMe ports are advertised as 10.0.2.2:<port>, the address under which a
// qemu guest (user networking) reaches them. Drives, write buffers and Raft
// logs are files in the test's temporary directory.
type kcluster struct {
	t     *testing.T
	bin   string
	nodes []*knode
	// clusterID is every node's initial_cluster_id.
	clusterID identity.ClusterUUID
	// secDir is what basaltd pki init wrote: a security directory per
	// node, admin.json; client uses its CA and admin token.
	secDir   string
	apiTLS   *tls.Config
	apiToken string
}

// knode is one basaltd process. start after kill reuses ports, config and
// state. start and kill may run in an OnMark callback: they report with
// Errorf, never Fatal, from there.
type knode struct {
	id       int
	dir      string
	cfg, log string
	nvmePort int
	api      string // host:port of the HTTPS API
	raft     string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	killedAt time.Time
}

// startKCluster writes the configs, starts every node and waits until all
// are active members answering their API.
func startKCluster(t *testing.T, n int) *kcluster {
	t.Helper()
	kc := &kcluster{t: t, bin: basaltdBinary(t), clusterID: identity.NewClusterUUID()}
	dir := t.TempDir()
	kc.initSecurity(filepath.Join(dir, "security"), n)
	for i := 1; i <= n; i++ {
		nd := &knode{id: i, dir: filepath.Join(dir, fmt.Sprintf("node%d", i)), nvmePort: freePort(t),
			api: fmt.Sprintf("127.0.0.1:%d", freePort(t)), raft: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
		nd.cfg, nd.log = filepath.Join(nd.dir, "basaltd.toml"), filepath.Join(dir, fmt.Sprintf("node%d.log", i))
		if err := os.MkdirAll(nd.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		kc.nodes = append(kc.nodes, nd)
	}
	for _, nd := range kc.nodes {
		if err := os.WriteFile(nd.cfg, []byte(kc.config(nd)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, nd := range kc.nodes {
			kc.kill(nd)
		}
		if t.Failed() {
			kc.dumpLogs(80)
		}
		kc.saveLogs()
	})
	for _, nd := range kc.nodes {
		kc.start(nd)
	}
	if t.Failed() {
		t.FailNow()
	}
	kc.eventually(60*time.Second, "every node is an active member and answers", kc.allActive)
	return kc
}

// config is node nd's basaltd.toml, in the shape scripts/run.sh writes.
func (kc *kcluster) config(nd *knode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[node]\nname = \"node%d\"\ndata_dir = %q\n\n", nd.id, nd.dir)
	fmt.Fprintf(&b, "[nvme]\nlisten = \"127.0.0.1:%d\"\nadvertise = \"10.0.2.2:%d\"\n\n", nd.nvmePort, nd.nvmePort)
	fmt.Fprintf(&b, "[log]\nlevel = \"info\"\n\n")
	fmt.Fprintf(&b, "[cluster]\nnode_id = %d\nraft_listen = %q\napi_listen = %q\nbootstrap = true\ninitial_cluster_id = %q\n",
		nd.id, nd.raft, nd.api, kc.clusterID)
	fmt.Fprintf(&b, "[security]\ndir = %q\n\n", filepath.Join(kc.secDir, fmt.Sprintf("node%d", nd.id)))
	for _, p := range kc.nodes {
		fmt.Fprintf(&b, "  [[cluster.peer]]\n  id = %d\n  name = \"node%d\"\n  raft = %q\n  nvme = \"10.0.2.2:%d\"\n  api = %q\n",
			p.id, p.id, p.raft, p.nvmePort, p.api)
	}
	// The store stages in memory: the Raft log holds every write until destaged.
	fmt.Fprintf(&b, "\n[store]\ndrives = [%q, %q, %q]\ndrive_size = \"256MiB\"\nbuffer = \"memory\"\nbuffer_size = \"64MiB\"\n"+
		"parity = 1\nchunk_size = \"32KiB\"\nsegment_stripes = 8\n",
		filepath.Join(nd.dir, "d0"), filepath.Join(nd.dir, "d1"), filepath.Join(nd.dir, "d2"))
	fmt.Fprintf(&b, "\n[raft_log]\npath = %q\nsize = \"64MiB\"\n", filepath.Join(nd.dir, "raft.log"))
	return b.String()
}

// start launches nd and waits (bounded) until its NVMe port accepts
// connections.
func (kc *kcluster) start(nd *knode) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd != nil {
		kc.t.Errorf("node%d: start while running", nd.id)
		return
	}
	logf, err := os.OpenFile(nd.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		kc.t.Errorf("node%d: %v", nd.id, err)
		return
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(kc.bin, "--config", nd.cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		kc.t.Errorf("node%d: start: %v", nd.id, err)
		return
	}
	exited := make(chan struct{})
	nd.cmd, nd.exited = cmd, exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	if err := waitListening(nd.nvmePort, exited, 30*time.Second); err != nil {
		kc.t.Errorf("node%d: %v", nd.id, err)
	}
}

// kill sends SIGKILL to nd and waits until it is gone; no-op if stopped.
func (kc *kcluster) kill(nd *knode) {
	nd.mu.Lock()
	cmd, exited := nd.cmd, nd.exited
	nd.cmd = nil
	nd.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
	nd.mu.Lock()
	nd.killedAt = time.Now()
	nd.mu.Unlock()
	nd.logLine("killed (SIGKILL) %s", time.Now().Format(time.RFC3339Nano))
}

// logLine appends a line to nd's log (the test's own notes between the
// daemon's lines).
func (nd *knode) logLine(format string, args ...any) {
	f, err := os.OpenFile(nd.log, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "=== "+format+"\n", args...)
}

func (nd *knode) running() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.cmd != nil
}

// client is a client of nd's API with the admin credentials.
func (kc *kcluster) client(nd *knode) *api.Client {
	return api.NewTLSClient(nd.api, kc.apiTLS, kc.apiToken)
}

// initSecurity runs basaltd pki init for n nodes into dir, as make run
// does, and reads the admin credentials.
func (kc *kcluster) initSecurity(dir string, n int) {
	kc.t.Helper()
	var ids []string
	for i := 1; i <= n; i++ {
		ids = append(ids, fmt.Sprint(i))
	}
	out, err := exec.Command(kc.bin, "pki", "init", "--dir", dir, "--cluster-id", kc.clusterID.String(),
		"--nodes", strings.Join(ids, ","), "--hosts", "127.0.0.1,localhost").CombinedOutput()
	if err != nil {
		kc.t.Fatalf("basaltd pki init: %v\n%s", err, out)
	}
	creds, err := auth.ReadCredentials(filepath.Join(dir, "admin.json"))
	if err != nil {
		kc.t.Fatal(err)
	}
	caPEM, err := os.ReadFile(creds.CAFile)
	if err != nil {
		kc.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	kc.secDir, kc.apiToken = dir, creds.Token
	kc.apiTLS = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
}

// up returns a running node other than the excluded ones.
func (kc *kcluster) up(except ...*knode) *knode {
	for _, nd := range kc.nodes {
		excluded := false
		for _, e := range except {
			excluded = excluded || e == nd
		}
		if !excluded && nd.running() {
			return nd
		}
	}
	return nil
}

func (kc *kcluster) allActive() bool {
	for _, nd := range kc.nodes {
		if !nd.running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		nodes, err := kc.client(nd).Nodes(ctx)
		cancel()
		if err != nil || len(nodes) != len(kc.nodes) {
			return false
		}
		for _, nv := range nodes {
			if nv.State != cluster.NodeActive || nv.Up != kc.nodes[nv.ID-1].running() {
				return false
			}
		}
	}
	return true
}

// volume reads the volume through a running node's API.
func (kc *kcluster) volume(name string) (api.VolumeView, error) {
	nd := kc.up()
	if nd == nil {
		return api.VolumeView{}, fmt.Errorf("no node is running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return kc.client(nd).Volume(ctx, name)
}

// createVolume creates a volume through the API and waits until it is
// healthy (a leader, every replica up).
func (kc *kcluster) createVolume(req api.CreateVolumeRequest) api.VolumeView {
	kc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kc.client(kc.up()).CreateVolume(ctx, req); err != nil {
		kc.t.Fatalf("creating volume %s: %v", req.Name, err)
	}
	return kc.waitHealthy(req.Name, 60*time.Second)
}

func (kc *kcluster) waitHealthy(name string, d time.Duration) api.VolumeView {
	kc.t.Helper()
	var v api.VolumeView
	kc.eventually(d, "volume "+name+" is healthy", func() bool {
		var err error
		v, err = kc.volume(name)
		return err == nil && v.Health == "healthy" && v.Leader != 0
	})
	return v
}

// leaderOf returns the node leading the volume's Raft group, or an error
// if there is none within d. Safe to call from OnMark.
func (kc *kcluster) leaderOf(name string, d time.Duration) (*knode, error) {
	deadline := time.Now().Add(d)
	for {
		v, err := kc.volume(name)
		if err == nil && v.Leader != 0 && int(v.Leader) <= len(kc.nodes) {
			return kc.nodes[v.Leader-1], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("volume %s has no leader after %s (last: %+v, %v)", name, d, v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventually polls cond every 100 ms until it holds or d passes.
func (kc *kcluster) eventually(d time.Duration, what string, cond func() bool) {
	kc.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			kc.t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// saveLogs copies the node logs to $BASALT_E2E_LOGDIR, if set.
func (kc *kcluster) saveLogs() {
	dir := os.Getenv("BASALT_E2E_LOGDIR")
	if dir == "" {
		return
	}
	stamp := time.Now().UnixNano()
	for _, nd := range kc.nodes {
		b, err := os.ReadFile(nd.log)
		if err != nil {
			continue
		}
		name := strings.NewReplacer("/", "_", " ", "_").Replace(kc.t.Name())
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.node%d.log", name, stamp, nd.id))
		if os.MkdirAll(dir, 0o755) == nil && os.WriteFile(path, b, 0o644) == nil {
			kc.t.Logf("node%d log saved to %s", nd.id, path)
		}
	}
}

func (kc *kcluster) dumpLogs(lines int) {
	for _, nd := range kc.nodes {
		b, _ := os.ReadFile(nd.log)
		kc.t.Logf("---- node%d log (%s), last %d lines ----\n%s", nd.id, nd.log, lines, tail(string(b), lines))
	}
}
