package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"basalt/pkg/auth"
)

// TestCLICredentials: basaltctl takes its credentials from the file
// $BASALT_CREDENTIALS names, the environment overrides it, and a missing
// token, a read-only one on a change, or a missing CA each get an error
// saying what to set.
func TestCLICredentials(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	ac := newAPICluster(t, 1, time.Second)
	base := ac.Nodes[0].Server.URL
	dir := t.TempDir()
	admin, reader := filepath.Join(dir, "admin.json"), filepath.Join(dir, "reader.json")
	for path, tok := range map[string]string{admin: ac.Sec.AdminToken, reader: ac.Sec.ReaderToken} {
		if err := auth.WriteCredentials(path, auth.Credentials{API: base, CAFile: ac.Sec.CAFile, Token: tok}); err != nil {
			t.Fatal(err)
		}
	}

	t.Setenv(auth.EnvCredentials, admin)
	if out, errs, code := ctlArgs("volume", "create", "a", "--size", "1MiB"); code != 0 {
		t.Fatalf("admin credentials file: %d %s%s", code, out, errs)
	}
	t.Setenv(auth.EnvCredentials, reader)
	if _, errs, code := ctlArgs("volume", "list"); code != 0 {
		t.Fatalf("reader lists: %d %s", code, errs)
	}
	_, errs, code := ctlArgs("volume", "delete", "a")
	if code != 1 || !strings.Contains(errs, `needs a token of role "admin"`) || !strings.Contains(errs, "admin.json") {
		t.Errorf("reader deletes: %d %s", code, errs)
	}
	t.Setenv(auth.EnvToken, ac.Sec.AdminToken) // the environment overrides the file's token
	if _, errs, code := ctlArgs("volume", "delete", "a"); code != 0 {
		t.Errorf("BASALT_TOKEN over the reader's file: %d %s", code, errs)
	}
	t.Setenv(auth.EnvToken, "")

	t.Setenv(auth.EnvCredentials, "")
	_, errs, code = ctlArgs("--api", base, "--ca", ac.Sec.CAFile, "volume", "list")
	if code != 1 || !strings.Contains(errs, "needs a token") || !strings.Contains(errs, "BASALT_CREDENTIALS") {
		t.Errorf("no token: %d %s", code, errs)
	}
	_, errs, code = ctlArgs("--api", base, "--token", ac.Sec.AdminToken, "volume", "list")
	if code != 3 || !strings.Contains(errs, "--ca") {
		t.Errorf("no CA: %d %s", code, errs)
	}
	if err := os.Chmod(admin, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(auth.EnvCredentials, admin)
	if _, errs, code := ctlArgs("volume", "list"); code != 2 || !strings.Contains(errs, "chmod 600") {
		t.Errorf("a world-readable credentials file: %d %s", code, errs)
	}
}
