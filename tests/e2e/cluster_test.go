package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
)

// The multipath test's volume and bounds.
const (
	mpVolume      = "mp"
	mpVolumeBytes = 256 << 20
	// mpMaxIOPause bounds the longest single 4 KiB I/O the guest sees across
	// the failover. The goal is < 2 s on real hardware; the guest runs
	// under qemu TCG on a loaded 2-core machine, next to three basaltd.
	mpMaxIOPause = 10 * time.Second
	// mpLoopBlocks is LOOP_MAX of guest/multipath.sh: the I/O loop cycles
	// over that many 4 KiB blocks.
	mpLoopBlocks = 256
)

// TestKernelHostMultipathFailover attaches a Debian 12 kernel host to a
// volume replicated on a 3-node cluster through native NVMe multipath:
// discovery through one node lists the volume at every node (distinct port
// IDs), connect-all makes one controller per node in one subsystem with
// one block device, the leader's path optimized and the others inaccessible.
// The leader is then killed -9 under verified 4 KiB direct writes and reads:
// no I/O error may reach the guest, the longest I/O stays under
// mpMaxIOPause, another path becomes optimized, and after the killed node
// is restarted its path comes back live and inaccessible. Everything written
// reads back, and the kernel log has nothing but the dead path's recovery.
func TestKernelHostMultipathFailover(t *testing.T) {
	Setup(t)
	began := time.Now()
	kc := startKCluster(t, 3)
	v := kc.createVolume(api.CreateVolumeRequest{Name: mpVolume, Size: mpVolumeBytes, RF: 3, Hosts: []string{hostNQN}})
	t.Logf("cluster up and volume %s (%s) healthy in %s; leader node%d",
		mpVolume, v.NQN, time.Since(began).Round(100*time.Millisecond), v.Leader)

	entry := kc.nodes[0]
	vars := map[string]string{
		"ADDR": "10.0.2.2", "PORT": strconv.Itoa(entry.nvmePort),
		"SUBNQN": v.NQN, "HOSTNQN": hostNQN, "NPATHS": strconv.Itoa(len(kc.nodes)),
	}
	body := "node_kill() { mark kill-leader; }\nnode_restart() { mark restart-killed; }\nmultipath_flow\n"
	script := GuestScript(vars, []string{"multipath.sh"}, body)

	var killed *knode
	var restarted bool
	onMark := func(name string) {
		switch name {
		case "kill-leader":
			at := time.Now()
			if killed != nil {
				t.Errorf("guest asked for a second kill")
				return
			}
			l, err := kc.leaderOf(mpVolume, 10*time.Second)
			if err != nil {
				t.Errorf("kill-leader: %v", err)
				return
			}
			killed = l
			kc.kill(l)
			t.Logf("killed node%d (leader of %s, NVMe port %d) with SIGKILL %v after the mark",
				l.id, mpVolume, l.nvmePort, time.Since(at).Round(time.Millisecond))
		case "restart-killed":
			if killed == nil || restarted {
				t.Errorf("guest asked for a restart without a killed node")
				return
			}
			restarted = true
			at := time.Now()
			kc.start(killed)
			t.Logf("restarted node%d (listening after %s)", killed.id, time.Since(at).Round(time.Millisecond))
		default:
			t.Errorf("unexpected guest mark %q", name)
		}
	}
	r := Boot(t, BootOptions{Script: script, Timeout: 5 * time.Minute, OnMark: onMark})
	RequireOK(t, r)
	if killed == nil || !restarted {
		t.Fatalf("the guest did not ask for the kill and the restart (killed %v, restarted %v)", killed != nil, restarted)
	}
	checkMultipathDiscovery(t, r.Console, kc, v.NQN)
	checkMultipathPaths(t, r.Console, kc, killed)
	checkMultipathIO(t, r.Console)
	CheckDmesg(t, r.Console, multipathDmesgAllow)

	after := kc.waitHealthy(mpVolume, 60*time.Second)
	if int(after.Leader) == killed.id {
		t.Logf("note: node%d leads %s again after its restart", killed.id, mpVolume)
	}
	t.Logf("test took %s", time.Since(began).Round(100*time.Millisecond))
}

// MultipathFailoverNVMeLines are the host-driver lines allowed while the
// leader's node is dead and comes back: the dead path's TCP error recovery
// and reconnect attempts, the multipath head requeuing I/O while no path is
// usable (between the dead leader and the new leader's ANA change), and
// KilledConnectionNVMeLines. I/O timeouts, aborts, C2HTermReq, protocol
// errors and I/O errors stay forbidden, and so does everything else in
// every other phase.
var MultipathFailoverNVMeLines = append([]*regexp.Regexp{
	regexp.MustCompile(`^nvme nvme\d+: starting error recovery$`),
	regexp.MustCompile(`^nvme nvme\d+: failed to connect socket: -111$`),
	regexp.MustCompile(`^nvme nvme\d+: Failed reconnect attempt \d+$`),
	regexp.MustCompile(`^nvme nvme\d+: Reconnecting in \d+ seconds\.\.\.$`),
	regexp.MustCompile(`^nvme nvme\d+: Successfully reconnected \(\d+ attempts?\)$`),
	regexp.MustCompile(`^block nvme\d+n\d+: no usable path - requeuing I/O$`),
}, KilledConnectionNVMeLines...)

var multipathDmesgAllow = map[string][]*regexp.Regexp{"mp-failover": MultipathFailoverNVMeLines}

// checkMultipathDiscovery: one discovery log entry per node for the
// volume, each with the node's port ID and its advertised address.
func checkMultipathDiscovery(t *testing.T, console string, kc *kcluster, nqn string) {
	t.Helper()
	out := section(t, console, "discover")
	byPort := map[string]*knode{}
	for _, nd := range kc.nodes {
		byPort[strconv.Itoa(nd.nvmePort)] = nd
	}
	var entries []map[string]string
	portIDs := map[string]bool{}
	for _, e := range discoveryEntries(out) {
		if e["subtype"] != "nvme subsystem" || e["subnqn"] != nqn {
			continue
		}
		entries = append(entries, e)
		portIDs[e["portid"]] = true
		nd := byPort[e["trsvcid"]]
		switch {
		case nd == nil:
			t.Errorf("discovery entry with trsvcid %q that no node listens on", e["trsvcid"])
		case e["portid"] != strconv.Itoa(nd.id):
			t.Errorf("discovery entry for node%d: portid %q, want %d", nd.id, e["portid"], nd.id)
		}
		if e["traddr"] != "10.0.2.2" || e["trtype"] != "tcp" || e["adrfam"] != "ipv4" {
			t.Errorf("discovery entry %v: want trtype tcp, adrfam ipv4, traddr 10.0.2.2", e)
		}
		if !strings.HasPrefix(e["treq"], "not specified") {
			t.Errorf("discovery entry treq = %q, want \"not specified\"", e["treq"])
		}
	}
	if len(entries) != len(kc.nodes) || len(portIDs) != len(kc.nodes) {
		t.Errorf("discovery through node%d: %d entries for %s with %d distinct port IDs, want %d and %d:\n%s",
			kc.nodes[0].id, len(entries), nqn, len(portIDs), len(kc.nodes), len(kc.nodes), out)
	}
}

// pathLine is one line of the guest's show_paths output.
type pathLine struct{ ctrl, port, state, ana string }

var pathLineRE = regexp.MustCompile(`^path (nvme\d+) port=(\d*) state=(\S*) ana=(\S*)$`)

func parsePaths(t *testing.T, console, name string) (paths []pathLine, blockdevs []string) {
	t.Helper()
	for _, line := range strings.Split(section(t, console, name), "\n") {
		if m := pathLineRE.FindStringSubmatch(line); m != nil {
			paths = append(paths, pathLine{m[1], m[2], m[3], m[4]})
		}
		if dev, ok := strings.CutPrefix(line, "blockdev "); ok && strings.HasSuffix(dev, " dev=yes") {
			blockdevs = append(blockdevs, "/dev/"+strings.TrimSuffix(dev, " dev=yes"))
		}
	}
	return paths, blockdevs
}

// pathSummary counts paths by "state ana", e.g. "live optimized".
func pathSummary(paths []pathLine) map[string]int {
	m := map[string]int{}
	for _, p := range paths {
		m[p.state+" "+p.ana]++
	}
	return m
}

// listSubsysSummary counts the "+- nvmeN tcp ... <state> <ana>" lines of
// `nvme list-subsys <dev>` by their last two words.
func listSubsysSummary(out string) map[string]int {
	m := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "+-" && f[2] == "tcp" {
			m[f[len(f)-2]+" "+f[len(f)-1]]++
		}
	}
	return m
}

func sameCounts(got map[string]int, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// checkMultipathPaths: three controllers in one subsystem, one block
// device, the optimized path on the leader, moving to a survivor when the
// leader dies, and the killed node's path back as inaccessible.
func checkMultipathPaths(t *testing.T, console string, kc *kcluster, killed *knode) {
	t.Helper()
	kv := KV(console)
	n := len(kc.nodes)
	if c := strings.Fields(kv["ctrls"]); len(c) != n {
		t.Errorf("controllers for the volume: %q, want %d", c, n)
	}
	nodeOfPort := map[string]int{}
	for _, nd := range kc.nodes {
		nodeOfPort[strconv.Itoa(nd.nvmePort)] = nd.id
	}
	phases := []struct {
		section, listSubsys string
		want                map[string]int
	}{
		{"paths-before", "list-subsys-dev", map[string]int{"live optimized": 1, "live inaccessible": n - 1}},
		{"paths-failover", "list-subsys-failover", map[string]int{"live optimized": 1, "live inaccessible": n - 2}},
		{"paths-after", "list-subsys-after", map[string]int{"live optimized": 1, "live inaccessible": n - 1}},
	}
	for _, ph := range phases {
		paths, devs := parsePaths(t, console, ph.section)
		got := pathSummary(paths)
		if ph.section == "paths-failover" {
			for _, p := range paths {
				if p.port == strconv.Itoa(killed.nvmePort) {
					if p.state != "connecting" && p.state != "resetting" {
						t.Errorf("%s: the killed node's path %s is %q, want connecting", ph.section, p.ctrl, p.state)
					}
					delete(got, p.state+" "+p.ana)
				}
			}
		}
		if len(paths) != n || !sameCounts(got, ph.want) {
			t.Errorf("%s: paths %v, want %d paths with %v (plus the killed one while it is down)", ph.section, paths, n, ph.want)
		}
		if len(devs) != 1 || devs[0] != kv["dev"] {
			t.Errorf("%s: block devices with a /dev node %v, want only the multipath head %s", ph.section, devs, kv["dev"])
		}
		ls := listSubsysSummary(section(t, console, ph.listSubsys))
		if ls["live optimized"] != 1 || ls["live inaccessible"] != ph.want["live inaccessible"] {
			t.Errorf("nvme list-subsys (%s): %v, want 1 live optimized and %d live inaccessible:\n%s",
				ph.listSubsys, ls, ph.want["live inaccessible"], section(t, console, ph.listSubsys))
		}
	}
	if p := kv["optimized_port_before"]; p != strconv.Itoa(killed.nvmePort) {
		t.Errorf("optimized path before the kill on port %s (node%d), but the leader was node%d (port %d)",
			p, nodeOfPort[p], killed.id, killed.nvmePort)
	}
	after := kv["optimized_port_after"]
	if after == strconv.Itoa(killed.nvmePort) || nodeOfPort[after] == 0 {
		t.Errorf("optimized path after the kill on port %q, want another node's", after)
	}
	t.Logf("optimized path: node%d (%s) before the kill, node%d (%s) after",
		killed.id, kv["optimized_before"], nodeOfPort[after], kv["optimized_after"])
	if d := section(t, console, "disconnect"); !strings.Contains(d, fmt.Sprintf("disconnected %d controller", n)) {
		t.Errorf("nvme disconnect: %q, want %d controllers disconnected", d, n)
	}
}

// checkMultipathIO: the I/O loop ran through the failover without an
// error, with enough blocks after the kill, every block verified, and the
// longest single I/O under mpMaxIOPause. It reports the pause the guest saw.
func checkMultipathIO(t *testing.T, console string) {
	t.Helper()
	kv := KV(console)
	num := func(k string) int {
		v, err := strconv.Atoi(kv[k])
		if err != nil {
			t.Errorf("guest value %s = %q: %v", k, kv[k], err)
		}
		return v
	}
	blocks, after, verified := num("loop_blocks"), num("loop_blocks_after_kill"), num("verified_loop_blocks")
	if kv["loop_rc"] != "0" || blocks < 25 || after < 15 || verified != min(blocks, mpLoopBlocks) {
		t.Errorf("I/O loop: rc %q, %d blocks (%d after the kill), %d verified at the end; want rc 0, >= 25, >= 15, all",
			kv["loop_rc"], blocks, after, verified)
	}
	cs := func(k string) time.Duration { return time.Duration(num(k)) * 10 * time.Millisecond }
	kill, dead := cs("kill_cs"), cs("dead_cs")
	if dead-kill > 10*time.Second {
		t.Errorf("the host saw the leader's path die %v after the kill mark, want < 10s", dead-kill)
	}
	loopLog := section(t, console, "loop-log")
	first, ok := loopWrite(loopLog, kv["kill_block"])
	if !ok {
		t.Errorf("loop log has no block %q (the first write after the kill)", kv["kill_block"])
	}
	maxIO, maxIOAt, maxGap := cs("loop_max_io_cs"), cs("loop_max_io_at_cs"), cs("loop_max_gap_cs")
	t.Logf("FIGURE kernel multipath failover pause (guest, 4 KiB O_DIRECT write issued once the leader's path was dead): %v", first)
	t.Logf("guest timeline from the kill mark: path dead seen +%v, new optimized path seen (0.2 s polling) +%v, "+
		"killed node restarted +%v, its path live again +%v", dead-kill, cs("new_optimized_cs")-kill,
		cs("restart_cs")-kill, cs("rejoined_cs")-kill)
	t.Logf("longest single I/O of the loop %v (started at kill%s); longest gap between verified blocks %v "+
		"(includes the loop's own fork/exec time under TCG); slowest I/Os: %s",
		maxIO, sinceKill(maxIOAt-kill), maxGap, slowestIOs(loopLog, kill, 5))
	if maxIO > mpMaxIOPause {
		t.Errorf("longest I/O across the failover took %v, want < %v", maxIO, mpMaxIOPause)
	}
}

// sinceKill formats an offset from the kill mark: "+1.25s", "-0.30s".
func sinceKill(d time.Duration) string { return fmt.Sprintf("%+.2fs", d.Seconds()) }

// loopWrite returns the write time of block in the guest's loop log.
func loopWrite(log, block string) (time.Duration, bool) {
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) == 5 && f[0] == block {
			v, err := strconv.Atoi(f[2])
			return time.Duration(v) * 10 * time.Millisecond, err == nil
		}
	}
	return 0, false
}

// slowestIOs lists the n slowest I/Os of the guest's loop log ("i start_cs
// write_cs read_cs end_cs" lines), with start times relative to kill.
func slowestIOs(log string, kill time.Duration, n int) string {
	type io struct {
		what  string
		start time.Duration
		took  time.Duration
	}
	var ios []io
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			continue
		}
		v := make([]int, 5)
		for i := range f {
			v[i], _ = strconv.Atoi(f[i])
		}
		cs := func(x int) time.Duration { return time.Duration(x) * 10 * time.Millisecond }
		ios = append(ios, io{fmt.Sprintf("write %d", v[0]), cs(v[1]) - kill, cs(v[2])},
			io{fmt.Sprintf("read %d", v[0]), cs(v[1]+v[2]) - kill, cs(v[3])})
	}
	sort.Slice(ios, func(a, b int) bool { return ios[a].took > ios[b].took })
	var parts []string
	for _, x := range ios[:min(n, len(ios))] {
		parts = append(parts, fmt.Sprintf("%s %v (started at kill%s)", x.what, x.took, sinceKill(x.start)))
	}
	return strings.Join(parts, ", ")
}

// TestMultipathScriptParses checks the assembled guest script of
// TestKernelHostMultipathFailover with the host's POSIX shell (syntax only),
// so that a broken script shows without qemu.
func TestMultipathScriptParses(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on the host")
	}
	vars := map[string]string{"ADDR": "10.0.2.2", "PORT": "4420", "SUBNQN": subNQN, "HOSTNQN": hostNQN, "NPATHS": "3"}
	s := GuestScript(vars, []string{"multipath.sh"}, "node_kill() { mark k; }\nnode_restart() { mark r; }\nmultipath_flow")
	if out, err := exec.Command(sh, "-n", "-c", s).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v\n%s", err, out)
	}
}

// TestMultipathDmesgAllowList: the dead path's recovery lines pass only in
// the failover phase; timeouts, aborts and I/O errors never do.
func TestMultipathDmesgAllowList(t *testing.T) {
	dead := []string{
		"nvme nvme1: starting error recovery",
		"nvme nvme1: Reconnecting in 1 seconds...",
		"block nvme1n1: no usable path - requeuing I/O",
		"nvme nvme1: failed to connect socket: -111",
		"nvme nvme1: Failed reconnect attempt 25",
		"nvme nvme1: Successfully reconnected (26 attempt)",
	}
	never := []string{
		"nvme nvme3: I/O 12 QID 1 timeout, reset controller",
		"nvme nvme3: Received C2HTermReq (FES = 0x1)",
		"I/O error, dev nvme1n1, sector 65536 op 0x1:(WRITE) flags 0x8800 phys_seg 1 prio class 2",
		"nvme nvme1: failed to connect queue: 0 ret=-111",
	}
	for _, line := range dead {
		dmesg := "[ 1.0] basalt-e2e: phase mp-failover\n[ 1.1] " + line + "\n"
		if bad := DmesgProblems(dmesg, multipathDmesgAllow); len(bad) != 0 {
			t.Errorf("failover phase: %q rejected", line)
		}
		dmesg = "[ 1.0] basalt-e2e: phase mp-io\n[ 1.1] " + line + "\n"
		if bad := DmesgProblems(dmesg, multipathDmesgAllow); len(bad) != 1 {
			t.Errorf("I/O phase: %q accepted", line)
		}
	}
	for _, line := range never {
		dmesg := "[ 1.0] basalt-e2e: phase mp-failover\n[ 1.1] " + line + "\n"
		if bad := DmesgProblems(dmesg, multipathDmesgAllow); len(bad) != 1 {
			t.Errorf("failover phase: %q accepted", line)
		}
	}
}
