package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
	"basalt/pkg/cluster"
	"basalt/pkg/cluster/clustertest"
	"basalt/pkg/nvmekey"
)

// Secrets in the formats nvme gen-dhchap-key and nvme gen-tls-key print
// (the first is the NVMe specification's example).
const (
	testDHCHAP     = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	testDHCHAPCtrl = "DHHC-1:03:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
	testTLSPSK     = "NVMeTLSkey-1:01:LFKHx3GLh/WxQ3Qix/hiXhgJO/Ixkvwbye6I1Ys3uH5JBiAx:"
	testHost       = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e001"
)

// callNode sends a request to node i as the admin and returns the status
// and body.
func callNode(t *testing.T, ac *clustertest.APICluster, i int, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, ac.Nodes[i].Server.URL+path, strings.NewReader(body))
	resp, err := ac.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// noSecrets fails if any of secrets (their key part) is in out.
func noSecrets(t *testing.T, what, out string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if i := strings.LastIndex(s[:len(s)-1], ":"); strings.Contains(out, s[i+1:len(s)-1]) {
			t.Errorf("%s shows a secret: %s", what, out)
		}
	}
}

// views returns every read answer of every node: volume list, show,
// cluster, local status and metrics.
func views(t *testing.T, ac *clustertest.APICluster) map[string]string {
	out := map[string]string{}
	for i := range ac.Nodes {
		for _, p := range []string{"/v1/volumes", "/v1/volumes/vol1", "/v1/cluster", "/v1/nodes", "/v1/local", "/metrics"} {
			_, out[ac.Nodes[i].ID.String()+" "+p] = callNode(t, ac, i, "GET", p, "")
		}
	}
	return out
}

func TestHostSecretsThroughTheAPI(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 3, 5*time.Second)
	cl := ac.Client(2) // a follower: the change is forwarded to node 1
	if _, err := cl.CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "vol1", Size: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	body := `{"dhchap_secret":"` + testDHCHAP + `","dhchap_ctrl_secret":"` + testDHCHAPCtrl + `","tls_psk":"` + testTLSPSK + `"}`
	status, out := callNode(t, ac, 2, "POST", "/v1/volumes/vol1/hosts/"+testHost, body)
	if status != 200 {
		t.Fatalf("add host: HTTP %d %s", status, out)
	}
	noSecrets(t, "the add-host answer", out, testDHCHAP, testDHCHAPCtrl, testTLSPSK)
	var v api.AddHostView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Generated != nil || v.HostAuth[testHost] != "dh-hmac-chap (bidirectional), tls-psk" || v.Secrets != nil {
		t.Fatalf("add host: %s", out)
	}
	for _, an := range ac.Nodes {
		ac.Eventually("every node's metadata holds the secrets", func() bool {
			vol := an.Cluster.State().Volumes["vol1"]
			return vol != nil && vol.Secrets[testHost] == cluster.HostSecrets{DHCHAPSecret: testDHCHAP,
				DHCHAPCtrlSecret: testDHCHAPCtrl, TLSPSK: testTLSPSK}
		})
	}

	// Generate: the secrets come back once, valid, with connect commands.
	gen, err := cl.AddHostWith(ctx(t), "vol1", testHost, api.AddHostRequest{
		Generate: []string{api.GenerateDHCHAP, api.GenerateDHCHAPCtrl, api.GenerateTLSPSK}})
	if err != nil {
		t.Fatal(err)
	}
	g := gen.Generated
	if g == nil || g.Host != testHost {
		t.Fatalf("generate: %+v", gen)
	}
	for _, s := range []string{g.DHCHAPSecret, g.DHCHAPCtrlSecret} {
		if k, err := nvmekey.ParseDHCHAP(s); err != nil || k.Transform != nvmekey.TransformSHA256 || len(k.Secret) != 32 {
			t.Errorf("generated DH-HMAC-CHAP secret: %v", err)
		}
	}
	if k, err := nvmekey.ParseTLSPSK(g.TLSPSK); err != nil || k.Transform != nvmekey.TransformSHA256 {
		t.Errorf("generated TLS PSK: %v", err)
	}
	wantOpts := " --hostnqn " + testHost + " --dhchap-secret " + g.DHCHAPSecret + " --dhchap-ctrl-secret " + g.DHCHAPCtrlSecret
	if !strings.HasSuffix(g.ConnectAll, wantOpts) || len(g.Connect) != 3 || !strings.HasSuffix(g.Connect[0], wantOpts) ||
		!strings.Contains(g.Note, "once") {
		t.Errorf("generated connect commands: %+v", g)
	}
	if g.DHCHAPSecret == g.DHCHAPCtrlSecret {
		t.Error("the host and controller secrets are the same")
	}
	if got := ac.Nodes[0].Cluster.State().Volumes["vol1"].Secrets[testHost]; got.DHCHAPSecret != g.DHCHAPSecret ||
		got.DHCHAPCtrlSecret != g.DHCHAPCtrlSecret || got.TLSPSK != g.TLSPSK {
		t.Errorf("the metadata does not hold the generated secrets: %v", got)
	}
	all := []string{testDHCHAP, testDHCHAPCtrl, testTLSPSK, g.DHCHAPSecret, g.DHCHAPCtrlSecret, g.TLSPSK}
	for what, out := range views(t, ac) {
		noSecrets(t, what, out, all...)
	}
	noSecrets(t, "the nodes' logs", ac.Logs.String(), all...)
	if v, err := cl.Volume(ctx(t), "vol1"); err != nil || v.HostAuth[testHost] != "dh-hmac-chap (bidirectional), tls-psk" {
		t.Errorf("show: %v %+v", err, v.HostAuth)
	}

	// Removing the host removes its secrets.
	if _, err := cl.RemoveHost(ctx(t), "vol1", testHost); err != nil {
		t.Fatal(err)
	}
	if vol := ac.Nodes[2].Cluster.State().Volumes["vol1"]; len(vol.Secrets) != 0 {
		t.Errorf("after remove: %v", vol.Secrets)
	}
}

func TestHostSecretErrors(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 1, time.Second)
	if _, err := ac.Client(0).CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "a", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	badCRC := strings.Replace(testDHCHAP, "ia6z", "ib6z", 1)
	short := nvmekey.Encode(nvmekey.DHCHAPPrefix, 1, make([]byte, 16))
	tests := []struct {
		name, body, want string
	}{
		{"prefix", `{"dhchap_secret":"DHHC-2:00:abc:"}`, `dhchap_secret: malformed DH-HMAC-CHAP secret: it does not start with \"DHHC-1:\"`},
		{"hash id", `{"dhchap_secret":"` + strings.Replace(testDHCHAP, ":00:", ":07:", 1) + `"}`, "hash identifier 07"},
		{"base64", `{"dhchap_secret":"DHHC-1:00:****:"}`, "not valid padded base64"},
		{"key length", `{"dhchap_secret":"` + short + `"}`, "a 16-byte key: want 32, 48 or 64 bytes"},
		{"crc", `{"dhchap_secret":"` + badCRC + `"}`, "its CRC-32 does not match the key"},
		{"ctrl without host", `{"dhchap_ctrl_secret":"` + testDHCHAPCtrl + `"}`, "dhchap_ctrl_secret without dhchap_secret"},
		{"psk format", `{"tls_psk":"` + testDHCHAP + `"}`, `tls_psk: malformed TLS PSK: it does not start with \"NVMeTLSkey-1:\"`},
		{"psk length", `{"tls_psk":"` + nvmekey.Encode(nvmekey.TLSPSKPrefix, 1, make([]byte, 48)) + `"}`, "48-byte key with hash identifier 01"},
		{"generate unknown", `{"generate":["chap"]}`, `generate \"chap\": want \"dhchap\", \"dhchap_ctrl\" or \"tls_psk\"`},
		{"generate twice", `{"generate":["dhchap","dhchap"]}`, `generate lists \"dhchap\" twice`},
		{"given and generated", `{"dhchap_secret":"` + testDHCHAP + `","generate":["dhchap"]}`, "dhchap_secret is both given and to be generated"},
		{"generate ctrl alone", `{"generate":["dhchap_ctrl"]}`, "dhchap_ctrl_secret without dhchap_secret"},
		{"unknown field", `{"dhchap_key":"` + testDHCHAP + `"}`, `unknown field \"dhchap_key\"`},
	}
	for _, tt := range tests {
		status, out := callNode(t, ac, 0, "POST", "/v1/volumes/a/hosts/"+testHost, tt.body)
		if status != 400 || !strings.Contains(out, `"code": "invalid"`) || !strings.Contains(out, tt.want) {
			t.Errorf("%s: HTTP %d %s, want 400 with %q", tt.name, status, out, tt.want)
		}
		noSecrets(t, tt.name, out, testDHCHAP, testDHCHAPCtrl, testTLSPSK, badCRC, short)
	}
	if v := ac.Nodes[0].Cluster.State().Volumes["a"]; len(v.Hosts) != 0 || len(v.Secrets) != 0 {
		t.Fatalf("a refused request changed the volume: %v", v.Hosts)
	}
	noSecrets(t, "the log", ac.Logs.String(), testDHCHAP, testDHCHAPCtrl, testTLSPSK, badCRC, short)
	// Raw commands (from a node: the route takes a node certificate) are
	// refused the same way by the metadata.
	req, _ := http.NewRequest("POST", ac.Nodes[0].Server.URL+"/v1/internal/commands", strings.NewReader(
		`{"op":"add_host","volume":"a","host":"`+testHost+`","secrets":{"dhchap_secret":"`+badCRC+`"}}`))
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: ac.Sec.Nodes[0].ClientTLS()}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	status, out := resp.StatusCode, string(raw)
	if status != 400 || !strings.Contains(out, "CRC-32") {
		t.Errorf("raw add_host with a bad secret: HTTP %d %s", status, out)
	}
	noSecrets(t, "the raw command's answer", out, badCRC)
}

func TestAllowAnyHostIsExplicit(t *testing.T) {
	ac := clustertest.NewAPICluster(t, 1, time.Second)
	cl := ac.Client(0)
	v, err := cl.CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "closed", Size: 1 << 20})
	if err != nil || v.AllowAnyHost || v.Connect.Note != "no host allowed yet (basaltctl host add closed NQN)" {
		t.Fatalf("created without hosts: %v %+v", err, v)
	}
	if v, err = cl.CreateVolume(ctx(t), api.CreateVolumeRequest{Name: "open", Size: 1 << 20, AllowAnyHost: true}); err != nil || !v.AllowAnyHost {
		t.Fatalf("created with allow_any_host: %v %+v", err, v)
	}
	if v, err = cl.SetAllowAnyHost(ctx(t), "open", false); err != nil || v.AllowAnyHost || v.Note == "" {
		t.Fatalf("set false: %v %+v", err, v)
	}
	if v, err = cl.SetAllowAnyHost(ctx(t), "closed", true); err != nil || !v.AllowAnyHost {
		t.Fatalf("set true: %v %+v", err, v)
	}
	if status, out := callNode(t, ac, 0, "PATCH", "/v1/volumes/closed", `{}`); status != 400 || !strings.Contains(out, "allow_any_host") {
		t.Errorf("PATCH without a setting: HTTP %d %s", status, out)
	}
	if status, _ := callNode(t, ac, 0, "PATCH", "/v1/volumes/zz", `{"allow_any_host":true}`); status != 404 {
		t.Errorf("PATCH a missing volume: HTTP %d", status)
	}
}
