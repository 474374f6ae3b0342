package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
)

// TestCLISnapshots: on a 3-node cluster over HTTPS with tokens, a volume
// on one node only and a volume on all three: the snapshot verbs reach the
// volume's leader from every node (the node asked forwards when it holds
// no replica or does not lead), list in the order taken, delete, and roll
// back only with --force when refused; the refusals exit 1 with the API's
// message (a taken name, an unknown volume or snapshot, the reader token);
// a compressed volume takes snapshots like any other.
func TestCLISnapshots(t *testing.T) {
	ac := newAPICluster(t, 3, 3*time.Second)
	for _, vol := range []struct{ name, rf string }{{"one", "1"}, {"all", "3"}} {
		if _, errs, code := ctl(t, ac.Nodes[0].Server.URL, "volume", "create", vol.name, "--size", "4MiB", "--rf", vol.rf); code != 0 {
			t.Fatalf("create %s: %d %s", vol.name, code, errs)
		}
		for i, nd := range ac.Nodes {
			snap := "s" + string(rune('0'+i))
			out := ctlEventually(t, nd.Server.URL, "snapshot", "create", vol.name, snap)
			if !strings.Contains(out, "Snapshot "+vol.name+"@"+snap+" taken (number "+string(rune('1'+i))) {
				t.Fatalf("create %s@%s via node %d: %s", vol.name, snap, i, out)
			}
		}
		base := ac.Nodes[2].Server.URL
		out := ctlEventually(t, base, "snapshot", "list", vol.name)
		for i, want := range []string{"#  SNAPSHOT  PINNED", "1  " + vol.name + "@s0", "2  " + vol.name + "@s1", "3  " + vol.name + "@s2"} {
			if !strings.Contains(out, want) {
				t.Fatalf("list line %d lacks %q:\n%s", i, want, out)
			}
		}
		wantRefused(t, base, "already exists", "snapshot", "create", vol.name, "s1")
		wantRefused(t, base, "no such snapshot", "snapshot", "delete", vol.name, "nope")
		wantRefused(t, base, "no such snapshot", "volume", "rollback", vol.name, "nope", "--force")
		ctlEventually(t, base, "volume", "rollback", vol.name, "s0")
		out = ctlEventually(t, base, "snapshot", "delete", vol.name, "s1")
		if strings.Contains(out, "@s1") || !strings.Contains(out, vol.name+"@s2") {
			t.Fatalf("after delete:\n%s", out)
		}
		out = ctlEventually(t, base, "-o", "json", "snapshot", "list", vol.name)
		var v api.SnapshotsView
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Volume != vol.name || len(v.Snapshots) != 2 ||
			v.Snapshots[0].Name != "s0" || v.Snapshots[1].Name != "s2" || v.Snapshots[1].Order != 2 {
			t.Fatalf("list -o json: %v %s", err, out)
		}
	}
	base := ac.Nodes[1].Server.URL
	wantRefused(t, base, `volume "ghost"`, "snapshot", "list", "ghost")
	if _, errs, code := ctl(t, base, "volume", "create", "packed", "--size", "4MiB", "--compression", "lz4"); code != 0 {
		t.Fatalf("create packed: %d %s", code, errs)
	}
	ctlEventually(t, base, "snapshot", "create", "packed", "s")
	reader := []string{"--api", base, "--ca", ac.Sec.CAFile, "--token", ac.Sec.ReaderToken, "--timeout", "5s"}
	if out, errs, code := ctlArgs(append(reader, "snapshot", "list", "all")...); code != 0 || !strings.Contains(out, "all@s0") {
		t.Fatalf("reader's list: %d %s%s", code, out, errs)
	}
	for _, args := range [][]string{{"snapshot", "create", "all", "r"}, {"snapshot", "delete", "all", "s0"},
		{"volume", "rollback", "all", "s0", "--force"}} {
		if _, errs, code := ctlArgs(append(reader, args...)...); code != 1 || !strings.Contains(errs, "admin") {
			t.Errorf("reader %v: %d %s, want refused for want of the admin role", args, code, errs)
		}
	}
	for _, args := range [][]string{{"snapshot", "create", "all"}, {"snapshot", "list"}, {"volume", "rollback", "all"}} {
		if _, errs, code := ctl(t, base, args...); code != 2 {
			t.Errorf("%v: %d %s, want a usage error", args, code, errs)
		}
	}
}

// ctlEventually runs basaltctl until it succeeds (the volume's replicas
// come up in the background after a create) and returns its output.
func ctlEventually(t *testing.T, base string, args ...string) string {
	t.Helper()
	return ctlUntil(t, base, func(code int, _ string) bool { return code == 0 }, args...)
}

// ctlUntil runs basaltctl until done holds of its exit status and error
// output, while it fails for want of a volume leader, and returns its
// output.
func ctlUntil(t *testing.T, base string, done func(code int, errs string) bool, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, errs, code := ctl(t, base, args...)
		if done(code, errs) {
			return out
		}
		if time.Now().After(deadline) || !strings.Contains(errs, "leads") {
			t.Fatalf("%v: %d %s%s", args, code, out, errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantRefused runs basaltctl and wants exit 1 with msg in the error.
func wantRefused(t *testing.T, base, msg string, args ...string) {
	t.Helper()
	if out, errs, code := ctl(t, base, args...); code != 1 || !strings.Contains(errs, msg) {
		t.Fatalf("%v: %d %s%s, want exit 1 with %q", args, code, out, errs, msg)
	}
}
