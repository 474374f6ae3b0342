package e2e

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"basalt/pkg/identity"
)

// The DAX test's guest: its NVDIMM, the volume, and the latency runs.
const (
	daxNVDIMMBytes = 1 << 30
	daxVolume      = "dax"
	daxVolumeSize  = "64MiB"
	// daxLatWrites is the number of timed writes in each latency run
	// (three through basaltd: dax, msync, dax again).
	daxLatWrites = 500
)

// TestDAXRaftLogInGuest runs basaltd inside the guest, a one-node cluster
// whose Raft log (and metadata and drives) live on ext4 -o dax on qemu's
// emulated NVDIMM (ndctl puts the label-less namespace in fsdax mode; see
// guest/dax.sh). It checks that the node maps its Raft log with MAP_SYNC
// (mode dax), that the guest's kernel host, connected over loopback, reads
// back every write it flushed, across a kill -9 of basaltd in the middle of
// those writes and a restart on the same files, and that
// raft_log.persist = "msync" gives the msync mode on the same file. It logs
// 4 KiB QD 1 write latency with each (a measurement, not asserted).
func TestDAXRaftLogInGuest(t *testing.T) {
	Setup(t)
	if err := qemuHasNVDIMM(); err != nil {
		t.Skipf("qemu cannot emulate an NVDIMM: %v", err)
	}
	began := time.Now()
	files := daxGuestFiles(t)
	vars := map[string]string{
		"HOSTNQN": hostNQN, "CLUSTER_ID": identity.NewClusterUUID().String(),
		"VOLUME": daxVolume, "VOLUME_SIZE": daxVolumeSize, "LAT_N": strconv.Itoa(daxLatWrites),
	}
	script := GuestScript(vars, []string{"dax.sh"}, "dax_flow\n")
	r := Boot(t, BootOptions{Script: script, Timeout: 6 * time.Minute, Files: files,
		NVDIMM: &NVDIMM{Path: filepath.Join(t.TempDir(), "nvdimm.img"), Size: daxNVDIMMBytes}})
	RequireOK(t, r)
	kv := KV(r.Console)
	checkDAXSetup(t, kv)
	checkDAXModes(t, kv)
	checkDAXKill(t, r.Console, kv)
	logDAXLatency(t, kv)
	CheckDmesg(t, r.Console, map[string][]*regexp.Regexp{"dax-kill": daxKillNVMeLines, "dax-msync": FailoverNVMeLines})
	if w, _ := Section(r.Console, "basaltd-warnings"); w != "" {
		t.Logf("basaltd's warnings and errors in the guest:\n%s", w)
	}
	t.Logf("test took %s (guest %s)", time.Since(began).Round(100*time.Millisecond), r.Elapsed.Round(100*time.Millisecond))
}

// daxKillNVMeLines are FailoverNVMeLines and the timeout of the killed
// connection's keep-alive as request 0x1 instead of 0x0 (seen on a loaded
// machine, followed at once by "long keepalive RTT" and "failed
// nvme_keep_alive_end_io", the keep-alive's own lines).
var daxKillNVMeLines = append([]*regexp.Regexp{
	regexp.MustCompile(`^nvme nvme\d+: queue 0: timeout request 0x1 type 4$`),
}, FailoverNVMeLines...)

// qemuHasNVDIMM reports why the installed qemu cannot emulate an NVDIMM,
// or nil if it can.
func qemuHasNVDIMM() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "qemu-system-x86_64", "-device", "nvdimm,help").CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-system-x86_64 -device nvdimm,help: %w: %s", err, out)
	}
	if !strings.Contains(string(out), "memdev") {
		return fmt.Errorf("qemu-system-x86_64 -device nvdimm,help lists no memdev: %s", out)
	}
	return nil
}

func checkDAXSetup(t *testing.T, kv map[string]string) {
	t.Helper()
	t.Logf("NVDIMM namespace: %s before ndctl, %s after (sysfs: %s); /dev/pmem0 dax=%s; mount: %s",
		kv["ns_mode_before"], kv["ns_mode"], kv["ns_sysfs_mode"], kv["pmem_dax"], kv["dax_mount"])
	if kv["ns_mode"] != "fsdax" || kv["pmem_dax"] != "1" || !strings.Contains(kv["dax_mount"], "dax") {
		t.Errorf("the guest has no DAX filesystem: namespace %q, pmem0 dax %q, mount %q",
			kv["ns_mode"], kv["pmem_dax"], kv["dax_mount"])
	}
}

// daxModeRE picks the mode out of basaltd's "raft log mapped" line (slog
// text: mode=msync, or mode="dax (MAP_SYNC, clwb)").
var daxModeRE = regexp.MustCompile(`msg="raft log mapped" .*mode=("[^"]*"|\S+)`)

func raftLogMode(line string) string {
	m := daxModeRE.FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return strings.Trim(m[1], `"`)
}

func checkDAXModes(t *testing.T, kv map[string]string) {
	t.Helper()
	for _, c := range []struct{ key, want string }{
		{"persist_dax_mode", "dax (MAP_SYNC, "}, {"persist_msync_mode", "msync"},
	} {
		if !strings.HasPrefix(kv[c.key], c.want) {
			t.Errorf("%s: guestio persist mapped its region in mode %q, want %q...", c.key, kv[c.key], c.want)
		}
	}
	for _, c := range []struct{ key, want string }{
		{"raftlog_dax", "dax (MAP_SYNC, "}, {"raftlog_dax_restart", "dax (MAP_SYNC, "}, {"raftlog_msync", "msync"},
		{"raftlog_dax_again", "dax (MAP_SYNC, "},
	} {
		mode := raftLogMode(kv[c.key])
		t.Logf("%s: raft log mode %q", strings.TrimPrefix(c.key, "raftlog_"), mode)
		if !strings.HasPrefix(mode, c.want) {
			t.Errorf("%s: basaltd mapped its Raft log in mode %q, want %q...; its line: %q", c.key, mode, c.want, kv[c.key])
		}
	}
}

func checkDAXKill(t *testing.T, console string, kv map[string]string) {
	t.Helper()
	atKill, _ := strconv.Atoi(kv["acked_at_kill"])
	total, _ := strconv.Atoi(kv["acked_total"])
	t.Logf("kill -9 of basaltd after %d flushed writes (status %s); %d in all after the restart; controller %s after the kill",
		atKill, kv["basaltd_rc_kill"], total, kv["state_after_kill"])
	if kv["basaltd_rc_kill"] != "137" || atKill < 64 || total < atKill+64 || kv["writer_rc"] != "0" {
		t.Errorf("kill -9: basaltd status %q (want 137), %d writes acknowledged before the kill and %d in all, writer status %q",
			kv["basaltd_rc_kill"], atKill, total, kv["writer_rc"])
	}
	if kv["basaltd_rc_term"] != "0" || kv["basaltd_rc_term2"] != "0" || kv["basaltd_rc_end"] != "0" {
		t.Errorf("basaltd exit status after SIGTERM: %q before the msync run, %q after it, %q at the end; want 0",
			kv["basaltd_rc_term"], kv["basaltd_rc_term2"], kv["basaltd_rc_end"])
	}
	out, ok := Section(console, "verify-after-kill")
	if !ok {
		t.Fatal("no verify-after-kill section in the console")
	}
	want := fmt.Sprintf("verified %d acknowledged writes from /tmp/ack.B, 0 mismatched", total)
	if !strings.Contains(out, "verified 256 acknowledged writes from /tmp/ack.A, 0 mismatched") || !strings.Contains(out, want) {
		t.Errorf("verification after the kill:\n%s\nwant 256 writes of ack.A and %d of ack.B, none mismatched", out, total)
	}
	t.Logf("after the restart: %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
}

// logDAXLatency logs the QD 1 write latency through basaltd with each
// persistence of its Raft log (write-back before and after the msync run, so
// that a drift of the machine's load shows), and the latency of Persist
// alone, with the ratios msync / write-back.
func logDAXLatency(t *testing.T, kv map[string]string) {
	t.Helper()
	logLatencies(t, kv, "lat", "QD 1 4 KiB O_DIRECT write through basaltd, Raft log persisted by", "dax", "msync", "dax2")
	logLatencies(t, kv, "persist", "pmem Persist of a 4 KiB + 64 B record (no basaltd), by", "dax", "msync")
}

// logLatencies logs the runs labels (write-back ones named dax*, one named
// msync) and the ratio of msync to the mean of the write-back runs.
func logLatencies(t *testing.T, kv map[string]string, prefix, what string, labels ...string) {
	t.Helper()
	get := func(label, k string) float64 {
		key := prefix + "_" + label + "_" + k
		v, err := strconv.ParseFloat(kv[key], 64)
		if err != nil || v <= 0 {
			t.Errorf("%s: %q: %v", key, kv[key], err)
		}
		return v
	}
	stats := []string{"avg_us", "p50_us", "p99_us"}
	dax := map[string]float64{}
	runs := 0
	for _, label := range labels {
		t.Logf("%s %-5s: n=%s avg %.1f us, p50 %.1f us, p99 %.1f us, min %.1f us, max %.1f us", what,
			label, kv[prefix+"_"+label+"_n"], get(label, "avg_us"), get(label, "p50_us"), get(label, "p99_us"),
			get(label, "min_us"), get(label, "max_us"))
		if strings.HasPrefix(label, "dax") {
			runs++
			for _, s := range stats {
				dax[s] += get(label, s)
			}
		}
	}
	ratio := func(s string) float64 { return get("msync", s) / (dax[s] / float64(runs)) }
	if runs > 0 && !t.Failed() {
		t.Logf("%s: msync / dax (cache-line write-back, mean of %d runs): avg %.2fx, p50 %.2fx, p99 %.2fx (qemu %s: emulated NVDIMM, not real persistent memory)",
			prefix, runs, ratio("avg_us"), ratio("p50_us"), ratio("p99_us"), qemuAccel())
	}
}

func qemuAccel() string {
	if a := os.Getenv("BASALT_E2E_ACCEL"); a != "" {
		return a
	}
	return "tcg"
}

var (
	guestBinOnce sync.Once
	guestBinDir  string
	guestBinErr  error
)

// daxGuestFiles returns basaltd, basaltctl and guestio, built static
// (CGO_ENABLED=0) once per test binary, as files for the guest's /bin.
// $BASALT_E2E_BASALTD replaces the built basaltd when it is static.
func daxGuestFiles(t *testing.T) []GuestFile {
	t.Helper()
	guestBinOnce.Do(func() { guestBinDir, guestBinErr = buildGuestBinaries() })
	if guestBinErr != nil {
		t.Fatal(guestBinErr)
	}
	paths := map[string]string{}
	for _, name := range []string{"basaltd", "basaltctl", "guestio"} {
		paths[name] = filepath.Join(guestBinDir, name)
	}
	if bin := os.Getenv("BASALT_E2E_BASALTD"); bin != "" {
		if err := isStatic(bin); err != nil {
			t.Logf("BASALT_E2E_BASALTD %s cannot run in the guest (%v): using basaltd built from this tree", bin, err)
		} else {
			paths["basaltd"] = bin
		}
	}
	var files []GuestFile
	for _, name := range []string{"basaltd", "basaltctl", "guestio"} {
		data, err := os.ReadFile(paths[name])
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, GuestFile{Name: "bin/" + name, Mode: 0o755, Data: data})
	}
	return files
}

func buildGuestBinaries() (string, error) {
	dir, err := os.MkdirTemp("", "basalt-e2e-guestbin-")
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("go toolchain not in PATH: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-ldflags=-s -w", "-o", dir+string(os.PathSeparator),
		"basalt/cmd/basaltd", "basalt/cmd/basaltctl", "basalt/tests/e2e/guestio")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the guest's binaries: %w\n%s", err, out)
	}
	return dir, nil
}

// isStatic returns an error if the ELF file at path needs a dynamic loader.
func isStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked")
		}
	}
	return nil
}
