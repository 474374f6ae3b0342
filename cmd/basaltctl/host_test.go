package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
)

const (
	testDHCHAP = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	testTLSPSK = "NVMeTLSkey-1:01:LFKHx3GLh/WxQ3Qix/hiXhgJO/Ixkvwbye6I1Ys3uH5JBiAx:"
	testHost   = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e001"
)

func TestCLIHostsAndSecrets(t *testing.T) {
	ac := newAPICluster(t, 1, 3*time.Second)
	base := ac.Nodes[0].Server.URL
	out, errs, code := ctl(t, base, "volume", "create", "v", "--size", "1MiB")
	if code != 0 || !strings.Contains(out, "no host allowed yet (basaltctl host add v NQN)") {
		t.Fatalf("create without hosts: %d %s%s", code, out, errs)
	}
	if out, _, _ := ctl(t, base, "volume", "list"); !strings.Contains(out, "no host allowed yet (basaltctl host add v NQN)") {
		t.Errorf("list:\n%s", out)
	}
	if out, _, _ := ctl(t, base, "volume", "create", "--help"); !strings.Contains(out, "let ANY host that can reach a node's NVMe port read and write") {
		t.Errorf("create --help does not say what --allow-any-host does:\n%s", out)
	}

	// A secret from a file, a PSK on the command line.
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(testDHCHAP+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, code = ctl(t, base, "host", "add", "v", testHost, "--dhchap-secret", "@"+file, "--tls-psk", testTLSPSK)
	if code != 0 || !strings.Contains(out, testHost+" (auth: dh-hmac-chap, tls-psk)") || strings.Contains(out, "Generated") {
		t.Fatalf("host add: %d %s%s", code, out, errs)
	}
	if got := ac.Nodes[0].Cluster.State().Volumes["v"].Secrets[testHost]; got.DHCHAPSecret != testDHCHAP || got.TLSPSK != testTLSPSK {
		t.Fatalf("stored %v", got)
	}

	// Generated secrets are printed once, with the connect commands.
	out, errs, code = ctl(t, base, "host", "add", "v", testHost, "--dhchap-secret", "generate", "--dhchap-ctrl-secret", "generate")
	if code != 0 {
		t.Fatalf("host add generate: %d %s", code, errs)
	}
	secrets := regexp.MustCompile(`DHHC-1:01:[A-Za-z0-9+/=]+:`).FindAllString(out, -1)
	if len(secrets) < 2 || !strings.Contains(out, "shown this once") ||
		!strings.Contains(out, "nvme connect-all -t tcp -a 127.0.0.1 -s 4420 --hostnqn "+testHost+" --dhchap-secret "+secrets[0]+
			" --dhchap-ctrl-secret "+secrets[1]) ||
		!strings.Contains(out, testHost+" (auth: dh-hmac-chap (bidirectional))") {
		t.Fatalf("host add generate:\n%s", out)
	}
	for _, args := range [][]string{{"volume", "show", "v"}, {"volume", "list"}, {"-o", "json", "volume", "show", "v"},
		{"-o", "json", "volume", "list"}} {
		out, _, _ := ctl(t, base, args...)
		for _, s := range append(secrets, testDHCHAP, testTLSPSK) {
			if strings.Contains(out, s) {
				t.Errorf("%v shows a secret:\n%s", args, out)
			}
		}
	}

	// -o json: the generated secrets are in the answer, this once.
	out, _, code = ctl(t, base, "-o", "json", "host", "add", "v", testHost, "--tls-psk", "generate")
	var v api.AddHostView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Generated == nil || !strings.HasPrefix(v.Generated.TLSPSK, "NVMeTLSkey-1:01:") {
		t.Fatalf("host add -o json: %d %s", code, out)
	}

	// allow-any-host on and off.
	if out, _, code := ctl(t, base, "volume", "set", "v", "--allow-any-host=true"); code != 0 || !strings.Contains(out, "ANY HOST") {
		t.Errorf("set true: %d\n%s", code, out)
	}
	if out, _, code := ctl(t, base, "volume", "set", "v", "--allow-any-host=false"); code != 0 || strings.Contains(out, "ANY HOST") {
		t.Errorf("set false: %d\n%s", code, out)
	}

	bad := strings.Replace(testDHCHAP, "ia6z", "ib6z", 1)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"host", "add", "v", testHost, "--dhchap-secret", bad}, 1, "CRC-32"},
		{[]string{"host", "add", "v", testHost, "--dhchap-ctrl-secret", "generate"}, 1, "without dhchap_secret"},
		{[]string{"host", "add", "v", testHost, "--dhchap-secret", "@/nonexistent/secret"}, 2, "--dhchap-secret: open /nonexistent/secret"},
		{[]string{"volume", "set", "v"}, 2, "give --allow-any-host=true or --allow-any-host=false"},
	} {
		_, errs, code := ctl(t, base, tt.args...)
		if code != tt.code || !strings.Contains(errs, tt.want) || strings.Contains(errs, bad) {
			t.Errorf("%v: exit %d %s, want %d with %q", tt.args, code, errs, tt.code, tt.want)
		}
	}
}
