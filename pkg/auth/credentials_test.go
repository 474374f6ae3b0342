package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func writeCreds(t *testing.T, path string, c Credentials) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteCredentials(path, c); err != nil {
		t.Fatal(err)
	}
}

func TestResolveOrder(t *testing.T) {
	home := t.TempDir()
	writeCreds(t, DefaultCredentialsPath(home), Credentials{API: "https://home:1", CAFile: "/home/ca.crt", Token: "basalt_home"})
	named := filepath.Join(t.TempDir(), "c.json")
	writeCreds(t, named, Credentials{API: "https://named:1", CAFile: "ca.crt", Token: "basalt_named"})

	c, src, err := Resolve(env(nil), home, Overrides{})
	if err != nil || c != (Credentials{"https://home:1", "/home/ca.crt", "basalt_home"}) || src.File != DefaultCredentialsPath(home) {
		t.Errorf("home file: %+v %+v %v", c, src, err)
	}
	c, src, err = Resolve(env(map[string]string{EnvCredentials: named}), home, Overrides{})
	if err != nil || c.API != "https://named:1" || c.Token != "basalt_named" || src.File != named ||
		c.CAFile != filepath.Join(filepath.Dir(named), "ca.crt") {
		t.Errorf("$BASALT_CREDENTIALS: %+v %+v %v (a relative ca_file is relative to the file)", c, src, err)
	}
	c, _, err = Resolve(env(map[string]string{EnvCredentials: named, EnvToken: "basalt_env", EnvAPI: "https://env:1", EnvCA: "/env/ca"}),
		home, Overrides{})
	if err != nil || c != (Credentials{"https://env:1", "/env/ca", "basalt_env"}) {
		t.Errorf("env overrides: %+v %v", c, err)
	}
	c, _, err = Resolve(env(map[string]string{EnvToken: "basalt_env", EnvAPI: "https://env:1"}), home,
		Overrides{API: "https://flag:1", Token: "basalt_flag", CAFile: "/flag/ca"})
	if err != nil || c != (Credentials{"https://flag:1", "/flag/ca", "basalt_flag"}) {
		t.Errorf("flags override: %+v %v", c, err)
	}
	c, src, err = Resolve(env(nil), t.TempDir(), Overrides{})
	if err != nil || c != (Credentials{API: DefaultAPI}) || src.File != "" {
		t.Errorf("nothing anywhere: %+v %+v %v", c, src, err)
	}
}

func TestResolveRefuses(t *testing.T) {
	if _, _, err := Resolve(env(map[string]string{EnvCredentials: "/nonexistent/c.json"}), "", Overrides{}); err == nil ||
		!strings.Contains(err.Error(), EnvCredentials) {
		t.Errorf("a missing $BASALT_CREDENTIALS file: %v", err)
	}
	open := filepath.Join(t.TempDir(), "c.json")
	writeCreds(t, open, Credentials{API: "https://x:1", Token: "basalt_x"})
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Resolve(env(map[string]string{EnvCredentials: open}), "", Overrides{}); err == nil ||
		!strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable credentials file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(bad, []byte(`{"api":"x","tokn":"basalt_x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Resolve(env(map[string]string{EnvCredentials: bad}), "", Overrides{}); err == nil ||
		!strings.Contains(err.Error(), "tokn") {
		t.Errorf("a misspelt field: %v", err)
	}
	if _, err := ParseCredentials([]byte(`{"token":"abc"}`)); err == nil {
		t.Error("a token without the prefix parsed")
	}
}
