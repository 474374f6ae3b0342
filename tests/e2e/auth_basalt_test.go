package e2e

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"basalt/pkg/api"
)

// The authentication test's volumes: authVolume (one replica, so that the
// node a single path goes to always leads it) for the single-path cases,
// authMPVolume (three) for multipath.
const (
	authVolume      = "auth"
	authMPVolume    = "auth-mp"
	authVolumeBytes = 256 << 20
)

// hostCredentials is the body of POST /v1/volumes/{name}/hosts/{nqn}: the
// host's DH-HMAC-CHAP secrets and TLS PSK (each optional).
type hostCredentials struct {
	DHCHAPSecret     string `json:"dhchap_secret,omitempty"`
	DHCHAPCtrlSecret string `json:"dhchap_ctrl_secret,omitempty"`
	TLSPSK           string `json:"tls_psk,omitempty"`
}

// addHostCredentials allows host nqn on volume vol with cred through a
// running node's API (as the admin). It never prints the secrets.
func (kc *kcluster) addHostCredentials(vol, nqn string, cred hostCredentials) {
	kc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := kc.client(kc.up()).AddHostWith(ctx, vol, nqn, api.AddHostRequest{DHCHAPSecret: cred.DHCHAPSecret,
		DHCHAPCtrlSecret: cred.DHCHAPCtrlSecret, TLSPSK: cred.TLSPSK})
	if err != nil {
		kc.t.Fatalf("allow %s on %s: %v", nqn, vol, err)
	}
}

// volumeJSON is GET /v1/volumes/{name} as the API writes it.
func (kc *kcluster) volumeJSON(name string) string {
	kc.t.Helper()
	c := kc.client(kc.up())
	req, err := http.NewRequest("GET", c.Base+"/v1/volumes/"+url.PathEscape(name), nil)
	if err != nil {
		kc.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		kc.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return string(b)
}

// authRefusals are the refusals Basalt must make the Debian 13 host report
// exactly as nvmet does. A TLS host connecting without TLS is refused
// differently (nvmet's port requires TLS and drops the plain ICReq; Basalt's
// port may offer TLS and refuses that host's plain Connect): it only has to
// fail fast, with a Connect failure.
var authRefusals = []authCase{refusedDHWrong, refusedDHMissing, refusedDHCtrlWrong, refusedTLSWrongBasalt, {
	name: "tls-plain",
	out:  regexp.MustCompile(`Failed to write to /dev/nvme-fabrics: `),
}}

// refusedTLSWrongBasalt: a host whose PSK is not the one Basalt has for it.
// Basalt's TLS server answers the bad binder with a decrypt_error alert, so
// the handshake fails at once (nvmet's case differs: see refusedTLSWrong);
// the host reports the failed handshake and adds no controller.
var refusedTLSWrongBasalt = authCase{name: "tls-wrong",
	out: regexp.MustCompile(`Failed to write to /dev/nvme-fabrics: `),
	dmesg: []*regexp.Regexp{
		regexp.MustCompile(`^nvme nvme\d+: queue 0: TLS handshake complete, error -\d+$`),
	}}

// basaltAuthDmesg: per phase, the host lines of the refusals.
var basaltAuthDmesg = map[string][]*regexp.Regexp{
	// simultaneousClose is allowed, not required: the controller drops the
	// failed association as the host does.
	"dh-wrong":      append([]*regexp.Regexp{simultaneousClose}, refusedDHWrong.dmesg...),
	"dh-missing":    refusedDHMissing.dmesg,
	"dh-ctrl-wrong": append([]*regexp.Regexp{simultaneousClose}, refusedDHCtrlWrong.dmesg...),
	"tls-wrong":     refusedTLSWrongBasalt.dmesg,
	"tls-plain": {
		regexp.MustCompile(`^nvme nvme\d+: Connect for subsystem \S+ is not allowed, hostnqn: \S+$`),
		regexp.MustCompile(`^nvme nvme\d+: failed to connect queue: 0 ret=\d+$`),
		regexp.MustCompile(`^nvme_tcp: queue 0: failed to receive icresp, error -104$`),
	},
}

// TestKernelHostAuthAgainstBasalt runs guest/auth.sh's cases from a Debian 13
// host against a volume of a 3-node cluster whose hosts have DH-HMAC-CHAP
// secrets and TLS PSKs (POST /v1/volumes/{name}/hosts/{nqn}): the host must
// connect with the right credentials, do I/O and ext4 over TLS with
// DH-HMAC-CHAP, and be refused with the wrong ones exactly as nvmet refuses
// it (TestKernelHostAuthAgainstKernelTarget). The same boot then attaches the
// DH-HMAC-CHAP host through native multipath (discovery and every path
// authenticated) and kills the leader -9 under verified I/O. A Debian 12 host
// (no authentication, no TLS) is refused fast by the hosts that need either,
// and still connects as a host that needs neither.
func TestKernelHostAuthAgainstBasalt(t *testing.T) {
	Setup(t)
	began := time.Now()
	kc := startKCluster(t, 3)
	c := newAuthCreds(t)
	for _, vol := range []struct {
		name string
		rf   int
	}{{authVolume, 1}, {authMPVolume, 3}} {
		kc.createVolume(api.CreateVolumeRequest{Name: vol.name, Size: authVolumeBytes, RF: vol.rf, Hosts: []string{authHostPlain}})
		kc.addHostCredentials(vol.name, authHostDH, hostCredentials{DHCHAPSecret: c.dhKey, DHCHAPCtrlSecret: c.dhCtrlKey})
		kc.addHostCredentials(vol.name, authHostTLS, hostCredentials{TLSPSK: c.tlsPSK})
		// Not the PSK the guest holds for it (c.tlsWrong): the wrong-PSK case.
		kc.addHostCredentials(vol.name, authHostTLSW, hostCredentials{TLSPSK: c.tlsDHPSK})
		kc.addHostCredentials(vol.name, authHostTLSDH, hostCredentials{DHCHAPSecret: c.dhKey, DHCHAPCtrlSecret: c.dhCtrlKey, TLSPSK: c.tlsDHPSK})
		shown := kc.volumeJSON(vol.name)
		for _, s := range []string{c.dhKey, c.dhCtrlKey, c.tlsPSK, c.tlsDHPSK} {
			if strings.Contains(shown, strings.Split(s, ":")[2]) {
				t.Errorf("GET /v1/volumes/%s shows a host's secret", vol.name)
			}
		}
	}
	kc.addHostCredentials(authMPVolume, authHostMP, hostCredentials{DHCHAPSecret: c.dhKey})
	v := kc.waitHealthy(authVolume, 60*time.Second)
	mp := kc.waitHealthy(authMPVolume, 60*time.Second)
	node := kc.nodes[v.Leader-1]
	t.Logf("cluster up, volumes %s (%s, on node%d) and %s (%s) with 4 hosts each in %s",
		authVolume, v.NQN, node.id, authMPVolume, mp.NQN, time.Since(began).Round(100*time.Millisecond))

	t.Run("debian12", func(t *testing.T) { testDebian12RefusedByAuth(t, v.NQN, node) })
	t.Run("debian13", func(t *testing.T) { testDebian13AuthAgainstBasalt(t, kc, c, v.NQN, node, mp.NQN) })
}

// authMultipathBody attaches HOSTNQN (HOST_DH) to MP_SUBNQN through
// multipath with MP_OPTS (its secrets) after guest/auth.sh's cases.
const authMultipathBody = "SUBNQN=$MP_SUBNQN\nnode_kill() { mark kill-leader; }\nnode_restart() { mark restart-killed; }\nmultipath_flow\n"

// testDebian13AuthAgainstBasalt: guest/auth.sh's cases, then multipath
// failover with DH-HMAC-CHAP on every path.
func testDebian13AuthAgainstBasalt(t *testing.T, kc *kcluster, c authCreds, nqn string, node *knode, mpNQN string) {
	vars := authVars(c, nqn, "10.0.2.2", node.nvmePort, "10.0.2.2", node.nvmePort)
	vars["HOST_TLSW"] = authHostTLSW
	vars["MP_SUBNQN"] = mpNQN
	vars["HOSTNQN"] = authHostMP
	vars["NPATHS"] = strconv.Itoa(len(kc.nodes))
	// Discovery and connect-all through one node (the discovery controller
	// asks no authentication unless [nvme] discovery_auth, as nvmet), each
	// path then authenticated with the host's secret (nvme-cli 2.13's
	// connect-all, like its discover, takes no controller secret).
	vars["MP_OPTS"] = "--dhchap-secret=" + c.dhKey
	body := authBody + authMultipathBody
	script := GuestScript(vars, []string{"auth.sh", "multipath.sh"}, body)
	marks := newFailoverMarks(t, kc, authMPVolume)
	r := Boot(t, BootOptions{Guest: Debian13, Script: script, Timeout: 7 * time.Minute, OnMark: marks.onMark})
	logAuthCases(t, r.Console)
	RequireOK(t, r)
	checkAuthCases(t, r.Console, c, authRefusals)
	if marks.killed == nil || !marks.restarted {
		t.Fatalf("the guest did not ask for the kill and the restart (killed %v, restarted %v)", marks.killed != nil, marks.restarted)
	}
	checkMultipathPaths(t, r.Console, kc, marks.killed)
	checkMultipathIO(t, r.Console)
	allow := authDmesgAllow(basaltAuthDmesg)
	for ph, lines := range multipathDmesgAllow {
		allow[ph] = append(allow[ph], lines...)
	}
	for _, ph := range []string{"mp-discover", "mp-connect", "mp-io", "mp-failover", "mp-after"} {
		allow[ph] = append(allow[ph], AuthNVMeLines...)
	}
	allow["mp-failover"] = append(allow["mp-failover"], ReconnectNVMeLines612...)
	CheckDmesg(t, r.Console, allow)
}

// testDebian12RefusedByAuth: a Debian 12 host (kernel 6.1 without in-band
// authentication or TLS) connecting as a host that must authenticate, and as
// one that must use TLS, is refused within seconds with an error, not a hang;
// as the host that needs neither it connects and does I/O.
func testDebian12RefusedByAuth(t *testing.T, nqn string, node *knode) {
	vars := map[string]string{"ADDR": "10.0.2.2", "PORT": strconv.Itoa(node.nvmePort), "SUBNQN": nqn,
		"HOST_PLAIN": authHostPlain, "HOST_DH": authHostDH, "HOST_TLS": authHostTLS}
	body := `phase d12-dh
step "Debian 12 as a host that must authenticate (DH-HMAC-CHAP)"
connect_refused d12-dh nvme connect -t tcp -a "$ADDR" -s "$PORT" -n "$SUBNQN" --hostnqn="$HOST_DH"
phase d12-tls
step "Debian 12 as a host that must use TLS"
connect_refused d12-tls nvme connect -t tcp -a "$ADDR" -s "$PORT" -n "$SUBNQN" --hostnqn="$HOST_TLS"
phase d12-plain
step "Debian 12 as a host that needs neither"
connect_ok d12-plain nvme connect -t tcp -a "$ADDR" -s "$PORT" -n "$SUBNQN" --hostnqn="$HOST_PLAIN"
io_check d12-plain
disconnect disconnect-d12
step done
`
	script := GuestScript(vars, []string{"auth.sh"}, body)
	r := Boot(t, BootOptions{Script: script, Timeout: 3 * time.Minute})
	kv := KV(r.Console)
	for _, name := range []string{"d12-dh", "d12-tls"} {
		out, _ := Section(r.Console, name)
		t.Logf("Debian 12, case %s: %s cs, rc %s, nvme output:\n%s", name, kv[name+"_cs"], kv[name+"_rc"], out)
	}
	if d, err := GuestDmesg(r.Console); err == nil {
		t.Logf("guest kernel log, NVMe lines:\n%s", nvmeLines(d))
	}
	RequireOK(t, r)
	for _, name := range []string{"d12-dh", "d12-tls"} {
		out := section(t, r.Console, name)
		if !strings.Contains(out, "could not add new controller") && !strings.Contains(out, "Failed to write to /dev/nvme-fabrics") {
			t.Errorf("Debian 12, case %s: nvme connect printed %q, want nvme-cli's connect failure", name, out)
		}
		cs, err := strconv.Atoi(kv[name+"_cs"])
		if err != nil || time.Duration(cs)*10*time.Millisecond > 20*time.Second {
			t.Errorf("Debian 12, case %s: refused after %s cs, want within 20 s", name, kv[name+"_cs"])
		}
	}
	// The 6.1 host's lines for a refused connect (whatever it names the
	// reason) pass in the refusal phases; timeouts, I/O errors and
	// warnings (badAnyRE) never do.
	refused := []*regexp.Regexp{
		regexp.MustCompile(`^nvme nvme\d+: (qid 0: .*|failed to connect queue: 0 ret=-?\d+|Connect for subsystem \S+ is not allowed, hostnqn: \S+|.*[Aa]uthentication.*)$`),
		regexp.MustCompile(`^nvme_(fabrics|tcp): .*$`),
	}
	CheckDmesg(t, r.Console, map[string][]*regexp.Regexp{"d12-dh": refused, "d12-tls": refused})
}

// failoverMarks acts on multipath.sh's marks: kill the volume's leader -9,
// then start it again.
type failoverMarks struct {
	t         *testing.T
	kc        *kcluster
	volume    string
	killed    *knode
	restarted bool
}

func newFailoverMarks(t *testing.T, kc *kcluster, volume string) *failoverMarks {
	return &failoverMarks{t: t, kc: kc, volume: volume}
}

func (m *failoverMarks) onMark(name string) {
	switch name {
	case "kill-leader":
		if m.killed != nil {
			m.t.Errorf("guest asked for a second kill")
			return
		}
		l, err := m.kc.leaderOf(m.volume, 10*time.Second)
		if err != nil {
			m.t.Errorf("kill-leader: %v", err)
			return
		}
		m.killed = l
		m.kc.kill(l)
		m.t.Logf("killed node%d (leader of %s) with SIGKILL", l.id, m.volume)
	case "restart-killed":
		if m.killed == nil || m.restarted {
			m.t.Errorf("guest asked for a restart without a killed node")
			return
		}
		m.restarted = true
		m.kc.start(m.killed)
		m.t.Logf("restarted node%d", m.killed.id)
	default:
		m.t.Errorf("unexpected guest mark %q", name)
	}
}

// ReconnectNVMeLines612 are kernel 6.12's forms of the reconnect lines of
// MultipathFailoverNVMeLines (6.1 has no "/<max>").
var ReconnectNVMeLines612 = []*regexp.Regexp{
	regexp.MustCompile(`^nvme nvme\d+: Failed reconnect attempt \d+/\d+$`),
	regexp.MustCompile(`^nvme nvme\d+: Successfully reconnected \(attempt \d+/\d+\)$`),
	// A keep-alive still in flight when the host removes the controller
	// (nvme disconnect at the end) completes with BLK_STS_TRANSPORT, and
	// 6.12 reports its round trip from an unset start time.
	regexp.MustCompile(`^nvme nvme\d+: long keepalive RTT \(\d+ ms\)$`),
	regexp.MustCompile(`^nvme nvme\d+: failed nvme_keep_alive_end_io error=4$`),
}
