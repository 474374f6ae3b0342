package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	testDHCHAP = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	testCtrl   = "DHHC-1:03:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	testTLSPSK = "NVMeTLSkey-1:01:LFKHx3GLh/WxQ3Qix/hiXhgJO/Ixkvwbye6I1Ys3uH5JBiAx:"
)

func subsystemWith(secrets string) string {
	return `
[[subsystem]]
nqn = "nqn.2026-11.io.basalt:v"
hosts = ["nqn.h1"]
` + secrets + `
  [[subsystem.namespace]]
  nsid = 1
  backend = "memory"
  size = "4MiB"
`
}

func TestHostSecretsLoadAndResolve(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "h1.key")
	if err := os.WriteFile(file, []byte(testDHCHAP+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(write(t, subsystemWith(`
  [[subsystem.host_secret]]
  host = "nqn.h1"
  dhchap_secret_file = "`+file+`"
  dhchap_ctrl_secret = "`+testCtrl+`"
  tls_psk = "`+testTLSPSK+`"
`)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Subsystems[0].HostSecrets[0].Resolve()
	if err != nil || r != (ResolvedSecrets{DHCHAPSecret: testDHCHAP, DHCHAPCtrlSecret: testCtrl, TLSPSK: testTLSPSK}) {
		t.Fatalf("resolved: %v", err)
	}
	// A file with a bad secret is refused when resolved, naming the file
	// and not the content.
	bad := strings.Replace(testDHCHAP, "ia6z", "ib6z", 1)
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.Subsystems[0].HostSecrets[0].Resolve()
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "CRC-32") || strings.Contains(err.Error(), bad[10:]) {
		t.Fatalf("bad file: %v", err)
	}
}

func TestHostSecretsValidation(t *testing.T) {
	bad := strings.Replace(testDHCHAP, "ia6z", "ib6z", 1)
	for _, tc := range []struct{ name, entry, want string }{
		{"unlisted host", "host = \"nqn.h2\"\ndhchap_secret = \"" + testDHCHAP + "\"", "not in hosts"},
		{"both", "host = \"nqn.h1\"\ndhchap_secret = \"" + testDHCHAP + "\"\ndhchap_secret_file = \"/x\"", "both dhchap_secret and dhchap_secret_file"},
		{"bad inline", "host = \"nqn.h1\"\ndhchap_secret = \"" + bad + "\"", "dhchap_secret: malformed DH-HMAC-CHAP secret: its CRC-32"},
		{"none", "host = \"nqn.h1\"", "no secret"},
		{"ctrl alone", "host = \"nqn.h1\"\ndhchap_ctrl_secret = \"" + testCtrl + "\"", "dhchap_ctrl_secret needs dhchap_secret"},
		{"bad psk", "host = \"nqn.h1\"\ntls_psk = \"" + testDHCHAP + "\"", "tls_psk: malformed TLS PSK"},
	} {
		_, err := Load(write(t, subsystemWith("  [[subsystem.host_secret]]\n"+tc.entry)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), bad[10:]) {
			t.Errorf("%s: the error shows the secret: %v", tc.name, err)
		}
	}
}
