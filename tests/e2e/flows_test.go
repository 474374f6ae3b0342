package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Fixed identities: the guest has no machine UUID, so nvme-cli would invent a
// different host NQN every boot; the tests depend on host access lists.
const (
	hostNQN      = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e001"
	otherHostNQN = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e002"
	subNQN       = "nqn.2026-11.io.basalt:e2e"
)

// target describes what the guest connects to and what it should see.
type target struct {
	addr      string // as seen from the guest, and as advertised in discovery
	port      int
	nsBytes   int64 // size of namespace 1
	blockSize int   // its logical block size
	portID    int   // expected discovery log PORTID, 0: don't check
}

func (tg target) vars() map[string]string {
	return map[string]string{
		"ADDR":          tg.addr,
		"PORT":          strconv.Itoa(tg.port),
		"SUBNQN":        subNQN,
		"HOSTNQN":       hostNQN,
		"OTHER_HOSTNQN": otherHostNQN,
		"NS_MIB":        strconv.FormatInt(tg.nsBytes>>20, 10),
	}
}

// dmesgAllow is the per-phase allow-list for the flows of guest/*.sh.
func (tg target) dmesgAllow() map[string][]*regexp.Regexp {
	return map[string][]*regexp.Regexp{
		"reject-host": RejectedHostNVMeLines,
		"failover":    FailoverNVMeLines,
	}
}

// discoveryEntries parses `nvme discover` normal output (nvme-cli 2.3) into
// one map per "=====Discovery Log Entry N======" block.
func discoveryEntries(out string) []map[string]string {
	var entries []map[string]string
	var cur map[string]string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "=====Discovery Log Entry") {
			cur = map[string]string{}
			entries = append(entries, cur)
			continue
		}
		if cur == nil {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			cur[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return entries
}

// idField returns the value of "name : value" in nvme id-ctrl/id-ns output.
func idField(out, name string) (string, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*:\s*(.*?)\s*$`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		return "", false
	}
	return m[1], true
}

func section(t *testing.T, console, name string) string {
	t.Helper()
	s, ok := Section(console, name)
	if !ok {
		t.Fatalf("guest printed no %q section", name)
	}
	return s
}

// checkDiscovery asserts that the discovery log the allowed host saw lists
// the subsystem at the advertised address, with values a Debian 12 host can
// use (TREQ not specified, SECTYPE none: its libnvme 1.3 turns TLS on for
// TREQ 1 or 2), and that the other host did not see it.
func checkDiscovery(t *testing.T, console string, tg target) {
	t.Helper()
	out := section(t, console, "discover")
	var found map[string]string
	for _, e := range discoveryEntries(out) {
		if e["subtype"] == "nvme subsystem" && e["subnqn"] == subNQN {
			if found != nil {
				t.Errorf("subsystem listed twice in the discovery log:\n%s", out)
			}
			found = e
		}
	}
	if found == nil {
		t.Fatalf("discovery log does not list %s:\n%s", subNQN, out)
	}
	want := map[string]string{"trtype": "tcp", "adrfam": "ipv4", "traddr": tg.addr, "trsvcid": strconv.Itoa(tg.port)}
	if tg.portID != 0 {
		want["portid"] = strconv.Itoa(tg.portID)
	}
	for k, v := range want {
		if found[k] != v {
			t.Errorf("discovery entry %s = %q, want %q\n%s", k, found[k], v, out)
		}
	}
	if !strings.HasPrefix(found["treq"], "not specified") {
		t.Errorf("discovery entry treq = %q, want \"not specified\" (TREQ 0 or 4): libnvme 1.3 turns on TLS otherwise", found["treq"])
	}
	if s, ok := found["sectype"]; ok && s != "none" {
		t.Errorf("discovery entry sectype = %q, want none", s)
	}
	if other := section(t, console, "discover-other"); strings.Contains(other, subNQN) {
		t.Errorf("a host not on the host list sees the subsystem in discovery:\n%s", other)
	}
}

// checkRejectedHost asserts that the target refused the other host's Connect
// with Connect Invalid Host (SCT 1, SC 0x84): only that status makes the 6.1
// host print this line.
func checkRejectedHost(t *testing.T, console string) {
	t.Helper()
	want := fmt.Sprintf("Connect for subsystem %s is not allowed, hostnqn: %s", subNQN, otherHostNQN)
	if !strings.Contains(console, want) {
		dmesg, _ := GuestDmesg(console)
		t.Errorf("guest kernel log lacks %q (Connect Invalid Host):\n%s", want, nvmeLines(dmesg))
	}
}

// checkHostFlow asserts the values the guest's host_flow printed.
func checkHostFlow(t *testing.T, console string, tg target) {
	t.Helper()
	checkDiscovery(t, console, tg)
	checkRejectedHost(t, console)
	kv := KV(console)
	wantKV := map[string]string{
		"state":              "live",
		"transport":          "tcp",
		"size64":             strconv.FormatInt(tg.nsBytes, 10),
		"logical_block_size": strconv.Itoa(tg.blockSize),
		"files":              "17",
	}
	for k, v := range wantKV {
		if kv[k] != v {
			t.Errorf("guest %s = %q, want %q", k, kv[k], v)
		}
	}
	if a, want := kv["address"], fmt.Sprintf("traddr=%s trsvcid=%d", tg.addr, tg.port); !strings.HasPrefix(a, want) {
		t.Errorf("controller address = %q, want prefix %q", a, want)
	}
	idc := section(t, console, "id-ctrl")
	if v, _ := idField(idc, "subnqn"); v != subNQN {
		t.Errorf("id-ctrl subnqn = %q, want %q", v, subNQN)
	}
	if v, _ := idField(idc, "cntlid"); v == "" || v == "0" || v == "0xffff" {
		t.Errorf("id-ctrl cntlid = %q, want a real controller ID", v)
	}
	ids := section(t, console, "id-ns")
	blocks := tg.nsBytes / int64(tg.blockSize)
	if v, _ := idField(ids, "nsze"); v != fmt.Sprintf("%#x", blocks) {
		t.Errorf("id-ns nsze = %q, want %#x", v, blocks)
	}
	ncapStr, _ := idField(ids, "ncap")
	if ncap, err := strconv.ParseInt(ncapStr, 0, 64); err != nil || ncap == 0 || ncap > blocks {
		t.Errorf("id-ns ncap = %q, want 1..%#x (0 means the namespace is absent)", ncapStr, blocks)
	}
	lbads := 0
	for bs := tg.blockSize; bs > 1; bs >>= 1 {
		lbads++
	}
	inUse := regexp.MustCompile(`(?m)^lbaf\s+\d+\s*:\s*ms:0\s+lbads:` + strconv.Itoa(lbads) + `\s.*\(in use\)$`)
	if !inUse.MatchString(ids) {
		t.Errorf("id-ns: no LBA format in use with ms:0 lbads:%d:\n%s", lbads, ids)
	}
	if l := section(t, console, "list"); !strings.Contains(l, kv["dev"]) {
		t.Errorf("nvme list does not show %s:\n%s", kv["dev"], l)
	}
	if n := strings.Count(section(t, console, "sha256-check"), ": OK"); n != 17 {
		t.Errorf("sha256sum -c: %d files OK, want 17", n)
	}
	if d := section(t, console, "disconnect"); !strings.Contains(d, "disconnected 1 controller") {
		t.Errorf("nvme disconnect: %q", d)
	}
}

// checkFailover asserts the values the guest's failover_flow printed.
func checkFailover(t *testing.T, console string) {
	t.Helper()
	kv := KV(console)
	switch s := kv["state_after_kill"]; s {
	case "resetting", "connecting":
	default:
		t.Errorf("controller state after the target died = %q, want resetting or connecting", s)
	}
	if s := kv["state_during_outage"]; s != "connecting" && s != "resetting" {
		t.Errorf("controller state during the outage = %q, want connecting", s)
	}
	if kv["state_after_restart"] != "live" || kv["bg_rc"] != "0" {
		t.Errorf("after restart: state %q, background writer rc %q", kv["state_after_restart"], kv["bg_rc"])
	}
	before, _ := strconv.Atoi(kv["bg_count_at_restart"])
	after, _ := strconv.Atoi(kv["bg_count"])
	if before < 1 || after <= before {
		t.Errorf("background writer passes: %d before the restart, %d at the end", before, after)
	}
	if d := section(t, console, "disconnect"); !strings.Contains(d, "disconnected 1 controller") {
		t.Errorf("nvme disconnect: %q", d)
	}
}
