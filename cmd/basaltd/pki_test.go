package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"basalt/pkg/auth"
	"basalt/pkg/pki"
)

// TestPKIInit: pki init writes the CA, a directory per node that basaltd
// loads as that node, the tokens file and two credentials files whose
// tokens it accepts with their roles; it prints no token, and refuses to
// overwrite what it wrote.
func TestPKIInit(t *testing.T) {
	dir := t.TempDir()
	const cid = "6f1c2a94-0b3e-4d7a-9c55-2e8f10b6d3a1"
	var out, errb bytes.Buffer
	if code := runPKI([]string{"init", "--dir", dir, "--cluster-id", cid, "--nodes", "1,2,3"}, &out, &errb); code != 0 {
		t.Fatalf("init: %d %s", code, errb.String())
	}
	for id := uint64(1); id <= 3; id++ {
		nd, err := pki.LoadNode(filepath.Join(dir, nodeDirName(id)))
		if err != nil {
			t.Fatal(err)
		}
		if nd.Identity() != (pki.Identity{Cluster: cid, Node: id}) {
			t.Errorf("node%d's certificate is %s", id, nd.Identity())
		}
		if _, err := pki.LoadCA(filepath.Join(dir, nodeDirName(id))); err != nil {
			t.Errorf("node%d has no CA key: %v", id, err)
		}
	}
	tokens, err := auth.LoadTokens(filepath.Join(dir, "node2"))
	if err != nil {
		t.Fatal(err)
	}
	for file, role := range map[string]auth.Role{"admin.json": auth.RoleAdmin, "reader.json": auth.RoleReadOnly} {
		c, err := auth.ReadCredentials(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := tokens.Lookup(c.Token); !ok || id.Role != role {
			t.Errorf("%s: token of role %q (known %v), want %q", file, id.Role, ok, role)
		}
		if c.API != "https://127.0.0.1:9420" || c.CAFile != filepath.Join(dir, "ca.crt") {
			t.Errorf("%s: %+v", file, c)
		}
		if strings.Contains(out.String(), c.Token) {
			t.Errorf("init printed the %s token", role)
		}
	}
	if !strings.Contains(out.String(), "export BASALT_CREDENTIALS="+filepath.Join(dir, "admin.json")) {
		t.Errorf("init does not say how to use admin.json:\n%s", out.String())
	}
	if code := runPKI([]string{"init", "--dir", dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "never overwrites") {
		t.Errorf("a second init: %d %s", code, errb.String())
	}
	errb.Reset()
	if code := runPKI([]string{"issue", "--dir", dir, "--node", "4", "--hosts", "10.0.0.4"}, &out, &errb); code != 0 {
		t.Fatalf("issue: %d %s", code, errb.String())
	}
	if nd, err := pki.LoadNode(filepath.Join(dir, "node4")); err != nil || nd.Identity().Node != 4 {
		t.Errorf("issued node4: %v", err)
	}
	for _, args := range [][]string{{"init"}, {"init", "--dir", t.TempDir(), "--nodes", "1,1"},
		{"init", "--dir", t.TempDir(), "--cluster-id", "nope"}, {"bogus"}, {"issue", "--dir", dir}} {
		errb.Reset()
		if code := runPKI(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}
