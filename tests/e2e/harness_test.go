package e2e

// Offline tests of the harness itself (no qemu; they run even with
// BASALT_E2E=0).

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// readCpio parses a newc archive as writeCpio produces it.
func readCpio(t *testing.T, b []byte) map[string]cpioFile {
	t.Helper()
	files := map[string]cpioFile{}
	off := 0
	for {
		if off%4 != 0 {
			t.Fatalf("entry at unaligned offset %d", off)
		}
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("header field %d at %d: %v", i, off, err)
			}
			return int(v)
		}
		mode, size, nameSize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+nameSize-1])
		if b[off+110+nameSize-1] != 0 {
			t.Fatalf("name %q not NUL-terminated", name)
		}
		data := off + 110 + nameSize
		data += (4 - data%4) % 4
		if name == "TRAILER!!!" {
			if end := data + size; end != len(b) {
				t.Fatalf("archive ends at %d, trailer ends at %d", len(b), end)
			}
			return files
		}
		files[name] = cpioFile{Name: name, Mode: uint32(mode), Data: b[data : data+size]}
		off = data + size
		off += (4 - off%4) % 4
	}
}

func TestWriteCpio(t *testing.T) {
	tests := []struct {
		name  string
		files []cpioFile
	}{
		{"empty", nil},
		{"script", []cpioFile{{Name: "test.sh", Mode: 0o100755, Data: []byte("echo hi\n")}}},
		{"unaligned sizes", []cpioFile{
			{Name: "a", Mode: 0o100644, Data: []byte("1")},
			{Name: "bb", Mode: 0o100644, Data: []byte("22")},
			{Name: "ccc", Mode: 0o100600, Data: []byte("333")},
			{Name: "dddd", Mode: 0o100644, Data: nil},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeCpio(&b, tc.files); err != nil {
				t.Fatal(err)
			}
			if b.Len()%4 != 0 {
				t.Errorf("archive length %d not a multiple of 4", b.Len())
			}
			got := readCpio(t, b.Bytes())
			if len(got) != len(tc.files) {
				t.Fatalf("got %d files, want %d", len(got), len(tc.files))
			}
			for _, f := range tc.files {
				g, ok := got[f.Name]
				if !ok || g.Mode != f.Mode || !bytes.Equal(g.Data, f.Data) {
					t.Errorf("file %s: got %+v, want %+v", f.Name, g, f)
				}
			}
		})
	}
}

func TestDmesgProblems(t *testing.T) {
	extra := (target{}).dmesgAllow()
	tests := []struct {
		name string
		log  string
		bad  int
	}{
		{"clean connect", `[    9.99] nvme nvme0: creating 2 I/O queues.
[   10.00] nvme nvme0: mapped 2/0/0 default/read/poll queues.
[   10.01] nvme nvme0: new ctrl: NQN "nqn.2026-11.io.basalt:e2e", addr 10.0.2.2:4420
[   15.06] nvme nvme0: Removing ctrl: NQN "nqn.2026-11.io.basalt:e2e"`, 0},
		{"tcg noise is not an oops", `[    0.00] calibrate_delay_direct() failed to get a good estimate for loops_per_jiffy.`, 0},
		{"recovery outside the failover phase", `[   20.63] nvme nvme0: starting error recovery`, 1},
		{"recovery inside the failover phase", `[   20.60] basalt-e2e: phase failover
[   20.63] nvme nvme0: starting error recovery
[   20.65] block nvme0n1: no usable path - requeuing I/O
[   20.65] nvme nvme0: Reconnecting in 1 seconds...
[   21.68] nvme nvme0: failed to connect socket: -111
[   21.68] nvme nvme0: Failed reconnect attempt 1
[   23.91] nvme nvme0: Successfully reconnected (3 attempt)`, 0},
		{"simultaneous close of a stopped target's queue during failover", `[   42.86] basalt-e2e: phase failover
[   42.87] nvme nvme0: starting error recovery
[   42.87] nvme nvme0: queue 2 socket state 11`, 0},
		{"other socket states stay unexpected", `[   42.86] basalt-e2e: phase failover
[   42.87] nvme nvme0: queue 2 socket state 1`, 1},
		{"timeout even during failover", `[   20.60] basalt-e2e: phase failover
[   50.00] nvme nvme0: queue 1: timeout cid 0x1003 type 4 opcode 0x1 (I/O Cmd)`, 1},
		{"the killed connection's keep-alive and send during failover", `[   10.20] basalt-e2e: phase failover
[   10.23] nvme nvme0: starting error recovery
[   11.85] nvme nvme0: failed to send request -104
[   14.91] nvme nvme0: queue 0: timeout request 0x0 type 4
[   14.91] nvme nvme0: long keepalive RTT (5024 ms)
[   14.91] nvme nvme0: failed nvme_keep_alive_end_io error=10`, 0},
		{"keep-alive timeout outside the failover phase", `[   14.91] nvme nvme0: queue 0: timeout request 0x0 type 4
[   14.91] nvme nvme0: long keepalive RTT (5024 ms)`, 2},
		{"an I/O queue's timeout is not the keep-alive", `[   10.20] basalt-e2e: phase failover
[   14.91] nvme nvme0: queue 1: timeout request 0x0 type 4`, 1},
		{"allow-list ends with the phase", `[   20.60] basalt-e2e: phase failover
[   20.63] nvme nvme0: starting error recovery
[   26.29] basalt-e2e: phase failover-after
[   26.30] nvme nvme0: starting error recovery`, 1},
		{"termreq", `[   11.00] nvme nvme0: Received C2HTermReq (FES = Invalid PDU Header Field)`, 1},
		{"io error", `[   19.02] nvme0c0n1: I/O Cmd(0x8) @ LBA 32752, 16 blocks, I/O Error (sct 0x1 / sc 0x83) MORE DNR
[   19.02] operation not supported error, dev nvme0c0n1, sector 262016 op 0x9:(WRITE_ZEROES)`, 2},
		{"rejected host only in its phase", `[    9.80] basalt-e2e: phase reject-host
[    9.87] nvme nvme0: Connect for subsystem nqn.2026-11.io.basalt:e2e is not allowed, hostnqn: nqn.x
[    9.87] nvme nvme0: failed to connect queue: 0 ret=16772
[    9.90] basalt-e2e: phase io
[    9.91] nvme nvme0: failed to connect queue: 0 ret=16772`, 1},
		{"rejected host with the wrong status", `[    9.80] basalt-e2e: phase reject-host
[    9.87] nvme nvme0: failed to connect queue: 0 ret=16770`, 1},
		{"kernel warning anywhere", `[    3.00] WARNING: CPU: 1 PID: 7 at drivers/nvme/host/tcp.c:1 nvme_tcp_foo+0x1/0x2
[    3.00] Call Trace:`, 2},
		{"ext4 error", `[    5.00] EXT4-fs error (device nvme0n1): ext4_find_entry:1: inode #2: comm ls: reading directory lblock 0`, 1},
		{"genctr mismatch", `[    5.00] nvme nvme0: genctr mismatch (got 0x1 expected 0x2)`, 1},
		{"any unlisted host-driver line", `[   30.80] nvme nvme0: queue_size 128 > ctrl sqsize 32, clamping down
[   30.90] nvme nvme0: Identify Descriptors failed (nsid=1, status=0x2)
[   31.00] nvme_fabrics: missing parameter 'transport=%s'
[   31.10] nvme0n1: p1`, 4},
		{"reference target lines", `[   14.31] nvmet: adding nsid 1 to subsystem nqn.2026-11.io.basalt:e2e
[   14.45] nvmet_tcp: enabling port 1 (127.0.0.1:4420)
[   14.74] nvmet: creating nvm controller 1 for subsystem nqn.2026-11.io.basalt:e2e for NQN nqn.x.
[   16.80] nvmet_tcp: failed to allocate queue`, 1},
		{"ext4 on nvme", `[   41.69] EXT4-fs (nvme0n1): mounted filesystem with ordered data mode. Quota mode: none.
[   48.46] EXT4-fs (nvme0n1): unmounting filesystem.`, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := DmesgProblems(tc.log, extra)
			if len(bad) != tc.bad {
				t.Errorf("got %d problems, want %d: %q", len(bad), tc.bad, bad)
			}
		})
	}
}

const discoverOut = `
Discovery Log Number of Records 2, Generation counter 2
=====Discovery Log Entry 0======
trtype:  tcp
adrfam:  ipv4
subtype: current discovery subsystem
treq:    not specified, sq flow control disable supported
portid:  1
trsvcid: 4420
subnqn:  nqn.2014-08.org.nvmexpress.discovery
traddr:  10.0.2.2
eflags:  none
sectype: none
=====Discovery Log Entry 1======
trtype:  tcp
adrfam:  ipv4
subtype: nvme subsystem
treq:    not specified, sq flow control disable supported
portid:  1
trsvcid: 4420
subnqn:  nqn.2026-11.io.basalt:e2e
traddr:  10.0.2.2
eflags:  none
sectype: none
`

func TestDiscoveryEntries(t *testing.T) {
	tests := []struct {
		name string
		out  string
		n    int
	}{
		{"two entries", discoverOut, 2},
		{"no entries", "No discovery log entries to fetch.\n", 0},
		{"garbage", "Failed to write to /dev/nvme-fabrics: Connection refused\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := discoveryEntries(tc.out)
			if len(e) != tc.n {
				t.Fatalf("got %d entries, want %d", len(e), tc.n)
			}
			if tc.n == 2 && (e[1]["subnqn"] != subNQN || e[1]["trsvcid"] != "4420" || e[1]["subtype"] != "nvme subsystem") {
				t.Errorf("entry 1 = %v", e[1])
			}
		})
	}
}

func TestConsoleParsing(t *testing.T) {
	console := strings.Join([]string{
		"BASALT-E2E-BOOTED kernel=6.1.0-57-amd64 uptime=8.71",
		"BASALT-E2E-KV a=1",
		"BASALT-E2E-KV b=x=y",
		"BASALT-E2E-KV a=2",
		"BASALT-E2E-BEGIN empty",
		"BASALT-E2E-END empty",
		"BASALT-E2E-BEGIN two",
		"line 1",
		"line 2",
		"BASALT-E2E-END two",
		"BASALT-E2E-BEGIN unterminated",
		"BASALT-E2E-DMESG-BEGIN",
		"[    0.00] Linux version 6.1.0",
		"BASALT-E2E-DMESG-END",
		"BASALT-E2E-EXIT=3",
		"",
	}, "\n")
	kv := KV(console)
	if kv["a"] != "2" || kv["b"] != "x=y" {
		t.Errorf("KV = %v", kv)
	}
	for name, want := range map[string]string{"empty": "", "two": "line 1\nline 2"} {
		if got, ok := Section(console, name); !ok || got != want {
			t.Errorf("Section(%s) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"unterminated", "missing", "tw"} {
		if got, ok := Section(console, name); ok {
			t.Errorf("Section(%s) = %q, want not found", name, got)
		}
	}
	if d, err := GuestDmesg(console); err != nil || d != "[    0.00] Linux version 6.1.0\n" {
		t.Errorf("GuestDmesg = %q, %v", d, err)
	}
	if rc, ok := exitStatus(console); !ok || rc != 3 {
		t.Errorf("exitStatus = %d, %v", rc, ok)
	}
	if bootUptime(console) != "8.71" {
		t.Errorf("bootUptime = %q", bootUptime(console))
	}
	for _, bad := range []string{"", "BASALT-E2E-EXIT=\n", "xBASALT-E2E-EXIT=0\n", "BASALT-E2E-EXIT=0x\n", "BASALT-E2E-DMESG-BEGIN\n"} {
		if rc, ok := exitStatus(bad); ok {
			t.Errorf("exitStatus(%q) = %d, want none", bad, rc)
		}
	}
	if _, err := GuestDmesg("BASALT-E2E-DMESG-BEGIN\nno end\n"); err == nil {
		t.Error("GuestDmesg accepted an unterminated section")
	}
}

func TestANSIStripping(t *testing.T) {
	got := readConsole(strings.NewReader("\x1bc\x1b[?7l\x1b[2JBASALT-E2E-BOOTED kernel=x uptime=1\r\nBASALT-E2E-MARK kill-target\r\n"), func(string) {})
	if !strings.HasPrefix(got, "BASALT-E2E-BOOTED kernel=x uptime=1\n") {
		t.Errorf("readConsole = %q", got)
	}
	var marks []string
	readConsole(strings.NewReader("x\nBASALT-E2E-MARK a\nBASALT-E2E-MARK  b \n"), func(m string) { marks = append(marks, m) })
	if strings.Join(marks, ",") != "a,b" {
		t.Errorf("marks = %q", marks)
	}
}

// TestGuestScriptsParse checks the assembled guest scripts with the host's
// POSIX shell (syntax only), and the quoting of variables.
func TestGuestScriptsParse(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on the host")
	}
	vars := (target{addr: "10.0.2.2", port: 4420, nsBytes: 256 << 20}).vars()
	vars["TRICKY"] = `it's "quoted" $(not run)`
	scripts := map[string]string{
		"host":     GuestScript(vars, []string{"hostflow.sh"}, "host_flow"),
		"failover": GuestScript(vars, []string{"failover.sh"}, "target_kill() { mark k; }\nfailover_flow"),
		"nvmet":    GuestScript(vars, []string{"hostflow.sh", "failover.sh", "nvmet.sh"}, "nvmet_setup\nhost_flow\nfailover_flow"),
		"dax":      GuestScript(vars, []string{"dax.sh"}, "dax_flow"),
	}
	for name, s := range scripts {
		if out, err := exec.Command(sh, "-n", "-c", s).CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v\n%s", name, err, out)
		}
	}
	out, err := exec.Command(sh, "-c", GuestScript(vars, nil, `printf %s "$TRICKY"`)).Output()
	if err != nil || string(out) != vars["TRICKY"] {
		t.Errorf("quoting: got %q, %v", out, err)
	}
}
