# lib.sh: helpers for every e2e guest script (busybox ash). The Go harness
# prepends the variables a script needs, then this file, then the script's own
# fragments. Output conventions, parsed by tests/e2e/vm.go:
#   BASALT-E2E-STEP <text>   a step starts
#   BASALT-E2E-KV <k>=<v>    a value for the Go side to assert
#   BASALT-E2E-MARK <name>   a rendezvous: the Go side acts on it (e.g. kills the target)
#   BASALT-E2E-FAIL <text>   the script gives up (exit 1)
#   BASALT-E2E-BEGIN <name> / BASALT-E2E-END <name>   delimit a command's output
set -u

step() { echo "BASALT-E2E-STEP $*"; }
# phase NAME: start a phase; it is also written to the kernel log so that the
# Go side can apply per-phase allow-lists to dmesg (see dmesg.go).
phase() {
	echo "basalt-e2e: phase $1" >/dev/kmsg
	step "phase $1"
}
kv() { echo "BASALT-E2E-KV $1=$2"; }
mark() { echo "BASALT-E2E-MARK $*"; }
die() {
	echo "BASALT-E2E-FAIL $*"
	exit 1
}

# run CMD...: echo and run CMD; any failure ends the script.
run() {
	echo "+ $*"
	"$@" || die "rc=$? from: $*"
}

# capture NAME CMD...: run CMD with its output between BEGIN/END markers.
capture() {
	_name=$1
	shift
	echo "+ $*"
	echo "BASALT-E2E-BEGIN $_name"
	"$@" 2>&1
	_rc=$?
	echo "BASALT-E2E-END $_name"
	[ "$_rc" = 0 ] || die "rc=$_rc from: $*"
}

# must_fail CMD...: CMD must exit non-zero (bounded by 60 s).
must_fail() {
	echo "+ (must fail) $*"
	if timeout 60 "$@" 2>&1; then
		die "unexpectedly succeeded: $*"
	fi
	return 0
}

# wait_until SECONDS WHAT CMD...: poll CMD every 0.2 s until it succeeds.
wait_until() {
	_secs=$1
	_what=$2
	shift 2
	_wait_n=$((_secs * 5)) # a name of its own: CMD may set the shell's other globals
	while [ "$_wait_n" -gt 0 ]; do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
		_wait_n=$((_wait_n - 1))
	done
	die "timed out after ${_secs}s waiting for $_what"
}

# ctrl_for NQN: print the nvmeX controller name connected to subsystem NQN.
ctrl_for() {
	for _c in /sys/class/nvme/nvme*; do
		[ -e "$_c/subsysnqn" ] || continue
		if [ "$(cat "$_c/subsysnqn")" = "$1" ]; then
			basename "$_c"
			return 0
		fi
	done
	return 1
}

# ns_for NQN NSID: print the block device (/dev/nvmeXnY, the multipath head)
# of namespace NSID in subsystem NQN.
ns_for() {
	for _s in /sys/class/nvme-subsystem/nvme-subsys*; do
		[ -e "$_s/subsysnqn" ] || continue
		[ "$(cat "$_s/subsysnqn")" = "$1" ] || continue
		for _nsd in "$_s"/nvme*n*; do
			[ -e "$_nsd/nsid" ] || continue
			if [ "$(cat "$_nsd/nsid")" = "$2" ] && [ -b "/dev/$(basename "$_nsd")" ]; then
				echo "/dev/$(basename "$_nsd")"
				return 0
			fi
		done
	done
	return 1
}

ctrl_state() { cat "/sys/class/nvme/$1/state" 2>/dev/null; }
state_is() { [ "$(ctrl_state "$1")" = "$2" ]; }
state_is_not() { [ "$(ctrl_state "$1")" != "$2" ]; }
no_ctrl_for() { ! ctrl_for "$1" >/dev/null; }
has_ns() { ns_for "$1" "$2" >/dev/null; }

# make_pattern FILE MIB: a random pattern file (also tests /dev/urandom works).
make_pattern() {
	run dd if=/dev/urandom of="$1" bs=1M count="$2" 2>/dev/null
}

# write_region DEV PATTERN OFFSET_MIB MIB: O_DIRECT write of PATTERN at OFFSET.
write_region() {
	run dd if="$2" of="$1" bs=1M seek="$3" count="$4" oflag=direct conv=fsync 2>&1
}

# verify_region DEV PATTERN OFFSET_MIB MIB: O_DIRECT read-back compared to PATTERN.
verify_region() {
	rm -f /tmp/readback
	run dd if="$1" of=/tmp/readback bs=1M skip="$3" count="$4" iflag=direct 2>&1
	cmp "$2" /tmp/readback || die "data mismatch on $1 at ${3}MiB (+${4}MiB)"
	echo "verified $1 at ${3}MiB (+${4}MiB)"
	rm -f /tmp/readback
}
