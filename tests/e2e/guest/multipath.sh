# multipath.sh: a Linux host attached to a volume of a 3-node cluster through
# native NVMe multipath (one controller per node, one block device), while
# the node that leads the volume is killed -9 and later restarted. The caller
# defines node_kill (the Go side kills the leader) and node_restart (it starts
# the killed node again).
# Needs: ADDR PORT (the node asked for discovery) SUBNQN HOSTNQN NPATHS;
# optional MP_PORTS, every node's port: then one nvme connect per port with
# MP_OPTS (the host's DH-HMAC-CHAP secrets) instead of discovery and
# connect-all.
#
# Timing uses /proc/uptime (10 ms resolution) read with the shell's builtin
# read, so taking a timestamp forks nothing.

# loop geometry: 4 KiB blocks of /tmp/patL written at LOOP_BASE (in blocks).
LOOP_BASE=8192
LOOP_MAX=256

# now_cs: set NOW to the uptime in centiseconds.
now_cs() {
	read -r _up _idle </proc/uptime
	NOW=$((${_up%.*} * 100 + 1${_up#*.} - 100))
}

# The helpers below read sysfs with the builtin read and return values in
# variables, not through $(...): every fork costs tens of milliseconds under
# qemu TCG, hundreds on a loaded machine.

# rd FILE: set RD to the first line of FILE ("" if unreadable).
rd() {
	RD=
	read -r RD 2>/dev/null <"$1" || true
}

# find_ctrls: set CTRLS to the controllers of $SUBNQN ("nvme1 nvme2 ...").
find_ctrls() {
	CTRLS=
	for _c in /sys/class/nvme/nvme*; do
		rd "$_c/subsysnqn"
		[ "$RD" = "$SUBNQN" ] && CTRLS="$CTRLS ${_c##*/}"
	done
	CTRLS=${CTRLS# }
}

# ctrl_info CTRL: set ST to its state and ANA to the ANA state of namespace
# 1 through it (the hidden per-path device nvmeXcYn1), "none" if absent.
ctrl_info() {
	rd "/sys/class/nvme/$1/state"
	ST=$RD
	ANA=none
	for _p in /sys/class/nvme/"$1"/nvme*c*n1/ana_state; do
		[ -e "$_p" ] && rd "$_p" && ANA=$RD
	done
}

# ctrl_port CTRL: set PORT_OF to its trsvcid.
ctrl_port() {
	rd "/sys/class/nvme/$1/address"
	PORT_OF=${RD#*trsvcid=}
	PORT_OF=${PORT_OF%%,*}
}

path_is() {
	ctrl_info "$1"
	[ "$ANA" = "$2" ]
}

ctrls_at_least() {
	find_ctrls
	# shellcheck disable=SC2086 # split CTRLS into words to count them
	set -- "$1" $CTRLS
	[ $(($# - 1)) -ge "$1" ]
}

# count_paths STATE ANA: set COUNT to the number of controllers of $SUBNQN
# in STATE whose path is in ANA state ANA.
count_paths() {
	COUNT=0
	find_ctrls
	for _c in $CTRLS; do
		ctrl_info "$_c"
		[ "$ST" = "$1" ] && [ "$ANA" = "$2" ] && COUNT=$((COUNT + 1))
	done
}

paths_are() {
	count_paths live optimized
	[ "$COUNT" = "$1" ] || return 1
	count_paths live inaccessible
	[ "$COUNT" = "$2" ]
}

# optimized_ctrl: set OPT to the live controller whose path is optimized.
optimized_ctrl() {
	OPT=
	find_ctrls
	for _c in $CTRLS; do
		ctrl_info "$_c"
		if [ "$ST" = live ] && [ "$ANA" = optimized ]; then
			OPT=$_c
			return 0
		fi
	done
	return 1
}

other_optimized() { optimized_ctrl && [ "$OPT" != "$1" ]; }
ctrl_live() { ctrl_info "$1" && [ "$ST" = live ]; }
ctrl_not_live() { ctrl_info "$1" && [ "$ST" != live ]; }

# show_paths NAME: one line per controller (name, port, state, ANA state)
# between BEGIN/END markers, the subsystem's entries and the block devices.
show_paths() {
	echo "BASALT-E2E-BEGIN $1"
	find_ctrls
	for _c in $CTRLS; do
		ctrl_info "$_c"
		ctrl_port "$_c"
		echo "path $_c port=$PORT_OF state=$ST ana=$ANA"
	done
	for _s in /sys/class/nvme-subsystem/nvme-subsys*; do
		rd "$_s/subsysnqn"
		[ "$RD" = "$SUBNQN" ] || continue
		rd "$_s/iopolicy"
		echo "subsystem ${_s##*/} iopolicy=$RD"
		for _e in "$_s"/nvme[0-9]*; do
			[ -e "$_e" ] && echo "subsys-entry ${_e##*/}"
		done
	done
	for _b in /sys/block/nvme*; do
		[ -e "$_b" ] || continue
		_d=no
		[ -b "/dev/${_b##*/}" ] && _d=yes
		echo "blockdev ${_b##*/} dev=$_d"
	done
	echo "BASALT-E2E-END $1"
}

# kill_before_write I: ask for the kill of the node behind the controller
# named in /tmp/kill_now, then spin (builtins only, bounded by 30 s) until
# that controller has left state live, so that the loop's next write meets
# the failover. Writes "I mark_cs dead_cs" to /tmp/kill_at.
kill_before_write() {
	rd /tmp/kill_now
	_victim=$RD
	rm -f /tmp/kill_now
	now_cs
	_mark=$NOW
	node_kill
	RD=live
	while [ "$RD" = live ] && [ "$NOW" -lt $((_mark + 3000)) ]; do
		rd "/sys/class/nvme/$_victim/state"
		now_cs
	done
	echo "$1 $_mark $NOW" >/tmp/kill_at
}

# io_loop DEV: until /tmp/stop exists, write block b = i mod LOOP_MAX of
# /tmp/patL (4 KiB blocks) at LOOP_BASE+b with O_DIRECT, read it back
# with O_DIRECT and compare, timing each I/O. When /tmp/kill_now appears, the
# loop itself has the node killed right before its next write, so that this
# write meets the dead path (kill_before_write). Writes
# /tmp/loop.count (blocks done), /tmp/loop.log (one line per block: i
# start_cs write_cs read_cs end_cs) and at the end /tmp/loop.rc.
io_loop() {
	_i=0
	_rc=0
	: >/tmp/loop.log
	while [ ! -f /tmp/stop ]; do
		_blk=$((_i % LOOP_MAX))
		dd if=/tmp/patL of=/tmp/loop.want bs=4k skip="$_blk" count=1 2>/dev/null || {
			_rc=98
			echo "cannot take block $_i of /tmp/patL" >>/tmp/loop.err
			break
		}
		[ -f /tmp/kill_now ] && kill_before_write "$_i"
		now_cs
		_t0=$NOW
		dd if=/tmp/loop.want of="$1" bs=4k seek=$((LOOP_BASE + _blk)) count=1 oflag=direct 2>/tmp/loop.err || {
			_rc=$?
			echo "write of block $_i failed" >>/tmp/loop.err
			break
		}
		now_cs
		_t1=$NOW
		dd if="$1" of=/tmp/loop.rb bs=4k skip=$((LOOP_BASE + _blk)) count=1 iflag=direct 2>/tmp/loop.err || {
			_rc=$?
			echo "read of block $_i failed" >>/tmp/loop.err
			break
		}
		now_cs
		_t2=$NOW
		cmp -s /tmp/loop.want /tmp/loop.rb || {
			_rc=99
			echo "block $_i read back differs from what was written" >>/tmp/loop.err
			break
		}
		echo "$_i $_t0 $((_t1 - _t0)) $((_t2 - _t1)) $_t2" >>/tmp/loop.log
		_i=$((_i + 1))
		echo "$_i" >/tmp/loop.count
	done
	echo "$_rc" >/tmp/loop.rc
}

# loop_count: set COUNT to the number of blocks the I/O loop has verified.
loop_count() {
	rd /tmp/loop.count
	COUNT=${RD:-0}
}
# loop_beyond N: the loop has verified more than N blocks, or it has ended
# (loop_alive then says why).
loop_beyond() {
	[ -s /tmp/loop.rc ] && return 0
	loop_count
	[ "$COUNT" -gt "$1" ]
}

# loop_alive: die if the I/O loop has ended (an I/O error, a mismatch).
loop_alive() {
	[ -s /tmp/loop.rc ] || return 0
	rd /tmp/loop.rc
	die "the I/O loop ended with rc=$RD: $(cat /tmp/loop.err)"
}

# loop_stats FROM_CS: from /tmp/loop.log, the longest single I/O (write or
# read) and the longest gap between two completed blocks, overall and for
# blocks that started at or after FROM_CS; printed as KVs.
loop_stats() {
	awk -v from="$1" '
	{ op = ($3 > $4) ? $3 : $4
	  if (op > maxop) { maxop = op; maxop_at = $2 }
	  if (NR > 1 && $5 - prev > maxgap) { maxgap = $5 - prev; maxgap_at = prev }
	  if ($2 >= from) n_after++
	  prev = $5 }
	END { printf "loop_max_io_cs=%d\nloop_max_io_at_cs=%d\nloop_max_gap_cs=%d\nloop_max_gap_at_cs=%d\nloop_blocks_after_kill=%d\n",
	      maxop, maxop_at, maxgap, maxgap_at, n_after }' /tmp/loop.log | while read -r _l; do kv "${_l%%=*}" "${_l#*=}"; done
}

multipath_flow() {
	if [ -n "${MP_PORTS:-}" ]; then
		phase mp-connect
		step "connect to every node's port ($MP_PORTS), no discovery"
		for _p in $MP_PORTS; do
			# shellcheck disable=SC2086 # MP_OPTS: extra nvme options, one word each
			capture "connect-$_p" timeout 90 nvme connect -t tcp -a "$ADDR" -s "$_p" -n "$SUBNQN" --hostnqn "$HOSTNQN" \
				--reconnect-delay=1 --ctrl-loss-tmo=120 ${MP_OPTS:-}
		done
	else
		phase mp-discover
		step "discover through one node"
		capture discover timeout 60 nvme discover -t tcp -a "$ADDR" -s "$PORT" --hostnqn "$HOSTNQN"

		phase mp-connect
		step "connect-all through the same node"
		# shellcheck disable=SC2086 # MP_OPTS: extra nvme options, one word each
		capture connect-all timeout 90 nvme connect-all -t tcp -a "$ADDR" -s "$PORT" --hostnqn "$HOSTNQN" \
			--reconnect-delay=1 --ctrl-loss-tmo=120 ${MP_OPTS:-}
	fi
	wait_until 60 "$NPATHS controllers for $SUBNQN" ctrls_at_least "$NPATHS"
	wait_until 30 "namespace 1 of $SUBNQN" has_ns "$SUBNQN" 1
	wait_until 30 "1 live optimized and $((NPATHS - 1)) live inaccessible paths" paths_are 1 $((NPATHS - 1))
	dev=$(ns_for "$SUBNQN" 1)
	kv dev "$dev"
	find_ctrls
	kv ctrls "$CTRLS"
	optimized_ctrl || die "no optimized path"
	opt=$OPT
	ctrl_port "$opt"
	kv optimized_before "$opt"
	kv optimized_port_before "$PORT_OF"
	capture list-subsys nvme list-subsys
	capture list-subsys-dev nvme list-subsys "$dev"
	show_paths paths-before

	phase mp-io
	step "write and read back a pattern through the multipath device"
	make_pattern /tmp/patA 4
	make_pattern /tmp/patL 1
	write_region "$dev" /tmp/patA 0 4
	verify_region "$dev" /tmp/patA 0 4

	step "verified 4 KiB direct writes and reads in the background"
	rm -f /tmp/stop /tmp/loop.rc /tmp/loop.count /tmp/loop.err /tmp/kill_now /tmp/kill_at
	io_loop "$dev" &
	wait_until 60 "10 verified blocks" loop_beyond 9
	loop_alive

	phase mp-failover
	step "kill the node that leads the volume (path $opt), right before a write of the I/O loop"
	echo "$opt" >/tmp/kill_now
	wait_until 60 "the I/O loop to have the node killed" test -s /tmp/kill_at -o -s /tmp/loop.rc
	loop_alive
	read -r kill_block kill_cs dead_cs </tmp/kill_at
	kv kill_block "$kill_block"
	kv kill_cs "$kill_cs"
	kv dead_cs "$dead_cs"
	wait_until 30 "$opt to leave state live" ctrl_not_live "$opt"
	kv killed_state "$ST"
	wait_until 60 "another path to become optimized" other_optimized "$opt"
	now_cs
	kv new_optimized_cs "$NOW"
	kv optimized_after "$OPT"
	ctrl_port "$OPT"
	kv optimized_port_after "$PORT_OF"
	loop_count
	at=$COUNT
	wait_until 60 "10 more verified blocks after the failover" loop_beyond $((at + 9))
	loop_alive
	capture list-subsys-failover nvme list-subsys "$dev"
	show_paths paths-failover

	step "restart the killed node"
	now_cs
	kv restart_cs "$NOW"
	node_restart
	wait_until 60 "$opt to reconnect" ctrl_live "$opt"
	now_cs
	kv rejoined_cs "$NOW"
	wait_until 30 "$opt to be a live inaccessible path" path_is "$opt" inaccessible
	loop_count
	at=$COUNT
	wait_until 60 "5 more verified blocks after the rejoin" loop_beyond $((at + 4))
	loop_alive
	touch /tmp/stop
	wait_until 60 "the I/O loop to stop" test -s /tmp/loop.rc
	kv loop_rc "$(cat /tmp/loop.rc)"
	loop_count
	kv loop_blocks "$COUNT"
	[ "$(cat /tmp/loop.rc)" = 0 ] || die "I/O loop failed: rc=$(cat /tmp/loop.rc): $(cat /tmp/loop.err)"
	loop_stats "$kill_cs"
	capture loop-log cat /tmp/loop.log

	phase mp-after
	capture list-subsys-after nvme list-subsys "$dev"
	show_paths paths-after
	step "read back everything written before, during and after the failover"
	run sh -c 'echo 3 >/proc/sys/vm/drop_caches'
	verify_region "$dev" /tmp/patA 0 4
	loop_count
	n=$COUNT
	[ "$n" -gt "$LOOP_MAX" ] && n=$LOOP_MAX
	run dd if=/tmp/patL of=/tmp/loop.all bs=4k count="$n" 2>/dev/null
	run dd if="$dev" of=/tmp/loop.rball bs=4k skip="$LOOP_BASE" count="$n" iflag=direct 2>/dev/null
	cmp /tmp/loop.all /tmp/loop.rball || die "loop blocks read back differ"
	kv verified_loop_blocks "$n"

	step "disconnect"
	capture disconnect nvme disconnect -n "$SUBNQN"
	wait_until 30 "removal of the controllers" no_ctrl_for "$SUBNQN"
	step "done"
}
