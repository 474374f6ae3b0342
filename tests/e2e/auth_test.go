package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The hosts of the authentication tests (guest/auth.sh), each allowed on the
// subsystem with its own credentials.
const (
	authHostPlain = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e011" // none
	authHostDH    = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e012" // DH-HMAC-CHAP
	authHostTLS   = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e013" // TLS PSK
	authHostTLSDH = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e014" // both
	// authHostTLSW holds, in the guest's .nvme keyring, a PSK other than
	// the one Basalt has for it (Basalt's wrong-PSK case; see auth.sh).
	authHostTLSW = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e015"
	// authHostMP has a DH-HMAC-CHAP secret on the multipath volume only, so
	// that connect-all finds that volume alone.
	authHostMP = "nqn.2014-08.org.nvmexpress:uuid:0b7e8a52-6c1d-4f4e-8a55-ba5a17e2e016"
)

// authCreds are one run's credentials, fresh random keys in the formats
// nvme-cli writes: DH-HMAC-CHAP secrets as `nvme gen-dhchap-key` and TLS PSKs
// as `nvme gen-tls-key` print them.
type authCreds struct {
	dhKey, dhCtrlKey     string // HOST_DH's and HOST_TLSDH's secrets
	dhWrong, dhCtrlWrong string // secrets the target does not have
	tlsPSK, tlsDHPSK     string // HOST_TLS's and HOST_TLSDH's PSKs
	tlsWrong             string // a PSK for HOST_TLS the target does not have
}

func newAuthCreds(t testing.TB) authCreds {
	t.Helper()
	return authCreds{
		dhKey:       dhchapSecret(t, 1, 32),
		dhCtrlKey:   dhchapSecret(t, 2, 48),
		dhWrong:     dhchapSecret(t, 1, 32),
		dhCtrlWrong: dhchapSecret(t, 2, 48),
		tlsPSK:      tlsPSK(t, 1),
		tlsDHPSK:    tlsPSK(t, 1),
		tlsWrong:    tlsPSK(t, 1),
	}
}

// keyWithCRC is the base64 of key followed by its CRC-32 (IEEE), little
// endian: the body of both interchange formats.
func keyWithCRC(key []byte) string {
	return base64.StdEncoding.EncodeToString(binary.LittleEndian.AppendUint32(key, crc32.ChecksumIEEE(key)))
}

func randomKey(t testing.TB, n int) []byte {
	t.Helper()
	key := make([]byte, n)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return key
}

// dhchapSecret is a DH-HMAC-CHAP secret "DHHC-1:<hh>:<base64>:" of n random
// bytes; hh names the hash the secret is transformed with (0 none, 1 SHA-256,
// 2 SHA-384, 3 SHA-512).
func dhchapSecret(t testing.TB, hmac, n int) string {
	return fmt.Sprintf("DHHC-1:%02d:%s:", hmac, keyWithCRC(randomKey(t, n)))
}

// tlsPSK is a configured PSK in the interchange format
// "NVMeTLSkey-1:<hh>:<base64>:" (hh 1: SHA-256, 32 bytes; 2: SHA-384, 48).
func tlsPSK(t testing.TB, hmac int) string {
	n := map[int]int{1: 32, 2: 48}[hmac]
	return fmt.Sprintf("NVMeTLSkey-1:%02d:%s:", hmac, keyWithCRC(randomKey(t, n)))
}

// authVars are guest/auth.sh's variables for subsystem nqn at addr:port
// (plain) and tlsAddr:tlsPort (TLS).
func authVars(c authCreds, nqn, addr string, port int, tlsAddr string, tlsPort int) map[string]string {
	return map[string]string{
		"ADDR": addr, "PORT": strconv.Itoa(port), "TLS_ADDR": tlsAddr, "TLS_PORT": strconv.Itoa(tlsPort),
		"SUBNQN":     nqn,
		"HOST_PLAIN": authHostPlain, "HOST_DH": authHostDH, "HOST_TLS": authHostTLS, "HOST_TLSDH": authHostTLSDH,
		"DH_KEY": c.dhKey, "DH_CTRL_KEY": c.dhCtrlKey, "DH_WRONG": c.dhWrong, "DH_CTRL_WRONG": c.dhCtrlWrong,
		"TLS_PSK": c.tlsPSK, "TLSDH_PSK": c.tlsDHPSK, "TLS_WRONG": c.tlsWrong,
	}
}

// authCaseNames are guest/auth.sh's connects, in order.
var authCaseNames = []string{"plain", "dh", "dh-wrong", "dh-missing", "dh-bidi", "dh-ctrl-wrong", "tls", "tls-plain", "tls-wrong", "tls-dh"}

// authBody runs guest/auth.sh's flows.
const authBody = "dhchap_flow\ntlshd_start\ntls_flow\ntlshd_log\nstep done\n"

// TestKernelHostAuthAgainstKernelTarget calibrates the authentication cases
// against the kernel's own target: a Debian 13 host (6.12, nvme-cli 2.13,
// tlshd) and nvmet with DH-HMAC-CHAP and a TLS port in the same guest. It
// proves the guest can do it all, and records what the host prints when it
// is refused: the same cases against Basalt (TestKernelHostAuthAgainstBasalt)
// must print the same.
func TestKernelHostAuthAgainstKernelTarget(t *testing.T) {
	c := newAuthCreds(t)
	vars := authVars(c, subNQN, "127.0.0.1", 4420, "127.0.0.1", 4421)
	vars["NS_MIB"] = "128"
	script := GuestScript(vars, []string{"auth.sh", "authnvmet.sh"}, "nvmet_auth_setup\nkeygen_check\n"+authBody)
	r := Boot(t, BootOptions{Guest: Debian13, Script: script, Timeout: 5 * time.Minute})
	logAuthCases(t, r.Console)
	RequireOK(t, r)
	checkAuthCases(t, r.Console, c, nvmetRefusals)
	CheckDmesg(t, r.Console, authDmesgAllow(nvmetDmesg))
}

// authCase is one refused connect of guest/auth.sh: what nvme connect
// prints and which kernel log lines the host adds.
type authCase struct {
	name  string
	out   *regexp.Regexp // nvme connect's output (section <name>)
	dmesg []*regexp.Regexp
}

// logAuthCases logs every case's nvme output and time, and the kernel log's
// NVMe lines, so that a run shows what the host said.
func logAuthCases(t *testing.T, console string) {
	t.Helper()
	kv := KV(console)
	for _, name := range authCaseNames {
		out, _ := Section(console, name)
		t.Logf("case %s: %s cs, rc %s, nvme output:\n%s", name, kv[name+"_cs"], kv[name+"_rc"], out)
	}
	if d, err := GuestDmesg(console); err == nil {
		t.Logf("guest kernel log, NVMe lines:\n%s", nvmeLines(d))
	}
	if l, ok := Section(console, "tlshd-log"); ok {
		t.Logf("tlshd log:\n%s", l)
	}
}

// checkAuthCases: each refused case printed what refusals[case] says, the
// connects that must work did, and the connect times (the figure).
func checkAuthCases(t *testing.T, console string, c authCreds, refusals []authCase) {
	t.Helper()
	kv := KV(console)
	dmesg, err := GuestDmesg(console)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range refusals {
		out := section(t, console, rc.name)
		if !rc.out.MatchString(out) {
			t.Errorf("case %s: nvme connect printed %q, want a match of %q", rc.name, out, rc.out)
		}
		if kv[rc.name+"_rc"] == "0" || kv[rc.name+"_rc"] == "" {
			t.Errorf("case %s: nvme connect exit status %q, want a failure", rc.name, kv[rc.name+"_rc"])
		}
		lines := phaseLines(dmesg, rc.name)
		for _, re := range rc.dmesg {
			if !slices.ContainsFunc(lines, re.MatchString) {
				t.Errorf("case %s: no kernel log line matches %q; the phase logged:\n%s", rc.name, re, strings.Join(lines, "\n"))
			}
		}
	}
	for _, s := range []string{c.dhKey, c.dhCtrlKey, c.tlsPSK, c.tlsDHPSK} {
		if strings.Contains(dmesg, strings.Split(s, ":")[2]) {
			t.Errorf("a secret appears in the guest kernel log")
		}
	}
	cs := func(k string) time.Duration {
		v, err := strconv.Atoi(kv[k])
		if err != nil {
			t.Errorf("guest value %s = %q: %v", k, kv[k], err)
		}
		return time.Duration(v) * 10 * time.Millisecond
	}
	t.Logf("FIGURE nvme connect time (Debian 13 guest under qemu TCG): no authentication %v, "+
		"DH-HMAC-CHAP hmac(sha256)/null %v, bidirectional %v, TLS %v, TLS + bidirectional DH-HMAC-CHAP %v",
		cs("plain_cs"), cs("dh_cs"), cs("dh-bidi_cs"), cs("tls_cs"), cs("tls-dh_cs"))
	if n := kv["fs_files"]; n != "8" {
		t.Errorf("ext4 over TLS: %q files verified, want 8", n)
	}
}

// The refusals of guest/auth.sh as the Debian 13 host reports them against
// nvmet (6.12): nvme-cli's line with the errno the kernel answered the
// connect with, and the host driver's lines. Basalt must make the host say
// the same (authRefusals).
var (
	// A wrong host secret: the controller's Failure1 (the host's response
	// does not match) ends the transaction; the connect fails with
	// EKEYREJECTED.
	refusedDHWrong = authCase{name: "dh-wrong",
		out: regexp.MustCompile(`Failed to write to /dev/nvme-fabrics: Key was rejected by service`),
		dmesg: []*regexp.Regexp{
			regexp.MustCompile(`^nvme nvme\d+: qid 0: authentication failed, error -129$`),
			regexp.MustCompile(`^nvme nvme\d+: failed to connect queue: 0 ret=-129$`),
		}}
	// No secret while the controller requires authentication (the Connect
	// response's AUTHREQ): the host gives up itself with ENOKEY, which
	// nvme-cli 2.13 words as a missing TLS key.
	refusedDHMissing = authCase{name: "dh-missing",
		out: regexp.MustCompile(`could not add new controller: pre-shared TLS key is missing`),
		dmesg: []*regexp.Regexp{
			regexp.MustCompile(`^nvme nvme\d+: qid 0: no key$`),
			regexp.MustCompile(`^nvme nvme\d+: qid 0: authentication setup failed$`),
			regexp.MustCompile(`^nvme nvme\d+: failed to connect queue: 0 ret=-126$`),
		}}
	// Bidirectional, and the controller's response does not match the
	// controller secret the host holds: the host refuses the controller.
	refusedDHCtrlWrong = authCase{name: "dh-ctrl-wrong",
		out: regexp.MustCompile(`Failed to write to /dev/nvme-fabrics: Key was rejected by service`),
		dmesg: []*regexp.Regexp{
			authenticatedWith,
			regexp.MustCompile(`^nvme nvme\d+: qid 0: controller authentication failed$`),
			regexp.MustCompile(`^nvme nvme\d+: qid 0: authentication failed, error -129$`),
			regexp.MustCompile(`^nvme nvme\d+: failed to connect queue: 0 ret=-129$`),
		}}
	// A PSK the target does not have: the TLS handshake fails (tlshd:
	// "The TLS connection was non-properly terminated"), reported to the
	// kernel as ETIMEDOUT.
	refusedTLSWrong = authCase{name: "tls-wrong",
		out: regexp.MustCompile(`Failed to write to /dev/nvme-fabrics: Connection timed out`),
		dmesg: []*regexp.Regexp{
			regexp.MustCompile(`^nvme nvme\d+: queue 0: TLS handshake complete, error -110$`),
		}}
	// A TLS host without TLS at a port that requires it: nvmet hands the
	// plain ICReq to tlshd, which finds no TLS record and drops the
	// connection.
	refusedTLSPlainNvmet = authCase{name: "tls-plain",
		out: regexp.MustCompile(`Failed to write to /dev/nvme-fabrics: Connection reset by peer`),
		dmesg: []*regexp.Regexp{
			regexp.MustCompile(`^nvme_tcp: queue 0: failed to receive icresp, error -104$`),
		}}
)

// authenticatedWith is the host's line for a completed DH-HMAC-CHAP
// transaction.
var authenticatedWith = regexp.MustCompile(`^nvme nvme\d+: qid \d+: authenticated with hash hmac\(sha(256|384|512)\) dhgroup (null|ffdhe(2048|3072|4096|6144|8192))$`)

var nvmetRefusals = []authCase{refusedDHWrong, refusedDHMissing, refusedDHCtrlWrong, refusedTLSWrong, refusedTLSPlainNvmet}

// nvmetDmesg: per phase, the refusal's host lines, and the lines of nvmet
// itself (in the same guest) refusing.
var nvmetDmesg = map[string][]*regexp.Regexp{
	"dh-wrong": append([]*regexp.Regexp{
		regexp.MustCompile(`^nvmet: ctrl \d+ qid 0 host response mismatch$`),
		regexp.MustCompile(`^nvmet: ctrl \d+ qid 0 failure1 \(1\)$`),
		regexp.MustCompile(`^nvmet: ctrl \d+ fatal error occurred!$`),
		simultaneousClose,
	}, refusedDHWrong.dmesg...),
	"dh-missing": refusedDHMissing.dmesg,
	"dh-ctrl-wrong": append([]*regexp.Regexp{
		regexp.MustCompile(`^nvmet: ctrl \d+ fatal error occurred!$`),
		simultaneousClose, // allowed, not required: the controller drops the association as the host does
	}, refusedDHCtrlWrong.dmesg...),
	"tls-wrong": refusedTLSWrong.dmesg,
	"tls-plain": refusedTLSPlainNvmet.dmesg,
}

// authPhases are guest/auth.sh's phases.
var authPhases = []string{"auth-plain", "dh-uni", "dh-wrong", "dh-missing", "dh-bidi", "dh-ctrl-wrong", "tls", "tls-plain", "tls-wrong", "tls-dh"}

// authDmesgAllow is the per-phase allow-list of the auth flows: the lines
// every authenticated connect prints, plus extra[phase].
func authDmesgAllow(extra map[string][]*regexp.Regexp) map[string][]*regexp.Regexp {
	m := map[string][]*regexp.Regexp{}
	for _, ph := range authPhases {
		m[ph] = append(append([]*regexp.Regexp{}, AuthNVMeLines...), extra[ph]...)
	}
	return m
}

// AuthNVMeLines are the host-driver lines (kernel 6.12) a successful
// connect, authenticated or over TLS, may print besides NormalNVMeLines.
var AuthNVMeLines = []*regexp.Regexp{
	regexp.MustCompile(`^nvme nvme\d+: new ctrl: NQN "[^"]+", addr [0-9.]+:\d+, hostnqn: \S+$`),
	authenticatedWith,
	regexp.MustCompile(`^nvme nvme\d+: qid \d+: authenticated$`),
	regexp.MustCompile(`^nvme nvme\d+: qid \d+: controller authenticated$`),
}

// phaseLines returns the kernel log lines (timestamps stripped) logged in
// guest phase name.
func phaseLines(dmesg, name string) []string {
	var out []string
	phase := ""
	for _, line := range strings.Split(dmesg, "\n") {
		msg := stripTimestamp(line)
		if m := phaseRE.FindStringSubmatch(msg); m != nil {
			phase = m[1]
			continue
		}
		if phase == name {
			out = append(out, msg)
		}
	}
	return out
}

// TestCredentialFormats: the keys the tests write are in the formats
// nvme-cli 2.13 writes (its own output in the calibration run: the CRC-32
// is appended little endian, then base64).
func TestCredentialFormats(t *testing.T) {
	for _, s := range []string{
		"DHHC-1:01:Dv5bDRGwrebVosia5VQHKDuhWkw1PJZQ6Onbxupcm7grQIVS:",       // nvme gen-dhchap-key --hmac=1
		"NVMeTLSkey-1:01:pOfR4hErAGD613S/kny8l2Vnq1Hhp1iSprKHMkMeSG6fslOo:", // nvme gen-tls-key
	} {
		body := strings.Split(s, ":")[2]
		raw, err := base64.StdEncoding.DecodeString(body)
		if err != nil || len(raw) != 36 {
			t.Fatalf("%s: %v, %d bytes", s, err, len(raw))
		}
		if got := keyWithCRC(raw[:32]); got != body {
			t.Errorf("keyWithCRC of nvme-cli's key = %s, want %s", got, body)
		}
	}
	c := newAuthCreds(t)
	for s, re := range map[string]string{
		c.dhKey:     `^DHHC-1:01:[A-Za-z0-9+/]{48}:$`,
		c.dhCtrlKey: `^DHHC-1:02:[A-Za-z0-9+/]{70}==:$`,
		c.tlsPSK:    `^NVMeTLSkey-1:01:[A-Za-z0-9+/]{48}:$`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("%q does not match %s", s, re)
		}
	}
}

// TestAuthScriptsParse checks the assembled guest scripts of the
// authentication tests with the host's POSIX shell (syntax only).
func TestAuthScriptsParse(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on the host")
	}
	vars := authVars(newAuthCreds(t), subNQN, "10.0.2.2", 4420, "10.0.2.2", 4421)
	scripts := map[string]string{
		"nvmet":  GuestScript(vars, []string{"auth.sh", "authnvmet.sh"}, "nvmet_auth_setup\nkeygen_check\n"+authBody),
		"basalt": GuestScript(vars, []string{"auth.sh", "multipath.sh"}, authBody+authMultipathBody),
	}
	for name, s := range scripts {
		if out, err := exec.Command(sh, "-n", "-c", s).CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v\n%s", name, err, out)
		}
	}
}

// TestAuthDmesgAllowList: a refusal's lines pass only in its phase.
func TestAuthDmesgAllowList(t *testing.T) {
	allow := authDmesgAllow(nvmetDmesg)
	wrong := "[ 1.1] nvme nvme0: qid 0: authentication failed, error -129\n"
	if bad := DmesgProblems("[ 1.0] basalt-e2e: phase dh-wrong\n"+wrong, allow); len(bad) != 0 {
		t.Errorf("dh-wrong phase: rejected %q", bad)
	}
	if bad := DmesgProblems("[ 1.0] basalt-e2e: phase dh-uni\n"+wrong, allow); len(bad) != 1 {
		t.Errorf("dh-uni phase: accepted %q", wrong)
	}
	ok := "[ 1.1] nvme nvme0: qid 0: authenticated with hash hmac(sha384) dhgroup ffdhe2048\n"
	if bad := DmesgProblems("[ 1.0] basalt-e2e: phase dh-bidi\n"+ok, allow); len(bad) != 0 {
		t.Errorf("dh-bidi phase: rejected %q", bad)
	}
}

// TestReconnectLines612: kernel 6.12's reconnect lines pass in the failover
// phase of the authenticated multipath flow only.
func TestReconnectLines612(t *testing.T) {
	allow := map[string][]*regexp.Regexp{"mp-failover": ReconnectNVMeLines612}
	for _, line := range []string{"nvme nvme0: Failed reconnect attempt 2/120", "nvme nvme0: Successfully reconnected (attempt 9/120)"} {
		if bad := DmesgProblems("[ 1.0] basalt-e2e: phase mp-failover\n[ 1.1] "+line+"\n", allow); len(bad) != 0 {
			t.Errorf("failover phase: %q rejected", line)
		}
		if bad := DmesgProblems("[ 1.0] basalt-e2e: phase mp-io\n[ 1.1] "+line+"\n", allow); len(bad) != 1 {
			t.Errorf("I/O phase: %q accepted", line)
		}
	}
}
