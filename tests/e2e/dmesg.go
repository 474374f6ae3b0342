package e2e

import (
	"regexp"
	"strings"
	"testing"
)

// hostDriverRE matches kernel log lines printed by the NVMe host stack
// (nvme-core, nvme-fabrics, nvme-tcp, the multipath head, the namespaces).
// Every such line must match NormalNVMeLines or the phase's extra list.
var hostDriverRE = regexp.MustCompile(`^(nvme nvme\d+: |nvme_(core|fabrics|tcp): |nvme-(core|fabrics|tcp): |block nvme\d+n\d+: |nvme\d+(c\d+)?n\d+: )`)

// badNVMeRE matches other kernel log lines mentioning NVMe (the in-guest
// reference target nvmet, ext4 on an NVMe device, the block layer) that
// indicate a problem. Such a line fails unless an allow-list entry matches.
var badNVMeRE = regexp.MustCompile(`(?i)nvme.*(error|fail|invalid|unexpected|mismatch|warn|timeout|timed out|reset|abort|refus|reject|C2HTermReq|H2CTermReq|unsupported|not supported|bad |unknown|requeuing|no usable path|reconnect|recovery|deleting|removing|clamping)`)

// badAnyRE matches lines that fail CheckDmesg whatever driver prints them
// (case-sensitive: "loops_per_jiffy" is no oops). These are never allowed.
var badAnyRE = regexp.MustCompile(`(Call Trace|BUG:|WARNING:|\bOops\b|Kernel panic|blocked for more than|hung_task|general protection fault|segfault|I/O error|EXT4-fs error|EXT4-fs warning|JBD2: .*[Ee]rror|blk_update_request|error, dev \S+, sector)`)

// NormalNVMeLines are the only host-driver lines a clean discover/connect/
// I/O/disconnect run may produce.
var NormalNVMeLines = []*regexp.Regexp{
	regexp.MustCompile(`^nvme nvme\d+: new ctrl: NQN "[^"]+", addr [0-9.]+:\d+$`),
	regexp.MustCompile(`^nvme nvme\d+: creating \d+ I/O queues\.$`),
	regexp.MustCompile(`^nvme nvme\d+: mapped \d+/\d+/\d+ default/read/poll queues\.$`),
	// `nvme disconnect` and the end of `nvme discover` print this.
	regexp.MustCompile(`^nvme nvme\d+: Removing ctrl: NQN "[^"]+"$`),
}

// RejectedHostNVMeLines are additionally allowed while a host that is not on
// the subsystem's host list tries to connect: the admin queue Connect fails
// with status 0x4184 (DNR | Connect Invalid Host) and nothing else.
var RejectedHostNVMeLines = []*regexp.Regexp{
	regexp.MustCompile(`^nvme nvme\d+: Connect for subsystem \S+ is not allowed, hostnqn: \S+$`),
	regexp.MustCompile(`^nvme nvme\d+: failed to connect queue: 0 ret=16772$`),
	simultaneousClose,
}

// KilledConnectionNVMeLines are what the host may log about the one
// connection whose target process was killed under it, depending only on
// where in its own work the kill found it: a send that met the reset
// (ECONNRESET), a queue closed from both sides at once, and the keep-alive
// (admin queue 0, command ID 0) that was in flight and is timed out during
// error recovery. No I/O queue's timeout is among them.
var KilledConnectionNVMeLines = []*regexp.Regexp{
	regexp.MustCompile(`^nvme nvme\d+: failed to send request -104$`),
	regexp.MustCompile(`^nvme nvme\d+: queue 0: timeout request 0x0 type 4$`),
	regexp.MustCompile(`^nvme nvme\d+: long keepalive RTT \(\d+ ms\)$`),
	regexp.MustCompile(`^nvme nvme\d+: failed nvme_keep_alive_end_io error=10$`),
	simultaneousClose,
}

// simultaneousClose is nvme-tcp's line for a queue whose socket both sides
// closed at once (TCP_CLOSING, 11): a target that stops, is killed or
// drops a controller closes the sockets while the host's error recovery
// (or its failed connect) shuts the same queue down.
var simultaneousClose = regexp.MustCompile(`^nvme nvme\d+: queue \d+ socket state 11$`)

// FailoverNVMeLines are additionally allowed while a target is killed and
// restarted: the host's TCP error recovery and reconnect messages, the
// multipath head requeuing I/O while no path is live, and
// KilledConnectionNVMeLines. I/O timeouts, aborts of successful paths,
// C2HTermReq, protocol errors and I/O errors stay forbidden.
var FailoverNVMeLines = append([]*regexp.Regexp{
	regexp.MustCompile(`^nvme nvme\d+: starting error recovery$`),
	regexp.MustCompile(`^nvme nvme\d+: failed to connect socket: -111$`),
	regexp.MustCompile(`^nvme nvme\d+: Failed reconnect attempt \d+$`),
	regexp.MustCompile(`^nvme nvme\d+: Reconnecting in \d+ seconds\.\.\.$`),
	regexp.MustCompile(`^nvme nvme\d+: Successfully reconnected \(\d+ attempts?\)$`),
	regexp.MustCompile(`^block nvme\d+n\d+: no usable path - requeuing I/O$`),
}, KilledConnectionNVMeLines...)

// phaseRE matches the marker guest/lib.sh's phase() writes to the kernel log.
var phaseRE = regexp.MustCompile(`basalt-e2e: phase (\S+)$`)

// DmesgProblems returns the kernel log lines that CheckDmesg would reject.
// Lines are attributed to the phase most recently started in the guest ("" before
// the first). Any NVMe host-driver line, and any other problem-looking line
// mentioning NVMe, is rejected unless NormalNVMeLines or extra[phase] matches
// it; lines matching badAnyRE are always rejected.
func DmesgProblems(dmesg string, extra map[string][]*regexp.Regexp) []string {
	var bad []string
	phase := ""
	for _, line := range strings.Split(dmesg, "\n") {
		msg := stripTimestamp(line)
		if m := phaseRE.FindStringSubmatch(msg); m != nil {
			phase = m[1]
			continue
		}
		if badAnyRE.MatchString(msg) {
			bad = append(bad, line)
			continue
		}
		suspect := hostDriverRE.MatchString(msg) || badNVMeRE.MatchString(msg)
		if suspect && !anyMatch(msg, NormalNVMeLines) && !anyMatch(msg, extra[phase]) {
			bad = append(bad, "("+phase+") "+line)
		}
	}
	return bad
}

func anyMatch(s string, res []*regexp.Regexp) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

var timestampRE = regexp.MustCompile(`^\[\s*\d+\.\d+\]\s*`)

func stripTimestamp(line string) string {
	return strings.TrimSpace(timestampRE.ReplaceAllString(line, ""))
}

// CheckDmesg fails the test if the guest's kernel log (taken from console)
// has lines matching the problem patterns that the allow-lists do not cover
// (see DmesgProblems). It also fails if the console has no kernel log.
func CheckDmesg(t testing.TB, console string, extra map[string][]*regexp.Regexp) {
	t.Helper()
	dmesg, err := GuestDmesg(console)
	if err != nil {
		t.Fatalf("CheckDmesg: %v", err)
	}
	if !strings.Contains(dmesg, "Linux version") {
		t.Fatalf("CheckDmesg: dmesg section looks truncated:\n%s", tail(dmesg, 50))
	}
	if bad := DmesgProblems(dmesg, extra); len(bad) > 0 {
		t.Errorf("guest kernel log has %d unexpected line(s):\n  %s\nNVMe-related log:\n%s",
			len(bad), strings.Join(bad, "\n  "), nvmeLines(dmesg))
	}
}

func nvmeLines(dmesg string) string {
	var out []string
	for _, line := range strings.Split(dmesg, "\n") {
		if strings.Contains(strings.ToLower(line), "nvme") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
