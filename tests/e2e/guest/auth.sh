# auth.sh: a Debian 13 host (kernel 6.12, nvme-cli 2.13, tlshd) connecting
# with DH-HMAC-CHAP and NVMe/TCP TLS 1.3 (PSK), right and wrong credentials.
# The same host-side steps run against the kernel's own target in the guest
# (guest/authnvmet.sh, the calibration) and against Basalt; the Go side
# compares what the host printed. Every refused connect must fail within 60 s
# and leave no controller behind.
#
# Needs: ADDR PORT (plain NVMe/TCP) TLS_ADDR TLS_PORT (where TLS is spoken)
# SUBNQN and the hosts, each allowed on SUBNQN:
#   HOST_PLAIN  no credentials (the baseline connect)
#   HOST_DH     DH-HMAC-CHAP: host secret DH_KEY, controller secret DH_CTRL_KEY
#   HOST_TLS    TLS PSK TLS_PSK, no DH-HMAC-CHAP
#   HOST_TLSDH  TLS PSK TLSDH_PSK and DH-HMAC-CHAP (DH_KEY, DH_CTRL_KEY)
# and the wrong ones: DH_WRONG (a host secret), DH_CTRL_WRONG, TLS_WRONG (a
# PSK for HOST_TLS that the target does not have).
#
# Output (besides sections and KVs named after each case): KV <case>_cs, the
# time of its `nvme connect` in centiseconds.

# target_dh_params HASH DHGROUP CASE: a hook the target's fragment may
# define: the hash function and DH group HOST_DH is to authenticate with from
# now on (nvmet chooses what it is configured with; Basalt chooses itself).
target_dh_params() { :; }

# uptime_cs: set NOW to the uptime in centiseconds.
uptime_cs() {
	read -r _up _idle </proc/uptime
	NOW=$((${_up%.*} * 100 + 1${_up#*.} - 100))
}

# tlshd_start: the kernel hands NVMe/TCP TLS handshakes to tlshd over
# netlink; tlshd reads PSKs from the keyrings its configuration names (it
# links them into its session keyring): .nvme, where the kernel looks by
# default, and e2e-wrong, created here for the PSKs a host uses on purpose
# (nvme connect --keyring=e2e-wrong), writable by its owner. Logs to
# /tmp/tlshd.log (printed by tlshd_log).
tlshd_start() {
	step "start tlshd"
	WRONG_RING=$(keyctl newring e2e-wrong @u) || die "keyctl newring e2e-wrong"
	run keyctl setperm "$WRONG_RING" 0x3f3f0000
	cat >/etc/tlshd.conf <<'EOF'
[debug]
loglevel=7
tls=0
nl=0

[authenticate]
keyrings=.nvme;e2e-wrong
EOF
	tlshd -s >/tmp/tlshd.log 2>&1 &
	TLSHD_PID=$!
	sleep 1
	kill -0 "$TLSHD_PID" 2>/dev/null || die "tlshd exited: $(cat /tmp/tlshd.log)"
	kv tlshd_pid "$TLSHD_PID"
}

tlshd_log() {
	echo "BASALT-E2E-BEGIN tlshd-log"
	cat /tmp/tlshd.log
	echo "BASALT-E2E-END tlshd-log"
}

# insert_psk NAME HOSTNQN PSK [KEYRING]: put the retained PSK derived from PSK
# (interchange format) for HOSTNQN and SUBNQN into KEYRING (default .nvme),
# under the identity the kernel looks up ("NVMe0R0x HOSTNQN SUBNQN").
insert_psk() {
	_ring=${4:-.nvme}
	capture "$1" nvme check-tls-key --hostnqn="$2" --subsysnqn="$SUBNQN" --keydata="$3" --keyring="$_ring" --insert
}

# connect_ok NAME CMD...: CMD (an nvme connect) must succeed; its output in
# section NAME, its time in KV NAME_cs. Sets DEV and CTRL.
connect_ok() {
	_n=$1
	shift
	uptime_cs
	_t0=$NOW
	echo "+ $*"
	echo "BASALT-E2E-BEGIN $_n"
	timeout 60 "$@" 2>&1
	_rc=$?
	echo "BASALT-E2E-END $_n"
	uptime_cs
	kv "${_n}_cs" $((NOW - _t0))
	[ "$_rc" = 0 ] || die "$_n: rc=$_rc from: $*"
	wait_until 30 "namespace 1 of $SUBNQN" has_ns "$SUBNQN" 1
	DEV=$(ns_for "$SUBNQN" 1)
	CTRL=$(ctrl_for "$SUBNQN") || die "$_n: no controller for $SUBNQN"
	kv "${_n}_ctrl" "$CTRL"
	kv "${_n}_state" "$(ctrl_state "$CTRL")"
	kv "${_n}_address" "$(tr -d '\n' <"/sys/class/nvme/$CTRL/address" | tr ',' ' ')"
	for _a in dhchap_secret dhchap_ctrl_secret tls_key tls_configured_key tls_keyring; do
		[ -e "/sys/class/nvme/$CTRL/$_a" ] && kv "${_n}_sysfs_$_a" "$(cat "/sys/class/nvme/$CTRL/$_a" 2>/dev/null | sed 's/:.*//')"
	done
}

# connect_refused NAME CMD...: CMD (an nvme connect -v: it names the errno
# the kernel answered the connect with) must fail within 60 s;
# its output in section NAME, its exit status and time in KVs NAME_rc and
# NAME_cs. No controller may be left for SUBNQN.
connect_refused() {
	_n=$1
	shift
	uptime_cs
	_t0=$NOW
	echo "+ (must fail) $*"
	echo "BASALT-E2E-BEGIN $_n"
	timeout 60 "$@" 2>&1
	_rc=$?
	echo "BASALT-E2E-END $_n"
	uptime_cs
	kv "${_n}_rc" "$_rc"
	kv "${_n}_cs" $((NOW - _t0))
	[ "$_rc" = 0 ] && die "$_n: unexpectedly connected: $*"
	[ "$_rc" = 124 ] && die "$_n: nvme connect hung for 60 s: $*"
	wait_until 15 "no controller for $SUBNQN after $_n" no_ctrl_for "$SUBNQN"
}

# io_check NAME: 4 MiB O_DIRECT write and read-back through DEV.
io_check() {
	step "$1: write and read back 4 MiB"
	make_pattern /tmp/pat.$1 4
	write_region "$DEV" /tmp/pat.$1 8 4
	verify_region "$DEV" /tmp/pat.$1 8 4
	rm -f /tmp/pat.$1
}

# fs_check: mkfs.ext4, files, remount, fsck, checksums through DEV.
fs_check() {
	step "ext4 over the authenticated TLS connection"
	run mkfs.ext4 -F -q "$DEV"
	run mount -t ext4 "$DEV" /mnt
	_i=1
	while [ "$_i" -le 8 ]; do
		run dd if=/dev/urandom of="/mnt/f$_i" bs=4k count=$((_i * 32)) 2>/dev/null
		_i=$((_i + 1))
	done
	(cd /mnt && sha256sum f*) >/tmp/sums || die "sha256sum"
	run umount /mnt
	run sh -c 'echo 3 >/proc/sys/vm/drop_caches'
	capture fsck e2fsck -fn "$DEV"
	run mount -t ext4 "$DEV" /mnt
	capture sha256-check sh -c 'cd /mnt && sha256sum -c /tmp/sums'
	run umount /mnt
	kv fs_files "$(wc -l </tmp/sums)"
}

disconnect() {
	capture "$1" nvme disconnect -n "$SUBNQN"
	wait_until 30 "removal of the controller" no_ctrl_for "$SUBNQN"
}

# nvme_tcp: the common options of an nvme connect to ADDR:PORT.
plain_args() { echo "-t tcp -a $ADDR -s $PORT -n $SUBNQN"; }
tls_args() { echo "-t tcp -a $TLS_ADDR -s $TLS_PORT -n $SUBNQN --tls"; }

# dhchap_flow: the DH-HMAC-CHAP cases.
dhchap_flow() {
	phase auth-plain
	step "baseline: connect without credentials"
	# shellcheck disable=SC2046 # word splitting of the common options is meant
	connect_ok plain nvme connect $(plain_args) --hostnqn="$HOST_PLAIN"
	io_check plain
	disconnect disconnect-plain

	phase dh-uni
	step "DH-HMAC-CHAP with the host's secret"
	target_dh_params "hmac(sha256)" null dh
	capture check-dhchap-key nvme check-dhchap-key --key="$DH_KEY"
	# shellcheck disable=SC2046
	connect_ok dh nvme connect $(plain_args) --hostnqn="$HOST_DH" --dhchap-secret="$DH_KEY"
	io_check dh
	disconnect disconnect-dh

	phase dh-wrong
	step "DH-HMAC-CHAP with a wrong host secret (must be refused)"
	# shellcheck disable=SC2046
	connect_refused dh-wrong nvme connect -v $(plain_args) --hostnqn="$HOST_DH" --dhchap-secret="$DH_WRONG"

	phase dh-missing
	step "a host that must authenticate connects without a secret (must be refused)"
	# shellcheck disable=SC2046
	connect_refused dh-missing nvme connect -v $(plain_args) --hostnqn="$HOST_DH"

	phase dh-bidi
	step "bidirectional DH-HMAC-CHAP (the controller authenticates too)"
	target_dh_params "hmac(sha384)" ffdhe2048 dh-bidi
	# shellcheck disable=SC2046
	connect_ok dh-bidi nvme connect $(plain_args) --hostnqn="$HOST_DH" --dhchap-secret="$DH_KEY" --dhchap-ctrl-secret="$DH_CTRL_KEY"
	io_check dh-bidi
	disconnect disconnect-dh-bidi

	phase dh-ctrl-wrong
	step "bidirectional, the host expects another controller secret (must be refused)"
	# shellcheck disable=SC2046
	connect_refused dh-ctrl-wrong nvme connect -v $(plain_args) --hostnqn="$HOST_DH" --dhchap-secret="$DH_KEY" --dhchap-ctrl-secret="$DH_CTRL_WRONG"
}

# tls_flow: the TLS cases; tlshd_start first.
tls_flow() {
	phase tls
	step "TLS 1.3 with the PSK in the .nvme keyring"
	insert_psk insert-psk "$HOST_TLS" "$TLS_PSK"
	capture keys-after-insert sh -c 'cat /proc/keys | sed "s/^[0-9a-f]* //" | grep -E "psk|\.nvme|e2e-wrong"'
	# shellcheck disable=SC2046
	connect_ok tls nvme connect $(tls_args) --hostnqn="$HOST_TLS"
	io_check tls
	disconnect disconnect-tls

	phase tls-plain
	step "a TLS host connects without TLS (must be refused)"
	# shellcheck disable=SC2046
	connect_refused tls-plain nvme connect -v -t tcp -a "$TLS_ADDR" -s "$TLS_PORT" -n "$SUBNQN" --hostnqn="$HOST_TLS"

	phase tls-wrong
	step "TLS with a PSK the target does not have (must be refused)"
	if [ -n "${HOST_TLSW:-}" ]; then
		# The target has another PSK for HOST_TLSW than the one the host
		# holds in its .nvme keyring: no second keyring, whose use by
		# the host and by tlshd's lookups is not what this checks.
		insert_psk insert-wrong-psk "$HOST_TLSW" "$TLS_WRONG"
		# shellcheck disable=SC2046
		connect_refused tls-wrong nvme connect -v $(tls_args) --hostnqn="$HOST_TLSW"
	else
		insert_psk insert-wrong-psk "$HOST_TLS" "$TLS_WRONG" e2e-wrong
		# shellcheck disable=SC2046
		connect_refused tls-wrong nvme connect -v $(tls_args) --hostnqn="$HOST_TLS" --keyring=e2e-wrong
	fi

	phase tls-dh
	step "TLS and bidirectional DH-HMAC-CHAP: ext4 over an authenticated TLS connection"
	insert_psk insert-psk-dh "$HOST_TLSDH" "$TLSDH_PSK"
	# shellcheck disable=SC2046
	connect_ok tls-dh nvme connect $(tls_args) --hostnqn="$HOST_TLSDH" --dhchap-secret="$DH_KEY" --dhchap-ctrl-secret="$DH_CTRL_KEY"
	io_check tls-dh
	fs_check
	disconnect disconnect-tls-dh
}
