package cluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"net"
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
	"basalt/pkg/nvme/host"
)

// TestMakeRunOutlivesANode runs scripts/run.sh (what `make run` runs) the way
// a user would, kills -9 the volume's leader while a host reads and writes
// through every path, and checks what the README promises: the volume keeps
// serving through another node (every acknowledged write reads back, the
// history stays linearizable), the script says the node exited and restarts
// it by itself, and SIGINT (Ctrl-C) then stops all three nodes cleanly.
// Before the supervisor, the script stopped the other two nodes within a
// second of the kill.
func TestMakeRunOutlivesANode(t *testing.T) {
	needProcesses(t)
	bin := filepath.Dir(basaltd)
	buildTool(t, bin, "basalt/cmd/basaltctl")
	runDir := t.TempDir()
	nvmePort, apiPort, raftPort := freeRun(t), freeRun(t), freeRun(t)
	out := &syncBuffer{}
	cmd := exec.Command("bash", "scripts/run.sh")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "RUN_DIR="+runDir, "BIN="+bin, "BASALT_SHM_DIR="+filepath.Join(runDir, "shm"),
		"BASALT_VOLUME_SIZE=256MiB", "BASALT_ADVERTISE_HOST=127.0.0.1", "BASALT_LISTEN_HOST=127.0.0.1",
		fmt.Sprintf("BASALT_NVME_PORT=%d", nvmePort), fmt.Sprintf("BASALT_API_PORT=%d", apiPort),
		fmt.Sprintf("BASALT_RAFT_PORT=%d", raftPort), "BASALT_HOSTNQN="+hostNQN)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("run.sh output:\n%s", out.String())
			for i := 1; i <= 3; i++ {
				b, _ := os.ReadFile(filepath.Join(runDir, fmt.Sprintf("node%d.log", i)))
				t.Logf("node%d.log (end):\n%s", i, tail(string(b), 3000))
			}
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for i := 1; i <= 3; i++ {
			if pid := nodePID(runDir, i); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}()
	waitOutput(t, out, "basalt: running", 120*time.Second)
	// The volume admits the test's host with the DH-HMAC-CHAP secret
	// run.sh kept, and prints the commands that connect with it.
	secret, err := os.ReadFile(filepath.Join(runDir, "dhchap-secret"))
	if err != nil {
		t.Fatal(err)
	}
	dhchap := strings.TrimSpace(string(secret))
	for _, want := range []string{"Host allowed: " + hostNQN, fmt.Sprintf(
		"nvme connect-all -t tcp -a 127.0.0.1 -s %d --hostnqn %s --dhchap-secret %s", nvmePort, hostNQN, dhchap)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run.sh does not print %q", want)
		}
	}

	// The API is HTTPS with the tokens pki init drew: run.sh says where
	// the admin credentials are, and never prints a token.
	credFile := filepath.Join(runDir, "security", "admin.json")
	waitOutput(t, out, "export BASALT_CREDENTIALS="+credFile, time.Second)
	creds, err := auth.ReadCredentials(credFile)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := auth.ReadCredentials(filepath.Join(runDir, "security", "reader.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), creds.Token) || strings.Contains(out.String(), reader.Token) {
		t.Error("run.sh printed a token")
	}
	caPEM, err := os.ReadFile(creds.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := api.NewTLSClient(fmt.Sprintf("127.0.0.1:%d", apiPort), &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool},
		creds.Token)
	v := volumeView(t, client, "vol1")
	noSecret, err := host.Dial(context.Background(), fmt.Sprintf("127.0.0.1:%d", nvmePort), host.Options{
		SubNQN: v.NQN, HostNQN: hostNQN, KATO: 2 * time.Second, DialTimeout: 2 * time.Second})
	if err == nil {
		noSecret.Close()
		t.Error("the host connected without its DH-HMAC-CHAP secret")
	} else {
		t.Logf("without its secret the host is refused: %v", err)
	}
	var ctrls []*host.Controller
	for i := range 3 {
		c, err := host.Dial(context.Background(), fmt.Sprintf("127.0.0.1:%d", nvmePort+i), host.Options{
			SubNQN: v.NQN, HostNQN: hostNQN, DHCHAPSecret: dhchap, KATO: 2 * time.Second, QueueDepth: 64,
			DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("connecting to node%d: %v", i+1, err)
		}
		defer c.Close()
		ctrls = append(ctrls, c)
	}
	w := newWorkload(host.NewMultiPath(ctrls...))
	lbas := seqLBAs(16)
	ctx, stopLoad := context.WithCancel(context.Background())
	wg := w.run(ctx, 4, lbas, 0.6, 15*time.Second)
	time.Sleep(1500 * time.Millisecond)

	leader := int(v.Leader)
	pid := nodePID(runDir, leader)
	if leader == 0 || pid <= 0 {
		t.Fatalf("leader node%d has no process (pid %d)", leader, pid)
	}
	killedAt := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed node%d (the leader, pid %d)", leader, pid)
	time.Sleep(4 * time.Second)
	stopLoad()
	wg.Wait()
	pause, ok := w.pauseAfter(killedAt)
	if !ok {
		t.Fatal("no write completed after the leader was killed: the cluster did not keep serving")
	}
	t.Logf("writes paused %v after the kill", pause.Round(time.Millisecond))
	if pause > maxPause {
		t.Errorf("failover paused writes for %v, want < %v", pause, maxPause)
	}
	w.finalReads(t, lbas)
	w.checkLinearizable(t)

	waitOutput(t, out, fmt.Sprintf("basalt: node%d exited killed by signal 9", leader), 10*time.Second)
	waitOutput(t, out, fmt.Sprintf("basalt: restarting node%d", leader), 10*time.Second)
	deadline := time.Now().Add(60 * time.Second)
	for {
		np := nodePID(runDir, leader)
		cv, err := client.Cluster(context.Background())
		if np > 0 && np != pid && err == nil && cv.NodesUp == 3 && volumeView(t, client, "vol1").Health == "healthy" {
			t.Logf("node%d is back (pid %d) and vol1 is healthy", leader, np)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node%d did not come back: pid %d, cluster %+v, err %v", leader, np, cv, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run.sh after Ctrl-C: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run.sh did not stop within 30 s of SIGINT")
	}
	if !strings.Contains(out.String(), "basalt: stopped") {
		t.Error("run.sh did not say it stopped")
	}
	for i := 1; i <= 3; i++ {
		if p := nodePID(runDir, i); p > 0 {
			t.Errorf("node%d (pid %d) still runs after run.sh stopped", i, p)
		}
	}
}

func buildTool(t *testing.T, dir, pkg string) {
	t.Helper()
	build := exec.Command("go", "build", "-o", dir+"/", pkg)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
}

// freeRun returns the first of three consecutive loopback ports nobody
// listens on, below the ephemeral range (package ports says why).
func freeRun(t *testing.T) int {
	t.Helper()
	for range 1000 {
		base := 20000 + rand.IntN(12000)
		ok := true
		for i := range 3 {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no three consecutive free ports")
	return 0
}

// nodePID returns the PID of the basaltd serving node i of the make run
// cluster in runDir, or 0.
func nodePID(runDir string, i int) int {
	want := []byte(filepath.Join(runDir, fmt.Sprintf("node%d", i), "basaltd.toml"))
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, want) || !bytes.Contains(b, []byte("basaltd")) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !bytes.Contains(st, []byte(") Z ")) {
				return pid
			}
		}
	}
	return 0
}

func volumeView(t *testing.T, c *api.Client, name string) api.VolumeView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Volume(ctx, name)
	if err != nil {
		t.Fatalf("volume show %s: %v", name, err)
	}
	return v
}

func waitOutput(t *testing.T, out *syncBuffer, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("run.sh did not print %q within %v", want, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// syncBuffer is a bytes.Buffer safe for the writer goroutines of exec.Cmd
// and the test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
